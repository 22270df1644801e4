"""Ad hoc: what claim_batch's forgotten-address test costs a mail, gate
variants side by side in one scratch database (not run by `make bench`).

The gate (mailroom._claim_gate, inlined) over a claim's 50 picks, as the
claim runs it: one prepared statement, a generic plan, the claim's planner
settings; 2,000 runs a turn, the variants taking turns 7 times, each one's
fastest turn (another process on the core only slows a turn). Prints
microseconds per mail and the difference to the first variant. Compare with
what claim_batch + mark_outcomes cost the server per mail
(`bench/_sql_ab.py cpu`, about 40 us).

    .venv/bin/python bench/_erasure_gate.py 10000 bench/erasure/gate_no_check.sql \\
        deploy/claim_batch.sql deploy/claim_batch@v0.5.0.sql
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, load_queued, scratch_database  # noqa: E402

GATE_OVER_50 = (
    "SELECT count(*) FROM mailroom.contents t CROSS JOIN LATERAL mailroom._claim_gate(t.address_key, t.stream,"
    " t.campaign_id, t.schedule_id, t.recipient_zone, now()) g"
    " WHERE g.verdict = 'claim' AND t.id <= (SELECT min(id) + 49 FROM mailroom.contents)")
CLAIM_SETTINGS = ("SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_hashjoin = off;"
                  " SET enable_mergejoin = off; SET jit = off; SET plan_cache_mode = force_generic_plan")
RUNS, TURNS = 2000, 7


def main() -> int:
    forgotten, variants = int(sys.argv[1]), sys.argv[2:]
    with scratch_database("mailroom_bench_erasure_gate", synchronous_commit="off") as url, \
            psycopg.connect(url, autocommit=True) as conn:
        if forgotten:
            conn.execute(f"SET mailroom_bench.forgotten = {forgotten}")
            conn.execute((ROOT / "bench" / "erasure" / "forgotten.sql").read_text())
        load_queued(conn, 1000, "gate")
        fastest = {v: float("inf") for v in variants}
        for _ in range(TURNS):
            for v in variants:
                conn.execute(Path(v).read_text())
                with psycopg.connect(url, autocommit=True) as c:
                    c.execute(CLAIM_SETTINGS)
                    c.execute(GATE_OVER_50, prepare=True)
                    start = time.perf_counter()
                    for _ in range(RUNS):
                        c.execute(GATE_OVER_50, prepare=True).fetchone()
                    fastest[v] = min(fastest[v], (time.perf_counter() - start) / RUNS / 50 * 1e6)
        first = fastest[variants[0]]
        for v, us in fastest.items():
            print(f"{forgotten:6} forgotten  {Path(v).name:26} {us:6.2f} us a mail, {us - first:+.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
