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
from _common import scratch_database, vacuum_analyze  # noqa: E402

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
            # History over the last 40 days: sent (2% after a retry, 0.1% twice), failed, cancelled;
            # as v0.4 keeps it: a contents row per mail, its ledger rows, the last one finishing it.
            conn.execute(
                """
                CREATE TEMP TABLE history AS
                SELECT g, s.status, CASE WHEN g %% 50 = 0 THEN 2 ELSE 1 END AS attempts, t,
                       CASE WHEN g %% 3 = 0 THEN 'news' ELSE 'default' END AS sender
                FROM generate_series(1, %(n)s) g,
                     LATERAL (SELECT now() - (g::float / %(n)s) * interval '40 days' AS t) tt,
                     LATERAL (SELECT CASE WHEN g %% 100 = 0 THEN 'failed' WHEN g %% 101 = 0 THEN 'cancelled'
                                          ELSE 'sent' END AS status) s
                """, {"n": args.history})
            conn.execute(
                """
                INSERT INTO mailroom.contents (delivery_key, to_address, subject, body_text, sender, created_at)
                SELECT 'h-' || g, 'u' || (g % 50000) || '@example.com', 'Hi', 'Body', sender, t FROM history
                """)
            conn.execute(
                """
                INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at,
                                               reported_at, reported, outcome, smtp_code, duplicate, finished_as)
                SELECT c.id, a, 'bench', gen_random_uuid(), h.t + (a - 1) * interval '1 minute',
                       h.t + (a - 1) * interval '1 minute' + interval '1 second',
                       h.t + (a - 1) * interval '1 minute' + interval '1 second',
                       CASE WHEN a < h.attempts THEN 'retry' WHEN h.status = 'sent' THEN 'sent' ELSE 'failed' END,
                       CASE WHEN a < h.attempts THEN 'retry' WHEN h.status = 'sent' THEN 'sent' ELSE 'failed' END,
                       CASE WHEN a < h.attempts THEN 451 WHEN h.status = 'sent' THEN 250 ELSE 550 END, false,
                       CASE WHEN a = h.attempts THEN h.status END
                FROM history h JOIN mailroom.contents c ON c.delivery_key = 'h-' || h.g,
                     generate_series(1, h.attempts) a
                WHERE h.status <> 'cancelled'
                """)
            conn.execute(
                """
                INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason)
                SELECT c.id, 0, h.t, 'cancelled', 'cancelled', 'cancelled'
                FROM history h JOIN mailroom.contents c ON c.delivery_key = 'h-' || h.g
                WHERE h.status = 'cancelled'
                """)
            conn.execute(
                """
                INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at,
                                               reported_at, reported, outcome, duplicate)
                SELECT a.message_id, 1, 'ghost', gen_random_uuid(), a.claimed_at, a.claimed_at + interval '9 minutes',
                       a.claimed_at + interval '9 minutes', 'sent', 'stale', true
                FROM mailroom.attempts a WHERE a.finished_as = 'sent' AND a.message_id % 1000 = 7
                """)
            conn.execute(
                """
                SELECT count(mailroom.enqueue('q' || g || '@example.com', 'Hi', 'Body', p_delivery_key => 'q-' || g,
                                              p_send_at => now() - interval '10 minutes',
                                              p_on_ambiguous => CASE WHEN g %% 20 = 0 THEN 'review' ELSE 'retry' END))
                FROM generate_series(1, %(q)s) g
                """, {"q": args.queued})
            # 500 leases that ran out an hour ago (a claim whose runner died), then reclaimed:
            # written on the queue rows directly, as a claim an hour ago would have left them.
            conn.execute(
                """
                UPDATE mailroom.queue q
                SET status = 'sending', attempts = q.attempts + 1, lease_token = gen_random_uuid(),
                    leased_until = now() - interval '1 hour' + interval '1 second', worker = 'dead',
                    claimed_at = now() - interval '1 hour', updated_at = now() - interval '1 hour'
                FROM (SELECT id FROM mailroom.queue WHERE status = 'queued'
                      ORDER BY priority DESC, run_at, id LIMIT 500) d
                WHERE q.id = d.id
                """)
            conn.execute("SELECT mailroom.reclaim()")
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
