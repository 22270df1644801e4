"""What one claim_batch call costs, with and without send rates configured.

60,000 queued mails to 50 domains in a scratch database (embedded cluster, or
MAILROOM_BENCH_DSN); 200 claims of 100 per configuration, one connection,
limits set high enough never to throttle, so only their bookkeeping is timed.

    .venv/bin/python bench/claim_cost.py [--quick]   (--quick: 10,000 mails, 50 claims)
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import EMPTY_QUEUE, bench_parser, scratch_database, vacuum_analyze  # noqa: E402

QUEUED, CLAIMS, BATCH = 60_000, 200, 100

CONFIGURATIONS = [
    ("no limits", []),
    ("sender limit", ["SELECT mailroom.set_sender_limits('default', 1000000)"]),
    ("sender + default domain limit", ["SELECT mailroom.set_sender_limits('default', 1000000)",
                                       "SELECT mailroom.set_domain_limits('*', 1000000)"]),
]


def main() -> int:
    global QUEUED, CLAIMS
    if bench_parser(__doc__).parse_args().quick:
        QUEUED, CLAIMS = 10_000, 50
    print(f"mailroom bench: claim_batch of {BATCH}, {CLAIMS} claims over {QUEUED:,} queued mails to 50 domains")
    print(f"{'configuration':32} {'median ms':>10} {'p95 ms':>8}")
    with scratch_database("mailroom_bench_claim") as url, psycopg.connect(url, autocommit=True) as conn:
        for label, setup in CONFIGURATIONS:
            conn.execute("TRUNCATE mailroom.senders, mailroom.rate_limits CASCADE")
            conn.execute(EMPTY_QUEUE)
            conn.execute("DELETE FROM mailroom.domain_limits")
            conn.execute("INSERT INTO mailroom.domain_limits (domain) VALUES ('*')")
            conn.execute(
                "SELECT mailroom.enqueue('u' || g || '@d' || (g %% 50) || '.example', 'Hi', 'Body')"
                " FROM generate_series(1, %s) g", (QUEUED,))
            vacuum_analyze(conn)
            for statement in setup:
                conn.execute(statement)
            times = []
            for i in range(CLAIMS):
                t = time.perf_counter()
                rows = conn.execute("SELECT id FROM mailroom.claim_batch(%s, %s)", (f"bench-{i}", BATCH)).fetchall()
                times.append((time.perf_counter() - t) * 1000)
                if len(rows) != BATCH:
                    print(f"FAIL: {label}: claim {i} got {len(rows)} rows", file=sys.stderr)
                    return 1
            p95 = statistics.quantiles(times, n=20)[-1]
            print(f"{label:32} {statistics.median(times):10.2f} {p95:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
