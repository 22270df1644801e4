"""Slow relay: `mailroom run` against Postfix's smtp-sink holding each mail 1 s
(issue 14, item 5). A provider answers each mail after 0.1-1 s, so what a
runner must do is keep many connections busy at a small CPU cost per mail.

For 1 runner x 256 connections (v0.3.0's threads reached 0.85 of the ideal
there), 4 runners x 256 and 1 runner x 1,024 connections (the targets): enough
queued mail for about 30 s of sending (10 s with --quick), runners started
idle and LISTENing, then woken. Figures over the steady state, from the
10 % to the 90 % finishing row of the ledger (attempts.finished_at; the bench
only counts finishing rows by their index while it waits, every 0.25 s, so its
polling costs the database next to nothing):

- mails/s and its ratio to the ideal runners x connections / 1 s,
- the same ratio for the sink alone: what smtp-sink sustains at that many
  connections for a trivial pipelining asyncio client in this process (no
  database, no rendering), measured just before, against the sink kept
  awake and left idle (see below): a reference for what the sink and the
  machine allow,
- runner CPU per mail (user + system of the runner processes, /proc,
  interpolated at the window's ends),
- smtp-sink's CPU per mail, the same way: on a shared 2-core machine the
  relay competes with the runners for the cores (at 1,024 sessions it
  spends about as much per mail as a runner: each command re-arms its
  read timer in a timer list it walks from the start),
- peak RSS (VmHWM) of a runner.

Options for investigating (make bench passes none of them): --configs 1x1024,
--seconds N, --delay 0 (a fast sink: CPU per mail without the wait),
--sessions (scrape each runner's Prometheus metrics every poll and print how
many SMTP sessions sat idle waiting for claimed mail), --no-sink-alone,
--profile DIR (py-spy record of the first runner over the window, if py-spy
is installed), --trace DIR (each runner's send timeline, mailroom.send.sendtrace:
how long a session takes from a reply to its next command, and how one
mail's cycle is split), --rounds N (repeat the configurations), --ab DIR (each
round also runs the runner package in DIR, e.g. main's runner/ copied there,
in alternating order: an A/B in one run, for a busy machine, where CPU per
mail is the figure to trust), --sink awake,idle and --sink-nice N[,N] (smtp-sink's
scheduling priority, e.g. -10 as root) measure against each in turn.

smtp-sink is a C server (Debian package postfix; `make bench` installs it
when run as root); its -w holds the reply to DATA (the 354; the 250s to a
pipelined MAIL and RCPT come with it), so a mail takes 1 s plus two round
trips. Its timers count whole seconds (Postfix's util/events.c): a held
reply is due at the start of the second after the one its DATA came in and
goes out at the sink's first wake-up from then on; and when its loop goes
idle it computes how long to sleep in whole seconds too (select_delay =
timer->when - time(), then epoll_wait that many seconds), so after the last
command of a burst it sleeps a whole second although the held replies are
due sooner. The sessions run in bursts, each starting late by the length of
the one before until the phase wraps past a second: what a client does
between the replies of one burst (1,024 times for 1 x 1,024) lands on every
session's cycle, and the sink alone with a trivial client reached anything
from 0.78 to 1.01 x at 1,024 sessions depending on that phase. That is why
the reference stopped at 0.85 x at 1 x 1,024: the sink's idle second, not
the trivial client (with the sink kept awake the same client reaches
1.00 x). So by default the bench keeps the sink awake (--sink awake: a
second client, its own process, sends it a NOOP every 10 ms, so its loop
fires each held reply within 10 ms of the second it is due; a busy relay has
no idle second); --sink idle measures against the sink as it is, and the
sink alone is measured both ways in every run. Kept awake, a session keeps
its 1 mail/s as long as the runner answers a burst within the second, so the
ratio then says the runner keeps every session busy, and --trace shows what
each mail's reply waits for. With --late-session S one session of the sink
alone waits S s after each mail. It
listens on 127.0.0.1 only; as root it runs with `-u nobody`.

    .venv/bin/python bench/slow_relay.py [--quick] [--configs RxC,...] [--delay S] ...
"""

from __future__ import annotations

import argparse
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
def smtp_sink(binary: str, connections: int, delay: float = DELAY, awake: bool = True, nice: int = 0):
    """smtp-sink on a free loopback port, holding each mail `delay` s (0: no
    wait); yields its smtp:// URL, port and pid. awake: with a client that
    sends it a NOOP every KEEP_AWAKE_S (see keep_awake), so its held replies
    go out at the whole second they are due, not up to a second later.
    nice: its scheduling priority (setpriority; below 0 needs root)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _raise_open_files(connections + 256)
    # -w holds the reply to DATA (the 354), not the one after the body.
    cmd = [binary, *(["-u", "nobody"] if os.geteuid() == 0 else []), "-m", str(connections + 64),
           *(["-w", str(int(delay))] if delay else []), f"127.0.0.1:{port}", "4096"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    waker = None
    try:
        if nice:
            os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("smtp-sink did not start: " + (proc.stderr.read() or b"").decode())
                time.sleep(0.05)
        if awake and delay:
            waker = subprocess.Popen([sys.executable, __file__, "--keep-awake", str(port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            if waker.stdout.readline() != b"awake\n":
                raise RuntimeError("the client keeping smtp-sink awake did not start")
        yield f"smtp://127.0.0.1:{port}?timeout=30", port, proc.pid
    finally:
        if waker is not None:
            waker.kill()
            waker.wait(10)
        proc.terminate()
        proc.wait(10)


KEEP_AWAKE_S = 0.01


def keep_awake(port: int) -> None:
    """What --keep-awake PORT runs (its own process, so it takes nothing from
    the client measured): one session that sends NOOP every KEEP_AWAKE_S.
    smtp-sink's timers count whole seconds and its event loop computes how
    long to sleep when it goes idle, also in whole seconds (Postfix's
    util/events.c: select_delay = timer->when - time(), then epoll_wait for
    that many seconds): after the last command of a burst it sleeps a whole
    second even when the held replies are due sooner, so each burst starts
    late by the length of the one before. A NOOP wakes the loop, which fires
    the timers that are due; a busy relay has no such idle second."""
    with socket.create_connection(("127.0.0.1", port)) as s, s.makefile("rb") as replies:
        replies.readline()
        s.sendall(b"EHLO awake.invalid\r\n")
        while replies.readline()[3:4] == b"-":
            pass
        print("awake", flush=True)
        while True:
            s.sendall(b"NOOP\r\n")
            replies.readline()
            time.sleep(KEEP_AWAKE_S)


def finished(conn) -> int:
    """Mail with its finishing ledger row: an index-only count (attempts_finished_at_idx)."""
    return conn.execute("SELECT count(*) FROM mailroom.attempts WHERE finished_as IS NOT NULL").fetchone()[0]


def nth_finish(conn, n: int) -> float:
    """Epoch of the n-th (from 1) finishing ledger row."""
    return conn.execute("SELECT extract(epoch FROM finished_at)::float8 FROM mailroom.attempts"
                        " WHERE finished_as IS NOT NULL ORDER BY finished_at OFFSET %s LIMIT 1",
                        (n - 1,)).fetchone()[0]


def interpolate(samples: list[tuple[float, float]], t: float) -> float:
    """The value at time t of a series of (time, value) samples, linearly between them."""
    for (t0, v0), (t1, v1) in zip(samples, samples[1:]):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return samples[0][1] if t < samples[0][0] else samples[-1][1]


def scrape(port: int) -> dict[str, float]:
    """The mailroom_* gauges of a runner's /metrics."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.startswith(("mailroom_sessions_idle ", "mailroom_sends_waiting ", "mailroom_in_flight "))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sink_alone(port: int, connections: int, seconds: float, delay: float, late: float = 0.0) -> float:
    """Mails/s the sink sustains at `connections` for a trivial client: one
    pipelined MAIL/RCPT/DATA write, the body, the reply, again for `seconds`
    once every session is open (opening 1,024 takes seconds on a busy
    machine). The sum of each session's own rate between its first and last
    mail: the sessions start together and finish in bursts, which a count
    over a fixed window would catch one too many or too few of. `late`:
    the first session waits that long after each mail (--late-session; see
    the module docstring for what that does to the others)."""
    import asyncio

    body = (b"From: a@bench.invalid\r\nTo: b@bench.invalid\r\nSubject: sink alone\r\n\r\n"
            + b"Hello, your order has shipped.\r\n" * 10 + b".\r\n")
    finishes: list[list[float]] = []

    async def session(opened: list, go: asyncio.Event, wait_after: float):
        mine: list[float] = []
        finishes.append(mine)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await reader.readline()
        writer.write(b"EHLO bench.invalid\r\n")
        while (await reader.readline())[3:4] == b"-":
            pass
        opened.append(1)
        await go.wait()
        while True:
            writer.write(b"MAIL FROM:<a@bench.invalid>\r\nRCPT TO:<b@bench.invalid>\r\nDATA\r\n")
            for _ in range(3):
                await reader.readline()
            writer.write(body)
            await reader.readline()
            mine.append(time.monotonic())
            if wait_after:
                await asyncio.sleep(wait_after)

    async def run():
        opened: list = []
        go = asyncio.Event()
        tasks = [asyncio.create_task(session(opened, go, late if i == 0 else 0.0)) for i in range(connections)]
        deadline = time.monotonic() + 60
        while len(opened) < connections and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        go.set()
        await asyncio.sleep(seconds)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    _raise_open_files(connections + 256)
    asyncio.run(run())
    return sum((len(f) - 1) / (f[-1] - f[0]) for f in finishes if len(f) >= 2 and f[-1] > f[0])


def _ms(values: list[float], scale: float = 1000, unit: str = "ms") -> str:
    if not values:
        return "-"
    v = sorted(values)
    return (f"p50 {v[len(v) // 2] * scale:6.1f}  p90 {v[int(len(v) * 0.9)] * scale:6.1f}"
            f"  p99 {v[int(len(v) * 0.99)] * scale:6.1f}  {unit}")


def _bursts(held: list, written: list, t_start: float, t_end: float) -> tuple[list, list]:
    """One runner's bursts (see the docstring): from the first 354 it saw to
    the last command it wrote before the next burst's first 354; returns each
    burst's length and the runner's CPU time in it per mail of the burst."""
    held.sort()
    written.sort()
    starts = [i for i in range(len(held)) if i == 0 or held[i][0] - held[i - 1][0] > 0.3]
    walls, cpus = [], []
    for k, i in enumerate(starts[:-1]):
        begin, end_at = held[i], held[starts[k + 1]][0]
        if not t_start <= begin[0] <= t_end:
            continue
        last = [w for w in written if begin[0] <= w[0] < end_at]
        if last:
            walls.append(last[-1][0] - begin[0])
            cpus.append((last[-1][1] - begin[1]) / (starts[k + 1] - i))
    return walls, cpus


def trace_summary(files: list[Path], t_start: float, t_end: float) -> list[str]:
    """The send timelines (mailroom.send.sendtrace) of mail whose commands were
    written inside the window: the split of one mail's cycle, and the event
    loop's busy time per iteration (a reply that arrives while the loop is
    busy waits for the next iteration)."""
    import json

    parts: dict[str, list[float]] = {k: [] for k in (
        "reply -> next command", "  reply -> job taken", "  job -> built", "  built -> command written",
        "command -> 354 (sink's hold)", "354 -> body written", "body -> 250", "cycle (command to command)")}
    busy, ready, spent, wall, pauses = [], [], 0.0, 0.0, []
    burst_wall, burst_cpu = [], []
    for f in files:
        data = json.loads(f.read_text())
        held, written = [], []  # (time, process CPU time) of each 354 seen and each command written
        for timeline in data["sessions"]:
            mails, mail = [], None
            events = list(zip(timeline[0::4], timeline[1::4], timeline[2::4], timeline[3::4]))
            held += [(t, cpu) for what, t, code, cpu in events if what == "reply" and code == 354]
            written += [(t, cpu) for what, t, _, cpu in events if what == "cmd"]
            for ev in events:
                if ev[0] == "job":
                    mail = {"job": ev[1], "replies": []}
                    mails.append(mail)
                elif mail is not None:
                    if ev[0] == "reply":
                        mail["replies"].append(ev[1])
                    else:
                        mail[ev[0]] = ev[1]
            for prev, m in zip(mails, mails[1:]):
                if not ("cmd" in m and "body" in m and len(m["replies"]) >= 4 and len(prev["replies"]) >= 4
                        and "cmd" in prev and t_start <= m["cmd"] <= t_end):
                    continue
                last = prev["replies"][-1]
                parts["reply -> next command"].append(m["cmd"] - last)
                parts["  reply -> job taken"].append(m["job"] - last)
                parts["  job -> built"].append(m["built"] - m["job"])
                parts["  built -> command written"].append(m["cmd"] - m["built"])
                parts["command -> 354 (sink's hold)"].append(m["replies"][2] - m["cmd"])
                parts["354 -> body written"].append(m["body"] - m["replies"][2])
                parts["body -> 250"].append(m["replies"][3] - m["body"])
                parts["cycle (command to command)"].append(m["cmd"] - prev["cmd"])
        walls, cpus = _bursts(held, written, t_start, t_end)
        burst_wall += walls
        burst_cpu += cpus
        flat = data["loop"]
        loop = [it for it in zip(flat[0::3], flat[1::3], flat[2::3]) if t_start <= it[1] <= t_end]
        pauses += [(end - start, gen) for start, end, gen in zip(data["gc"][0::3], data["gc"][1::3], data["gc"][2::3]) if t_start <= start <= t_end]
        for (_, returned, n), (called, _, _) in zip(loop, loop[1:]):
            busy.append(called - returned)
            ready.append(n)
        if loop:
            spent += sum(called - returned for (_, returned, _), (called, _, _) in zip(loop, loop[1:]))
            wall += loop[-1][1] - loop[0][1]
    lines = [f"{name:<30} {_ms(v)}  ({len(v):,})" for name, v in parts.items()]
    if busy:
        ready.sort()
        lines.append(f"{'loop busy per iteration':<30} {_ms(busy)}  ({len(busy):,} iterations,"
                     f" ready events p50 {ready[len(ready) // 2]}, busy {spent / wall:.0%} of the time)")
    if burst_wall:
        lines.append(f"{'burst: first 354 -> last command':<30} {_ms(burst_wall)}  ({len(burst_wall)} bursts)")
        lines.append(f"{'burst: runner CPU per mail':<30} {_ms(burst_cpu, 1e6, 'us')}  (the runner process's, in the burst)")
    for gen in (0, 1, 2):
        mine = [p for p, g in pauses if g == gen]
        if mine:
            lines.append(f"{'garbage collection gen ' + str(gen):<30} {_ms(mine)}  ({len(mine):,}, max {max(mine) * 1000:.1f} ms)")
    return lines


def measure(url: str, smtp: str, runners: int, connections: int, seconds: float, delay: float,
            sessions: bool = False, profile: Path | None = None, runner_path: Path | None = None,
            trace: Path | None = None, sink_pid: int | None = None):
    # With no wait, as many mails as a slow relay would take in `seconds` at these connections.
    total = int(runners * connections / max(delay, DELAY) * seconds)
    metric_ports = [free_port() for _ in range(runners)] if sessions else []
    env = {"PYTHONPATH": str(runner_path)} if runner_path else {}
    if trace is not None:
        trace_prefix = trace / f"slow{runners}x{connections}-{'A' if runner_path else 'B'}-{time.time():.0f}"
        env["MAILROOM_SEND_TRACE"] = str(trace_prefix)
    with psycopg.connect(url, autocommit=True) as conn, \
            mailroom_runners(url, smtp, runners, "--concurrency", str(connections), "--batch", "200",
                             name=f"slow{runners}x{connections}",
                             per_runner=[("--metrics-port", str(p)) for p in metric_ports] or None,
                             env=env or None) as procs:
        pids = [p.proc.pid for p in procs]
        load_queued(conn, total, f"{runners}x{connections}")
        conn.execute("NOTIFY mailroom, 'default'")
        cpu: list[tuple[float, float]] = []
        sink_cpu: list[tuple[float, float]] = []
        idle: list[tuple[float, float, float]] = []  # (time, idle sessions, claimed mail waiting)
        spy = None
        deadline = time.monotonic() + seconds * 4 + 60
        while True:
            n, now = finished(conn), time.time()
            cpu.append((now, sum(cpu_seconds(p) for p in pids)))
            if sink_pid is not None:
                sink_cpu.append((now, cpu_seconds(sink_pid)))
            if metric_ports:
                gauges = [scrape(p) for p in metric_ports]
                idle.append((now, sum(g["mailroom_sessions_idle"] for g in gauges),
                             sum(g["mailroom_sends_waiting"] for g in gauges)))
            if profile is not None and spy is None and n >= total * 0.1:
                spy = subprocess.Popen(["py-spy", "record", "--pid", str(pids[0]), "--rate", "50",
                                        "--duration", str(int(seconds * 0.7)), "--format", "speedscope",
                                        "-o", str(profile / f"slow{runners}x{connections}.json")],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if n >= total:
                break
            if time.monotonic() > deadline:
                if n < total * 0.9:
                    raise RuntimeError(f"only {n:,} of {total:,} sent in time")
                break  # the window is complete; a few retried mails wait for their backoff
            time.sleep(0.25)
        rss = max(peak_rss_mb(p) for p in pids)
        first, last = int(total * 0.1), int(total * 0.9)
        t_start, t_end = nth_finish(conn, first), nth_finish(conn, last)
        if spy is not None:
            spy.wait(60)
    mails = last - first
    rate = mails / (t_end - t_start)
    ideal = runners * connections / DELAY
    cpu_used = interpolate(cpu, t_end) - interpolate(cpu, t_start)
    sink_used = interpolate(sink_cpu, t_end) - interpolate(sink_cpu, t_start) if sink_cpu else None
    steady = [(i, w) for t, i, w in idle if t_start <= t <= t_end]
    traced = (trace_summary(sorted(trace.glob(trace_prefix.name + ".*")), t_start, t_end)
              if trace is not None else [])
    return {"trace": traced, "runners": runners, "connections": connections, "mails": total, "rate": rate, "ideal": ideal,
            "ratio": rate / ideal, "cpu_us": cpu_used / mails * 1e6, "rss": rss, "window": t_end - t_start,
            "idle": steady, "sink_cpu_us": sink_used / mails * 1e6 if sink_used is not None else None}


def _configs(text: str) -> tuple[tuple[int, int], ...]:
    try:
        return tuple((int(r), int(c)) for r, c in (part.lower().split("x") for part in text.split(",")))
    except ValueError:
        raise SystemExit(f"--configs: {text!r}: expected RUNNERSxCONNECTIONS[,...], e.g. 1x1024,4x256") from None


def _sink_modes(text: str) -> tuple[bool, ...]:
    modes = {"awake": True, "idle": False}
    try:
        return tuple(modes[m] for m in text.split(","))
    except KeyError:
        raise SystemExit(f"--sink: {text!r}: expected awake, idle or awake,idle") from None


def _nice_values(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(f"--sink-nice: {text!r}: expected N[,N...], e.g. 0,-10") from None


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--configs", type=_configs, default=CONFIGS, help="e.g. 1x1024,4x256")
    parser.add_argument("--seconds", type=float, default=None, help="sending time per configuration")
    parser.add_argument("--delay", type=float, default=DELAY, help="seconds the sink holds each mail (0: none)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat the configurations, alternating")
    parser.add_argument("--sessions", action="store_true", help="sample idle SMTP sessions (runner metrics)")
    parser.add_argument("--no-sink-alone", dest="sink_alone", action="store_false",
                        help="skip measuring the sink alone")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy profiles of the first runner here")
    parser.add_argument("--late-session", type=float, default=None, metavar="S",
                        help="only the sink alone, with one session waiting S s after each mail, then exit")
    parser.add_argument("--trace", type=Path, default=None, metavar="DIR",
                        help="send timelines of the runners here, summarised (mailroom.send.sendtrace)")
    parser.add_argument("--sink", type=_sink_modes, default=(True,), metavar="awake,idle",
                        help="measure the runners against smtp-sink kept awake (the default), idle, or both")
    parser.add_argument("--sink-nice", type=_nice_values, default=(0,), metavar="N[,N]",
                        help="smtp-sink's scheduling priority (e.g. -10 as root; a list alternates)")
    parser.add_argument("--keep-awake", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--ab", type=Path, default=None, metavar="DIR",
                        help="A/B: also run the mailroom package found in DIR (alternating)")
    args = parser.parse_args()
    if args.keep_awake is not None:
        keep_awake(args.keep_awake)
        return 0
    seconds = args.seconds or (10.0 if args.quick else 30.0)
    binary = smtp_sink_binary()
    print(f"mailroom bench: slow relay (smtp-sink -w {args.delay:.0f}: each mail held {args.delay:.0f} s),"
          f" about {seconds:.0f} s of sending per configuration")
    if binary is None:
        print("smtp-sink not found: install Debian's postfix package (make bench does, as root)")
        target("slow relay measured", "smtp-sink missing", False)
        return 0
    if args.late_session is not None:
        for runners, connections in args.configs:
            with smtp_sink(binary, runners * connections, args.delay, args.sink[0]) as (_, port, _):
                on_time = sink_alone(port, runners * connections, min(seconds / 2, 10.0), args.delay)
            with smtp_sink(binary, runners * connections, args.delay, args.sink[0]) as (_, port, _):
                one_late = sink_alone(port, runners * connections, min(seconds / 2, 10.0), args.delay,
                                      args.late_session)
            ideal = runners * connections / DELAY
            print(f"sink alone at {runners * connections} sessions: {on_time / ideal:.2f} x ideal;"
                  f" with one session {args.late_session:g} s late after each mail: {one_late / ideal:.2f} x")
        return 0
    for d in (args.profile, args.trace):
        if d is not None:
            d.mkdir(parents=True, exist_ok=True)
    rows = []
    with scratch_database("mailroom_bench_slow_relay") as url:
        for round_ in range(args.rounds):
            for runners, connections in args.configs:
                for nice in args.sink_nice:
                    alone = {}  # the sink alone, kept awake and as it is
                    for awake in (True, False):
                        with smtp_sink(binary, runners * connections, args.delay, awake, nice) as (smtp, port, _):
                            alone[awake] = (sink_alone(port, runners * connections, min(seconds / 2, 10.0),
                                                       args.delay) if args.sink_alone and args.delay else None)
                    variants = [None] if args.ab is None else [None, args.ab][::1 if round_ % 2 else -1]
                    for awake in args.sink:
                        for runner_path in variants:
                            with smtp_sink(binary, runners * connections, args.delay, awake, nice) as (smtp, _, pid):
                                row = measure(url, smtp, runners, connections, seconds, args.delay, args.sessions,
                                              args.profile, runner_path, args.trace, pid)
                            row["alone"] = {k: v / row["ideal"] if v else None for k, v in alone.items()}
                            row["awake"], row["nice"] = awake, nice
                            row["variant"] = "A" if runner_path else "B"
                            row["load"] = os.getloadavg()[0]
                            rows.append(row)
    if args.ab is not None:
        print(f"A: the runner in {args.ab}; B: this checkout's")
    print("sink: 'awake' = smtp-sink with a client sending it a NOOP every"
          f" {KEEP_AWAKE_S * 1000:.0f} ms (its held replies go out at the whole second they are due),"
          " 'idle' = smtp-sink alone (it sleeps a whole second after the last command of a burst);"
          " sink alone: the trivial client's ratio to the ideal against each, in the same run")
    print(f"{'':>2}{'runners':>7} {'conns':>6} {'sink':>6} {'mails':>7} {'mails/s':>8} {'ideal':>6} {'ratio':>6}"
          f" {'alone awake':>11} {'alone idle':>10} {'CPU/mail':>9} {'sink CPU':>9} {'peak RSS':>9} {'window':>7}"
          f" {'load':>5}")

    def ratio(v):
        return f"{v:.2f}" if v is not None else "-"

    def sink_label(r):
        return ("awake" if r["awake"] else "idle") + (f"{r['nice']:+d}" if r["nice"] else "")

    for r in rows:
        print(f"{r['variant'] if args.ab else '':>2}{r['runners']:>7} {r['connections']:>6}"
              f" {sink_label(r):>6} {r['mails']:>7,} {r['rate']:>8.0f} {r['ideal']:>6.0f}"
              f" {r['ratio']:>6.2f} {ratio(r['alone'][True]):>11} {ratio(r['alone'][False]):>10}"
              f" {r['cpu_us']:>7.0f}us {r['sink_cpu_us']:>7.0f}us {r['rss']:>6.1f} MB {r['window']:>6.1f}s {r['load']:>5.1f}")
    for r in rows:
        if r["idle"]:
            idle = sorted(i for i, _ in r["idle"])
            waiting = sorted(w for _, w in r["idle"])
            print(f"sessions at {r['runners']} x {r['connections']}: idle (waiting for claimed mail)"
                  f" median {idle[len(idle) // 2]:.0f}, max {idle[-1]:.0f} of {r['runners'] * r['connections']};"
                  f" claimed mail waiting for a session median {waiting[len(waiting) // 2]:.0f}"
                  f" ({len(idle)} samples)")
    for r in rows:
        if r["trace"]:
            print(f"send timeline at {r['runners']} x {r['connections']}{' ' + r['variant'] if args.ab else ''}"
                  " (mail whose commands were written in the window):")
            for line in r["trace"]:
                print("  " + line)
    if (args.delay != DELAY or args.configs != CONFIGS or args.rounds != 1 or args.ab or args.sink != (True,)
            or len(args.sink_nice) > 1):
        return 0  # an investigation, not the figures
    for r in rows[1:]:
        what = f"{r['runners']} x {r['connections']}"
        alone_awake, alone_idle = r["alone"][True], r["alone"][False]
        target(f"mails/s at {what} >= {RATIO_TARGET} x ideal ({r['ideal']:.0f}/s)",
               f"{r['ratio']:.2f} x ({r['rate']:.0f}/s; smtp-sink kept awake; in the same run the sink alone"
               f" {alone_awake or 0:.2f} x kept awake, {alone_idle or 0:.2f} x idle)",
               r["ratio"] >= RATIO_TARGET)
        target(f"runner CPU per mail at {what} <= {CPU_TARGET_US:.0f} us", f"{r['cpu_us']:.0f} us",
               r["cpu_us"] <= CPU_TARGET_US)
        if alone_awake:
            print(f"figure mails/s at {what} relative to the sink alone (both kept awake): {r['ratio'] / alone_awake:.2f} x")
    big = rows[-1]
    target(f"runner peak RSS at {big['connections']} connections <= {RSS_TARGET_MB:.0f} MB", f"{big['rss']:.1f} MB",
           big["rss"] <= RSS_TARGET_MB)
    return 0


if __name__ == "__main__":
    sys.exit(main())
