"""Draining a campaign (issue 13): since campaign mail is queued lazily, a
chunk at a time (deploy/campaign_chunks.sql), the claims of a campaign's
drain write its queue rows. What that costs, next to a transactional drain
of the same size in the same run.

In a scratch database (embedded cluster, or MAILROOM_BENCH_DSN; with
synchronous_commit = on), N mails (100,000; --quick 20,000) to 50 domains,
drained by pgbench, 4 clients, bench/mailroom_sql.pgbench (claim_batch of 50,
then mark_outcomes reporting the 50 sent: mailroom's own SQL, no runner),
sides alternating round by round (2 rounds; the best of each side):

  transactional  N queued mails as enqueue leaves them (contents + queue
                 rows, bench/_common.load_queued)
  campaign       enqueue_campaign of N recipients (contents rows and the
                 first chunk; the claims queue the rest a chunk at a time)
  campaign queued  the same campaign with every chunk queued before the
                 drain (_campaign_queue_all, as eagerly as v0.3; vacuumed like
                 the transactional side): what is left of the gap without
                 the claims' chunk work
  campaign/<size>  the same with chunks of <size> mails (--chunk-sizes): an
                 A/B of _campaign_chunk_size in the same run

mails/s = mails sent / (time of the last finishing row - start of pgbench).
Figure: campaign drain / transactional drain (no bound: the issue asks to see
it; camp5 measured 0.79-0.92 x by hand). Each round also prints the WAL a
mail cost and where the database time went (pg_stat_user_functions, the
database's track_functions = pl): the claim (_claim_batch, which includes
_campaign_top_up, which includes _campaign_queue_chunk) and the report
(mark_outcomes), in ms per 1,000 mails.
Usage: .venv/bin/python bench/campaign_drain.py [--quick] [--mails N] [--rounds R] [--chunk-sizes 2000,20000]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (BENCH_TEMPLATE, EMPTY_QUEUE, bench_parser, load_queued, pgbench_rate,  # noqa: E402
                     scratch_database, sent_stats, vacuum_analyze, wal_mark, wal_since)

SCRIPT = "mailroom_sql.pgbench"

# _campaign_chunk_size as deployed, redefined for one side of the A/B.
CHUNK_SIZE = """
CREATE OR REPLACE FUNCTION mailroom._campaign_chunk_size() RETURNS integer
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path = mailroom, pg_temp AS $$ SELECT {size} $$
"""


# Where a drain's database time goes: these functions' total time (the
# database sets track_functions = pl), in ms per 1,000 mails.
TRACKED = ("_claim_batch", "_campaign_top_up", "_campaign_queue_chunk", "mark_outcomes")


def function_ms(conn, n: int) -> dict[str, float]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute("SELECT funcname, sum(total_time) FROM pg_stat_user_functions"
                        " WHERE schemaname = 'mailroom' AND funcname = ANY (%s) GROUP BY funcname",
                        (list(TRACKED),)).fetchall()
    return {name: ms * 1000 / n for name, ms in rows}


def drain(url: str, conn, n: int) -> tuple[float, int, dict[str, float]]:
    """pgbench over what is queued; (mails/s, mails left to short claims,
    function times). A campaign's claims may get fewer than 50 while a chunk
    is being queued by another client: whatever is left after the fixed
    number of pgbench transactions is drained afterwards, untimed, and counted."""
    conn.execute("SELECT pg_stat_reset()")
    mark = wal_mark(conn)
    t0 = time.time()
    pgbench_rate(url, SCRIPT, n)
    sent, last = sent_stats(conn)
    rate = sent / (float(last) - t0)
    spent = function_ms(conn, n)
    spent["WAL B/mail"] = wal_since(conn, mark, n)[0]
    short = n - sent
    while sent < n:
        pgbench_rate(url, SCRIPT, 200 * 4)
        sent = sent_stats(conn)[0]
    return rate, short, spent


def transactional(url: str, conn, n: int) -> tuple[float, int, dict[str, float], float]:
    conn.execute("TRUNCATE mailroom.campaigns CASCADE")
    load_queued(conn, n, "tx")
    conn.execute("CHECKPOINT")
    return (*drain(url, conn, n), 0.0)


def campaign(size: int | None, up_front: bool = False):
    def run(url: str, conn, n: int) -> tuple[float, int, dict[str, float], float]:
        conn.execute("CHECKPOINT")
        conn.execute(EMPTY_QUEUE)
        conn.execute("TRUNCATE mailroom.campaigns CASCADE")
        if size is not None:
            conn.execute(CHUNK_SIZE.format(size=int(size)))
        conn.execute("SET ROLE mailroom_app")
        t0 = time.perf_counter()
        conn.execute("SELECT mailroom.enqueue_campaign('drained', 'bench',"
                     " 'SELECT id AS recipient_id, email, vars FROM public.users')")
        enqueue = time.perf_counter() - t0
        conn.execute("RESET ROLE")
        if up_front:
            conn.execute("SELECT mailroom._campaign_queue_all(id, now()) FROM mailroom.campaigns")
        vacuum_analyze(conn)
        conn.execute("CHECKPOINT")
        try:
            result = drain(url, conn, n)
        finally:
            if size is not None:
                conn.execute(CHUNK_SIZE.format(size=DEPLOYED[0]))
        return (*result, enqueue)
    return run


DEPLOYED: list[int] = []


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--mails", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--chunk-sizes", default="", help="comma-separated chunk sizes to A/B against the deployed one")
    args = parser.parse_args()
    n = args.mails or (20_000 if args.quick else 100_000)
    n -= n % 200  # whole pgbench transactions of 50 for 4 clients
    sizes = [int(s) for s in args.chunk_sizes.split(",") if s.strip()]

    with scratch_database("mailroom_bench_campaign_drain", synchronous_commit="on") as url, \
            psycopg.connect(url, autocommit=True) as conn:
        DEPLOYED.append(conn.execute("SELECT mailroom._campaign_chunk_size()").fetchone()[0])
        print(f"mailroom bench: drain of {n:,} mails, pgbench 4 clients, {SCRIPT}, {args.rounds} alternating"
              f" rounds; campaign chunks of {DEPLOYED[0]:,}")
        conn.execute("ALTER DATABASE mailroom_bench_campaign_drain SET track_functions = 'pl'")
        conn.execute(BENCH_TEMPLATE)
        conn.execute("CREATE TABLE public.users AS"
                     " SELECT g AS id, 'user' || g || '@d' || (g %% 50) || '.example' AS email,"
                     "        jsonb_build_object('name', 'User ' || g, 'n', g) AS vars"
                     " FROM generate_series(1, %s) g", (n,))
        conn.execute("ALTER TABLE public.users ADD PRIMARY KEY (id)")
        conn.execute("GRANT SELECT ON public.users TO mailroom_app")
        conn.execute("VACUUM ANALYZE public.users")

        sides = {"transactional": transactional, "campaign": campaign(None),
                 "campaign queued": campaign(None, up_front=True)}
        sides.update({f"campaign/{s}": campaign(s) for s in sizes})
        results: dict[str, list[tuple[float, int, dict[str, float], float]]] = {k: [] for k in sides}
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for label in order:
                results[label].append(sides[label](url, conn, n))
                rate, short, spent, enq = results[label][-1]
                print(f"  round {r + 1} {label:16} {rate:9,.0f} mails/s"
                      + (f"  (enqueue_campaign {enq:.2f} s)" if enq else "")
                      + (f"  ({short} left to short claims)" if short else "")
                      + f"; WAL {spent['WAL B/mail']:,.0f} B a mail; ms per 1,000 mails: "
                      + ", ".join(f"{f} {spent[f]:.0f}" for f in TRACKED if f in spent),
                      flush=True)

        best = {k: max(v, key=lambda x: x[0]) for k, v in results.items()}
        tx = best["transactional"][0]
        print(f"{'side':16} {'best mails/s':>12} {'x tx':>6} {'rounds':>24}")
        for label, runs in results.items():
            print(f"{label:16} {best[label][0]:12,.0f} {best[label][0] / tx:6.2f}"
                  f" {' / '.join(f'{x[0]:,.0f}' for x in runs):>24}")
        per_round = [c[0] / t[0] for c, t in zip(results["campaign"], results["transactional"])]
        print(f"figure campaign drain of {n:,} / transactional drain (best of {args.rounds}):"
              f" {best['campaign'][0] / tx:.2f} x ({best['campaign'][0]:,.0f} vs {tx:,.0f} mails/s;"
              f" per round {', '.join(f'{x:.2f}' for x in per_round)})")
        for s in sizes:
            label = f"campaign/{s}"
            print(f"figure campaign drain, chunks of {s:,} / of {DEPLOYED[0]:,}:"
                  f" {best[label][0] / best['campaign'][0]:.2f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
