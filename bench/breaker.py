"""Breaker: what the circuit breaker's counting costs mailroom's SQL, A/B in
one run (issue 13's "claim_batch + mark_outcomes in pgbench >= 0.75 x the
raw limit").

drain.py's "mailroom SQL only" side (pgbench, 4 clients, bench/
mailroom_sql.pgbench: claim_batch of 50, then one mark_outcomes reporting the
50 sent; synchronous_commit = on) with two bodies of _breaker_count_outcomes,
swapped in between runs in one scratch database:

- head: HEAD's: the report's delivered mail, counted per campaign and sender
  from the queue rows it deleted, is one insert into breaker_pending, added
  up by a later fold (bad events, the report whose rows pass a multiple of
  200, the pg_cron job);
- none: counting nothing (what the breaker costs at all: the ceiling):
  _breaker_count_outcomes does nothing, and mark_outcomes' lean pass, which
  writes its pending counts itself, is swapped for one without that insert;
- head with the rest of the fold: what is still pending at the end of a run
  is folded right after, alone, its time added: every mail of the run
  counted;

and drain.py's raw limit (bench/limit.pgbench on its own table), the
reference of "x limit". A round runs the sides as a palindrome (limit, head,
none, none, head, limit; the next round in the other order), each side's
figure in a round the mean of its two runs, so drift in the shared machine's
load hits every side alike; ratios are taken within each round and the
median over rounds is printed. (The designs before it, which looked every
delivered mail's campaign and sender up in contents — on every report, or in
the fold — are measured in bench/RESULTS.md: brk5 and sql6; their bodies took
the mails' ids, which mark_outcomes no longer passes.)

    .venv/bin/python bench/breaker.py [--quick] [--rounds N]
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import scratch_database  # noqa: E402
from drain import SEED_TABLE, run_limit, run_queue_script  # noqa: E402

SIGNATURE = ("mailroom._breaker_count_outcomes(bigint[], text[], bigint[], text[],"
             " timestamp with time zone)")
NONE = ("CREATE OR REPLACE FUNCTION mailroom._breaker_count_outcomes(p_delivered_campaigns bigint[],"
        " p_delivered_senders text[], p_bounced_campaigns bigint[], p_bounced_senders text[], p_now timestamptz)"
        " RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = mailroom, pg_temp AS $$ BEGIN END $$")
# The lean pass of mark_outcomes (every report says sent) writes the pending
# counts in its own statement: the "none" side takes that insert out of it.
MARK = "mailroom._mark_outcomes(jsonb, timestamp with time zone)"
MARK_COUNTED = re.compile(r",\n *-- The circuit breaker's count of this delivered mail.*?RETURNING id\n *\)", re.S)
MARK_FOLD = "(SELECT coalesce(bool_or(c.id % 200 = 0), false) FROM counted c)"


def mark_without_count(body: str) -> str:
    """HEAD's _mark_outcomes without the lean pass's insert into breaker_pending."""
    out, n = MARK_COUNTED.subn("", body)
    assert n == 1 and MARK_FOLD in out, "bench/breaker.py no longer finds the lean pass's count in _mark_outcomes"
    return out.replace(MARK_FOLD, "false")


SIDES = {
    "limit": "limit (pgbench: claim 50, mark 50; own table)",
    "head": "claim_batch + mark_outcomes, HEAD's breaker",
    "head_fold": "  ... the rest of its fold's time added",
    "none": "claim_batch + mark_outcomes, no breaker at all",
}


def function_def(conn, name: str) -> str:
    return conn.execute("SELECT pg_get_functiondef(%s::regprocedure)", (name,)).fetchone()[0]


def main() -> int:
    quick = "--quick" in sys.argv
    n = 20_000  # 400 reports a run: brk5's reports fold once in each
    rounds = 2 if quick else 6
    if "--rounds" in sys.argv:
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1])
    results: dict[str, list[float]] = {k: [] for k in SIDES}
    wal: dict[str, list[float]] = {k: [] for k in SIDES}
    sql_side = run_queue_script("mailroom_sql.pgbench")
    with scratch_database("mailroom_bench_breaker", synchronous_commit="on") as url, \
            psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SEED_TABLE.format(t="bench_limit"))
        head_mark = function_def(conn, MARK)
        bodies = {"head": [function_def(conn, SIGNATURE), head_mark], "none": [NONE, mark_without_count(head_mark)]}
        order = ["limit", "head", "none"]
        for r in range(rounds):
            keys = order if r % 2 == 0 else order[::-1]
            runs: dict[str, list] = {k: [] for k in keys}
            folds: list[tuple[float, tuple]] = []
            for key in keys + keys[::-1]:
                if key == "limit":
                    runs[key].append(run_limit(url, conn, n))
                else:
                    # pgbench connects afresh: its backends plan the new body.
                    for body in bodies[key]:
                        conn.execute(body)
                    conn.execute("TRUNCATE mailroom.breaker_pending")
                    rate, w = sql_side(url, conn, n)
                    runs[key].append((rate, w))
                    if key == "head":
                        # What no report folded yet (a later report or the
                        # pg_cron job would), done now, alone.
                        t0 = time.perf_counter()
                        conn.execute("SELECT mailroom.breaker_fold()")
                        folds.append((n / (n / rate + time.perf_counter() - t0), w))
                        left = conn.execute("SELECT count(*) FROM mailroom.breaker_pending").fetchone()[0]
                        assert left == 0, f"{left} rows still pending"
            runs["head_fold"] = folds
            for key, got in runs.items():
                results[key].append(statistics.fmean(rate for rate, _ in got))
                wal[key].append(statistics.fmean(w[0] for _, w in got))
        for body in bodies["head"]:
            conn.execute(body)

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(results[a], results[b]))

    print(f"mailroom bench: breaker, {n:,} mails a run, pgbench 4 clients, 50 a batch, synchronous_commit = on, "
          f"{rounds} palindrome rounds (each side twice a round)")
    print(f"{'side':50} {'mails/s':>8} {'x limit':>7} {'rounds (mails/s)':>26} {'WAL B/mail':>10}")
    for k, label in SIDES.items():
        rs = " ".join(f"{x:.0f}" for x in results[k])
        print(f"{label:50} {statistics.median(results[k]):8.0f} {ratio(k, 'limit'):7.2f} {rs:>26} "
              f"{statistics.median(wal[k]):10.0f}")
    print(f"figure breaker HEAD / no breaker, claim_batch + mark_outcomes: {ratio('head', 'none'):.3f} x the mails/s "
          f"(rounds: {' '.join(f'{x / y:.3f}' for x, y in zip(results['head'], results['none']))}); "
          f"with the rest of its fold's time added: {ratio('head_fold', 'none'):.3f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
