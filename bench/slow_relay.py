"""Slow relay: `mailroom run` against Postfix's smtp-sink holding each mail 1 s
(issue 14, item 5). A provider answers each mail after 0.1-1 s, so what a
runner must do is keep many connections busy at a small CPU cost per mail.

For 1 runner x 256 connections (v0.3.0's threads reached 0.85 of the ideal
there), 4 runners x 256 and 1 runner x 1,024 connections (the targets): enough
queued mail for about 30 s of sending (10 s with --quick), runners started
idle and LISTENing, then woken. Figures over the steady state (from 10 % to
90 % of the mail sent, read from the queue every 0.25 s):

- mails/s and its ratio to the ideal runners x connections / 1 s,
- runner CPU per mail (user + system of the runner processes, /proc),
- peak RSS (VmHWM) of a runner.

smtp-sink is a C server (Debian package postfix; `make bench` installs it
when run as root), so the sink is not what is measured. It listens on
127.0.0.1 only; as root it runs with `-u nobody`.

    .venv/bin/python bench/slow_relay.py [--quick]
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (bench_parser, cpu_seconds, load_queued, mailroom_runners, peak_rss_mb,  # noqa: E402
                     scratch_database, target)

DELAY = 1.0  # seconds smtp-sink holds each mail (-w)
# (runners, connections per runner): 1 x 256 for comparison with v0.3.0's
# threads (0.85 of the ideal there); the targets are for the other two.
CONFIGS = ((1, 256), (4, 256), (1, 1024))
RATIO_TARGET, CPU_TARGET_US, RSS_TARGET_MB = 0.9, 400.0, 150.0


def smtp_sink_binary() -> str | None:
    return shutil.which("smtp-sink") or next(
        (p for p in ("/usr/sbin/smtp-sink", "/usr/lib/postfix/sbin/smtp-sink") if os.access(p, os.X_OK)), None)


def _raise_open_files(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n if hard == resource.RLIM_INFINITY else min(n, hard), hard))


@contextmanager
def smtp_sink(binary: str, connections: int):
    """smtp-sink on a free loopback port, holding each mail DELAY s; yields its smtp:// URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _raise_open_files(connections + 256)
    cmd = [binary, *(["-u", "nobody"] if os.geteuid() == 0 else []), "-m", str(connections + 64),
           "-w", str(int(DELAY)), f"127.0.0.1:{port}", "4096"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("smtp-sink did not start: " + (proc.stderr.read() or b"").decode())
                time.sleep(0.05)
        yield f"smtp://127.0.0.1:{port}?timeout=30", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def sent(conn) -> int:
    return conn.execute("SELECT count(*) FROM mailroom.messages WHERE status = 'sent'").fetchone()[0]


def measure(url: str, smtp: str, runners: int, connections: int, seconds: float):
    total = int(runners * connections / DELAY * seconds)
    with psycopg.connect(url, autocommit=True) as conn, \
            mailroom_runners(url, smtp, runners, "--concurrency", str(connections), "--batch", "200",
                             name=f"slow{runners}x{connections}") as procs:
        pids = [p.proc.pid for p in procs]
        load_queued(conn, total, f"{runners}x{connections}")
        conn.execute("NOTIFY mailroom, 'default'")
        t_start = t_end = None
        cpu_start = cpu_end = 0.0
        n_start = n_end = 0
        deadline = time.monotonic() + seconds * 4 + 60
        while True:
            n, now = sent(conn), time.monotonic()
            if t_start is None and n >= total * 0.1:
                t_start, n_start, cpu_start = now, n, sum(cpu_seconds(p) for p in pids)
            if t_start is not None and n >= total * 0.9:
                t_end, n_end, cpu_end = now, n, sum(cpu_seconds(p) for p in pids)
                break
            if now > deadline:
                raise RuntimeError(f"only {n:,} of {total:,} sent in time")
            time.sleep(0.25)
        rss = max(peak_rss_mb(p) for p in pids)
        while sent(conn) < total and time.monotonic() < deadline:
            time.sleep(0.25)
    mails = n_end - n_start
    rate = mails / (t_end - t_start)
    ideal = runners * connections / DELAY
    return {"runners": runners, "connections": connections, "mails": total, "rate": rate, "ideal": ideal,
            "ratio": rate / ideal, "cpu_us": (cpu_end - cpu_start) / mails * 1e6, "rss": rss,
            "window": t_end - t_start}


def main() -> int:
    args = bench_parser(__doc__).parse_args()
    seconds = 10.0 if args.quick else 30.0
    binary = smtp_sink_binary()
    print(f"mailroom bench: slow relay (smtp-sink -w {DELAY:.0f}: each mail held {DELAY:.0f} s),"
          f" about {seconds:.0f} s of sending per configuration")
    if binary is None:
        print("smtp-sink not found: install Debian's postfix package (make bench does, as root)")
        target("slow relay measured", "smtp-sink missing", False)
        return 0
    rows = []
    with scratch_database("mailroom_bench_slow_relay") as url:
        for runners, connections in CONFIGS:
            with smtp_sink(binary, runners * connections) as (smtp, _):
                rows.append(measure(url, smtp, runners, connections, seconds))
    print(f"{'runners':>7} {'conns':>6} {'mails':>7} {'mails/s':>8} {'ideal':>6} {'ratio':>6}"
          f" {'CPU/mail':>9} {'peak RSS':>9} {'window':>7}")
    for r in rows:
        print(f"{r['runners']:>7} {r['connections']:>6} {r['mails']:>7,} {r['rate']:>8.0f} {r['ideal']:>6.0f}"
              f" {r['ratio']:>6.2f} {r['cpu_us']:>7.0f}us {r['rss']:>6.1f} MB {r['window']:>6.1f}s")
    for r in rows[1:]:
        what = f"{r['runners']} x {r['connections']}"
        target(f"mails/s at {what} >= {RATIO_TARGET} x ideal ({r['ideal']:.0f}/s)",
               f"{r['ratio']:.2f} x ({r['rate']:.0f}/s)", r["ratio"] >= RATIO_TARGET)
        target(f"runner CPU per mail at {what} <= {CPU_TARGET_US:.0f} us", f"{r['cpu_us']:.0f} us",
               r["cpu_us"] <= CPU_TARGET_US)
    big = rows[-1]
    target(f"runner peak RSS at {big['connections']} connections <= {RSS_TARGET_MB:.0f} MB", f"{big['rss']:.1f} MB",
           big["rss"] <= RSS_TARGET_MB)
    return 0


if __name__ == "__main__":
    sys.exit(main())
