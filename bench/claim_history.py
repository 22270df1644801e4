"""Claim cost vs history (issue 7, item 4; kept by issue 13): claim_batch with
0 and with 5,000,000 `sent` mails of history in the tables.

Two scratch databases side by side on the same cluster: `empty` and
`history` (5,000,000 sent mails over the last 30 days as v0.4 keeps them:
a mailroom.contents row each and its finishing ledger row in
mailroom.attempts, finished_as = 'sent', and no queue row; written with
INSERT ... SELECT generate_series as the owner, then VACUUM ANALYZE). Both get the same 40,000 queued mails to 50
domains. Then 400 claims of 100 (one connection per database, no send rates),
alternating empty / history claim by claim so noise hits both sides alike.
Both databases run with synchronous_commit = on (issue 13: every figure in
one run with PostgreSQL's default); the timer covers the claim_batch
statement, its COMMIT (a WAL flush, the same on both sides) is timed apart.
--quick: 500,000 history rows, 100 claims.

Target: median and p99 with history / empty <= 1.3.
    .venv/bin/python bench/claim_history.py [--quick] [--history N]
"""

from __future__ import annotations

import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_parser, scratch_database, target, vacuum_analyze  # noqa: E402

BATCH = 100


def fill_history(conn: psycopg.Connection, n: int) -> None:
    conn.execute(
        """
        INSERT INTO mailroom.contents (delivery_key, to_address, subject, body_text, created_at)
        SELECT 'h-' || g, 'u' || g || '@d' || (g %% 500) || '.example', 'Hello', 'Body', t
        FROM generate_series(1, %(n)s) g,
             LATERAL (SELECT now() - interval '30 days' * (1 - g::float8 / %(n)s)) AS x(t)
        """, {"n": n})
    conn.execute(
        """
        INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at,
                                       reported_at, reported, outcome, smtp_code, smtp_text, finished_as)
        SELECT c.id, 1, 'runner-' || (c.id % 4), gen_random_uuid(), c.created_at + interval '1 second',
               c.created_at + interval '2 seconds', c.created_at + interval '2 seconds', 'sent', 'sent', 250,
               '2.0.0 Ok: queued', 'sent'
        FROM mailroom.contents c
        """)


def enqueue(conn: psycopg.Connection, n: int) -> None:
    conn.execute("SELECT mailroom.enqueue('q' || g || '@d' || (g %% 50) || '.example', 'Hi', 'Body',"
                 " p_send_at => now() - interval '1 minute') FROM generate_series(1, %s) g", (n,))


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--history", type=int, default=None)
    args = parser.parse_args()
    history = args.history or (500_000 if args.quick else 5_000_000)
    claims = 100 if args.quick else 400
    queued = claims * BATCH

    print(f"mailroom bench: claim_batch of {BATCH}, {claims} claims each, over {queued:,} queued mails,"
          f" with 0 and {history:,} sent mails (+ ledger rows) of history")
    with ExitStack() as stack:
        urls = {"empty": stack.enter_context(scratch_database("mailroom_bench_claim_empty", "on")),
                "history": stack.enter_context(scratch_database("mailroom_bench_claim_history", "on"))}
        conns = {k: stack.enter_context(psycopg.connect(u, autocommit=True)) for k, u in urls.items()}
        t = time.perf_counter()
        fill_history(conns["history"], history)
        for side, c in conns.items():
            enqueue(c, queued)
            vacuum_analyze(c)
        sizes = conns["history"].execute(
            "SELECT pg_size_pretty(pg_total_relation_size('mailroom.contents')),"
            "       pg_size_pretty(pg_total_relation_size('mailroom.attempts')),"
            "       pg_size_pretty(pg_total_relation_size('mailroom.queue'))").fetchone()
        print(f"filled in {time.perf_counter() - t:.0f} s; with history: contents {sizes[0]}, attempts {sizes[1]},"
              f" queue {sizes[2]} (tables + indexes)")

        # The timed claims run in transactions of their own connections: the
        # timer covers the claim_batch statement, the COMMIT (a WAL flush with
        # synchronous_commit = on, the same on both sides) is timed apart.
        claimers = {k: stack.enter_context(psycopg.connect(u)) for k, u in urls.items()}
        times: dict[str, list[float]] = {"empty": [], "history": []}
        commits: dict[str, list[float]] = {"empty": [], "history": []}
        sql = "SELECT id FROM mailroom.claim_batch(%s, %s)"
        for c in conns.values():  # warm the plan caches and the buffers
            c.execute("SELECT count(*) FROM mailroom.queue WHERE status = 'queued'")
        for i in range(claims):
            for side in (("empty", "history") if i % 2 == 0 else ("history", "empty")):
                t0 = time.perf_counter()
                rows = claimers[side].execute(sql, (f"bench-{i}", BATCH), prepare=True).fetchall()
                t1 = time.perf_counter()
                claimers[side].commit()
                times[side].append((t1 - t0) * 1000)
                commits[side].append((time.perf_counter() - t1) * 1000)
                if len(rows) != BATCH:
                    print(f"FAIL: {side}: claim {i} got {len(rows)} rows", file=sys.stderr)
                    return 1

        def p99(xs: list[float]) -> float:
            return statistics.quantiles(xs, n=100)[-1]

        print(f"{'history':>12} {'median ms':>10} {'p99 ms':>8} {'commit ms':>10}")
        for side, label in (("empty", "0"), ("history", f"{history:,}")):
            print(f"{label:>12} {statistics.median(times[side]):10.2f} {p99(times[side]):8.2f}"
                  f" {statistics.median(commits[side]):10.2f}")
        med = statistics.median(times["history"]) / statistics.median(times["empty"])
        tail = p99(times["history"]) / p99(times["empty"])
        target(f"claim_batch median with {history:,} history / empty <= 1.3", f"{med:.2f}", med <= 1.3)
        target(f"claim_batch p99 with {history:,} history / empty <= 1.3", f"{tail:.2f}", tail <= 1.3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
