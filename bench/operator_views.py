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
from _common import scratch_database  # noqa: E402

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
            # History over the last 40 days: sent (2% after a retry, 0.1% twice), failed, cancelled.
            conn.execute(
                """
                INSERT INTO mailroom.messages (delivery_key, status, to_address, subject, body_text, sender,
                                               attempts, run_at, created_at, updated_at, sent_at)
                SELECT 'h-' || g, s.status, 'u' || (g %% 50000) || '@example.com', 'Hi', 'Body',
                       CASE WHEN g %% 3 = 0 THEN 'news' ELSE 'default' END,
                       CASE WHEN g %% 50 = 0 THEN 2 ELSE 1 END, t, t, t + interval '2 seconds',
                       CASE WHEN s.status = 'sent' THEN t + interval '2 seconds' END
                FROM generate_series(1, %(n)s) g,
                     LATERAL (SELECT now() - (g::float / %(n)s) * interval '40 days' AS t) tt,
                     LATERAL (SELECT CASE WHEN g %% 100 = 0 THEN 'failed' WHEN g %% 101 = 0 THEN 'cancelled'
                                          ELSE 'sent' END AS status) s
                """, {"n": args.history})
            conn.execute(
                """
                INSERT INTO mailroom.attempts (message_id, delivery_key, attempt, worker, lease_token, claimed_at,
                                               finished_at, reported, outcome, smtp_code, duplicate)
                SELECT m.id, m.delivery_key, a, 'bench', gen_random_uuid(), m.run_at + (a - 1) * interval '1 minute',
                       m.run_at + (a - 1) * interval '1 minute' + interval '1 second',
                       CASE WHEN a < m.attempts THEN 'retry' WHEN m.status = 'sent' THEN 'sent' ELSE 'failed' END,
                       CASE WHEN a < m.attempts THEN 'retry' WHEN m.status = 'sent' THEN 'sent' ELSE 'failed' END,
                       CASE WHEN a < m.attempts THEN 451 WHEN m.status = 'sent' THEN 250 ELSE 550 END, false
                FROM mailroom.messages m, generate_series(1, m.attempts) a
                WHERE m.status <> 'cancelled'
                """)
            conn.execute(
                """
                INSERT INTO mailroom.attempts (message_id, delivery_key, attempt, worker, lease_token, claimed_at,
                                               finished_at, reported, outcome, duplicate)
                SELECT id, delivery_key, 1, 'ghost', gen_random_uuid(), run_at, run_at + interval '9 minutes',
                       'sent', 'stale', true
                FROM mailroom.messages WHERE status = 'sent' AND id % 1000 = 7
                """)
            conn.execute(
                """
                SELECT count(mailroom.enqueue('q' || g || '@example.com', 'Hi', 'Body', p_delivery_key => 'q-' || g,
                                              p_send_at => now() - interval '10 minutes',
                                              p_on_ambiguous => CASE WHEN g %% 20 = 0 THEN 'review' ELSE 'retry' END))
                FROM generate_series(1, %(q)s) g
                """, {"q": args.queued})
            conn.execute("SELECT count(*) FROM mailroom.claim_batch('dead', 500, '1 second', NULL, now() - interval '1 hour')")
            conn.execute("SELECT mailroom.reclaim()")
            conn.execute("VACUUM ANALYZE mailroom.messages")
            conn.execute("VACUUM ANALYZE mailroom.attempts")
            fill = time.perf_counter() - t0
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM mailroom.messages), (SELECT count(*) FROM mailroom.attempts)").fetchone()
            print(f"filled {counts[0]:,} messages and {counts[1]:,} ledger rows in {fill:.1f} s")
            print(f"{'query':40} {'ms (best of 3)':>15} {'rows':>8}")
            for label, sql in QUERIES:
                best, rows = float("inf"), 0
                for _ in range(3):
                    t = time.perf_counter()
                    rows = len(conn.execute(sql).fetchall())
                    best = min(best, time.perf_counter() - t)
                print(f"{label:40} {best * 1000:15.1f} {rows:8}")
            t = time.perf_counter()
            pruned = conn.execute("SELECT * FROM mailroom.prune('30 days')").fetchone()
            print(f"{'prune (one call, default batches)':40} {(time.perf_counter() - t) * 1000:15.1f} "
                  f"messages={pruned[0]} attempts={pruned[1]} batches={pruned[2]} more={pruned[3]}")


if __name__ == "__main__":
    main()
