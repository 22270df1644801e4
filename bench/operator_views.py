"""How long the operator views and functions take on a large history.

Creates a scratch database on the embedded cluster (or on MAILROOM_BENCH_DSN,
a superuser libpq URL), deploys the plan with Sqitch, fills it with
--history finished mails (each with a ledger row) plus a live queue, and
prints the time of each operator query. Not a test: it prints figures.

    .venv/bin/python bench/operator_views.py --history 1000000   (--quick: 100,000)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fill_history, scratch_database, vacuum_analyze  # noqa: E402

QUERIES = [
    ("queue_stats", "SELECT * FROM mailroom.queue_stats"),
    ("overdue (first 50)", "SELECT * FROM mailroom.overdue LIMIT 50"),
    ("expired_leases (last day)", "SELECT * FROM mailroom.expired_leases WHERE expired_at > now() - interval '1 day'"),
    ("review_queue", "SELECT * FROM mailroom.review_queue"),
    ("delivered_keys (one key)", "SELECT * FROM mailroom.delivered_keys WHERE delivery_key = 'h-123456'"),
    ("duplicate_deliveries", "SELECT * FROM mailroom.duplicate_deliveries"),
    ("repeated_attempts (one recipient)", "SELECT * FROM mailroom.repeated_attempts WHERE recipient = 'u77@example.com'"),
    ("repeated_attempts (all)", "SELECT count(*) FROM mailroom.repeated_attempts"),
    ("delivery_metrics (1 hour)", "SELECT * FROM mailroom.delivery_metrics('1 hour')"),
    ("delivery_metrics (1 day)", "SELECT * FROM mailroom.delivery_metrics('1 day')"),
    ("inspect (one key)", "SELECT mailroom.inspect('h-123456')"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--history", type=int, default=1_000_000, help="finished mails in the history")
    ap.add_argument("--queued", type=int, default=20_000, help="queued, overdue mails")
    ap.add_argument("--quick", action="store_true", help="100,000 mails of history (make bench QUICK=1)")
    args = ap.parse_args()
    if args.quick:
        args.history = min(args.history, 100_000)

    with scratch_database("mailroom_bench_operator_views") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            t0 = time.perf_counter()
            fill_history(conn, args.history, args.queued)
            vacuum_analyze(conn)
            fill = time.perf_counter() - t0
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM mailroom.contents), (SELECT count(*) FROM mailroom.queue),"
                " (SELECT count(*) FROM mailroom.attempts)").fetchone()
            print(f"filled {counts[0]:,} mails ({counts[1]:,} live) and {counts[2]:,} ledger rows in {fill:.1f} s")
            print(f"{'query':40} {'ms (best of 3)':>15} {'rows':>8}")
            failed = []
            for label, sql in QUERIES:
                best, rows = float("inf"), 0
                try:
                    for _ in range(3):
                        t = time.perf_counter()
                        rows = len(conn.execute(sql).fetchall())
                        best = min(best, time.perf_counter() - t)
                except psycopg.Error as e:  # one missing view should not hide the others' figures
                    failed.append(label)
                    print(f"{label:40} {'error':>15} {str(e).splitlines()[0]}")
                    continue
                print(f"{label:40} {best * 1000:15.1f} {rows:8}")
            t = time.perf_counter()
            try:
                cur = conn.execute("SELECT * FROM mailroom.prune('30 days')")
                pruned = cur.fetchone()
                print(f"{'prune (one call, default batches)':40} {(time.perf_counter() - t) * 1000:15.1f} "
                      + " ".join(f"{d.name}={v}" for d, v in zip(cur.description, pruned)))
            except psycopg.Error as e:
                failed.append("prune")
                print(f"{'prune (one call, default batches)':40} {'error':>15} {str(e).splitlines()[0]}")
            if failed:
                print(f"FAIL: {', '.join(failed)}", file=sys.stderr)
                sys.exit(1)


if __name__ == "__main__":
    main()
