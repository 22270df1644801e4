"""Runner memory: peak RSS (VmHWM) of one `mailroom run` process draining
queued mail over SMTP to `mailroom sink` on loopback, at --concurrency 16
and 64 (one SMTP session per sending thread), default --batch.

    .venv/bin/python bench/runner_memory.py [--quick]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import live_count, load_queued, mailroom_runners, peak_rss_mb, scratch_database, sink_process  # noqa: E402

TARGET_MB = 80.0


def main() -> int:
    quick = "--quick" in sys.argv
    n = 5_000 if quick else 20_000
    rows = []
    with scratch_database("mailroom_bench_memory") as url, psycopg.connect(url, autocommit=True) as conn, \
            sink_process() as smtp:
        for concurrency in (16, 64):
            with mailroom_runners(url, smtp, 1, "--concurrency", str(concurrency), name="memory") as (proc,):
                idle = peak_rss_mb(proc.proc.pid)
                load_queued(conn, n, f"c{concurrency}")
                conn.execute("NOTIFY mailroom, 'default'")
                t0 = time.monotonic()
                while live_count(conn):
                    if time.monotonic() - t0 > 300:
                        raise RuntimeError("drain did not finish in 300 s")
                    time.sleep(0.1)
                seconds = time.monotonic() - t0
                rows.append((concurrency, idle, peak_rss_mb(proc.proc.pid), n / seconds))
    print(f"mailroom bench: peak RSS of one `mailroom run` draining {n:,} mails over SMTP to mailroom sink")
    print(f"{'concurrency':>11} {'idle MB':>8} {'peak MB':>8} {'mails/s':>8}")
    for c, idle, peak, rate in rows:
        print(f"{c:>11} {idle:8.1f} {peak:8.1f} {rate:8.0f}")
    peak64 = rows[-1][2]
    print(f"target runner RSS at concurrency 64 <= {TARGET_MB:.0f} MB: {peak64:.1f} MB "
          f"({'ok' if peak64 <= TARGET_MB else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
