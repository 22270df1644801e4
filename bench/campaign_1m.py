"""Bulk enqueue (issue 7, item 3; issue 13): enqueue_campaign of 1,000,000
recipients against a bare INSERT ... SELECT of the same rows.

In a scratch database (embedded cluster, or MAILROOM_BENCH_DSN; with
synchronous_commit = on), a users table of N recipients (1,000,000; --quick
50,000), then, alternating, best of 2 rounds each, every side starting from
empty tables after a CHECKPOINT:

  bare        INSERT ... SELECT of the same content rows (same column values)
              into a table with mailroom.contents' columns, defaults and
              generated column, NO index and no constraint: the issue's reference
  + indexes   the same into a copy WITH contents' indexes and CHECK constraints
              (LIKE ... INCLUDING ALL): what index maintenance alone costs
  contents + queue  the same rows straight into the v0.4 tables as the owner,
              one statement: each mail's contents row (its indexes, checks and any
              foreign key) and its narrow queue row: the floor of
              any enqueue_campaign that writes v0.4's two rows per mail
  enqueue_campaign  the real call as mailroom_app (query run as the caller,
              staging, contents rows, and the first chunk of queue rows: the
              rest is queued a chunk at a time by claims, deploy/campaign_chunks.sql)

and, not part of the ratio, what queueing the rest in chunks costs in all
(address check, suppressions, send windows, queue rows: work the claims of
the drain do later, 5,000 mails at a time)

then a re-run of the campaign, which must add 0 rows. Target (issue 13):
enqueue_campaign <= 3 x bare (v0.3's own bound was 2 x, over one table).
Usage: .venv/bin/python bench/campaign_1m.py [--quick] [--recipients N]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import EMPTY_QUEUE, bench_parser, scratch_database, target  # noqa: E402

COLUMNS = ("delivery_key, priority, sender, to_address, template_key, template_vars, headers, max_attempts,"
           " on_ambiguous, campaign_id, recipient_id, recipient_zone, created_at")


def same_rows(campaign_id: int) -> str:
    """The content rows enqueue_campaign writes for public.users, as one SELECT."""
    return (f"SELECT 'campaign:{campaign_id}:' || u.id, 0, 'default', u.email, 'digest',"
            f" '{{\"name\": \"friend\"}}'::jsonb || coalesce(u.vars, '{{}}'), '{{}}', 5, 'retry', {campaign_id},"
            f" u.id::text, coalesce(u.time_zone, 'UTC'), now() FROM public.users u")


def both_tables(campaign_id: int) -> str:
    """The same rows into contents and, for each, its queue row: one statement."""
    return (f"WITH c AS (INSERT INTO mailroom.contents ({COLUMNS}) {same_rows(campaign_id)}"
            "            RETURNING id, priority, sender, campaign_id, max_attempts, on_ambiguous, created_at)"
            " INSERT INTO mailroom.queue (id, priority, run_at, sender, campaign_id, max_attempts, on_ambiguous,"
            " updated_at)"
            " SELECT id, priority, created_at, sender, campaign_id, max_attempts, on_ambiguous, created_at FROM c")


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--recipients", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    n = args.recipients or (50_000 if args.quick else 1_000_000)

    print(f"mailroom bench: bulk enqueue of {n:,} recipients, best of {args.rounds} alternating rounds")
    with scratch_database("mailroom_bench_campaign", synchronous_commit="on") as url, psycopg.connect(url, autocommit=True) as conn:
        t = time.perf_counter()
        conn.execute(
            "CREATE TABLE public.users AS"
            " SELECT g AS id, 'user' || g || '@example' || (g %% 1000) || '.org' AS email,"
            "        (ARRAY['Europe/Berlin', 'America/New_York', 'Asia/Kolkata', NULL])[1 + g %% 4] AS time_zone,"
            "        jsonb_build_object('name', 'User ' || g) AS vars"
            " FROM generate_series(1, %s) g",
            (n,),
        )
        conn.execute("ALTER TABLE public.users ADD PRIMARY KEY (id)")
        conn.execute("GRANT SELECT ON public.users TO mailroom_app")
        conn.execute("VACUUM ANALYZE public.users")
        conn.execute("SELECT mailroom.upsert_template('digest', 'Your week', 'Hello {{ name }}')")
        conn.execute("CREATE TABLE public.bare (LIKE mailroom.contents INCLUDING DEFAULTS INCLUDING GENERATED"
                     " INCLUDING IDENTITY)")
        conn.execute("CREATE TABLE public.bare_indexed (LIKE mailroom.contents INCLUDING ALL)")
        indexes = conn.execute("SELECT count(*) FILTER (WHERE indrelid = 'mailroom.contents'::regclass),"
                               "       count(*) FILTER (WHERE indrelid = 'mailroom.queue'::regclass)"
                               " FROM pg_index").fetchone()
        print(f"users table {n:,} rows in {time.perf_counter() - t:.1f} s; contents has {indexes[0]} indexes,"
              f" queue {indexes[1]}")

        def timed(sql: str, role: str | None = None) -> float:
            conn.execute("CHECKPOINT")
            if role:
                conn.execute(f"SET ROLE {role}")
            t0 = time.perf_counter()
            conn.execute(sql)
            elapsed = time.perf_counter() - t0
            conn.execute("RESET ROLE")
            return elapsed

        best: dict[str, float] = {}
        campaign_sql = ("SELECT mailroom.enqueue_campaign('weekly digest', 'digest',"
                        " 'SELECT id AS recipient_id, email, vars, time_zone FROM public.users',"
                        " p_vars => '{\"name\": \"friend\"}', p_window_start => '08:00', p_window_end => '20:00')")
        for _ in range(args.rounds):
            conn.execute("TRUNCATE public.bare, public.bare_indexed, mailroom.campaigns CASCADE")
            conn.execute(EMPTY_QUEUE)
            # A campaign row the direct inserts' rows belong to.
            conn.execute("SET ROLE mailroom_app")
            conn.execute("SELECT mailroom.enqueue_campaign('direct', 'digest', 'SELECT 1 AS recipient_id,"
                         " ''x@example.org'' AS email WHERE false')")
            conn.execute("RESET ROLE")
            direct = conn.execute("SELECT id FROM mailroom.campaigns WHERE name = 'direct'").fetchone()[0]
            sides = {
                "bare": f"INSERT INTO public.bare ({COLUMNS}) {same_rows(direct)}",
                "+ indexes": f"INSERT INTO public.bare_indexed ({COLUMNS}) {same_rows(direct)}",
                "contents + queue": both_tables(direct),
            }
            for label, sql in sides.items():
                best[label] = min(best.get(label, float("inf")), timed(sql))
            conn.execute(EMPTY_QUEUE)
            best["enqueue_campaign"] = min(best.get("enqueue_campaign", float("inf")),
                                           timed(campaign_sql, "mailroom_app"))
        added = conn.execute("SELECT count(*) FROM mailroom.contents").fetchone()[0]
        first_chunk = conn.execute("SELECT count(*) FROM mailroom.queue").fetchone()[0]
        chunk = conn.execute("SELECT mailroom._campaign_chunk_size()").fetchone()[0]
        rerun = timed(campaign_sql, "mailroom_app")
        again = conn.execute("SELECT count(*) FROM mailroom.contents").fetchone()[0] - added
        rest = timed("SELECT mailroom._campaign_queue_all(id, now()) FROM mailroom.campaigns WHERE name = 'weekly digest'")
        live = conn.execute("SELECT count(*) FROM mailroom.queue").fetchone()[0]

        bare = best["bare"]
        print(f"{'side':18} {'seconds':>8} {'x bare':>7} {'µs/row':>7}")
        for label, secs in best.items():
            print(f"{label:18} {secs:8.2f} {secs / bare:7.2f} {secs / n * 1e6:7.1f}")
        print(f"{'re-run':18} {rerun:8.2f} {rerun / bare:7.2f}   ({again} added)")
        print(f"{'the other chunks':18} {rest:8.2f} {rest / bare:7.2f} {rest / n * 1e6:7.1f}"
              f"   (queued later by claims, {chunk:,} a chunk; here all at once)")
        print(f"index maintenance (+ indexes - bare): {best['+ indexes'] - bare:.2f} s;"
              f" the queue rows and whatever contents carries (contents + queue - + indexes):"
              f" {best['contents + queue'] - best['+ indexes']:.2f} s;"
              f" enqueue_campaign's own work (enqueue_campaign - contents + queue):"
              f" {best['enqueue_campaign'] - best['contents + queue']:.2f} s")
        ratio = best["enqueue_campaign"] / bare
        target(f"enqueue_campaign of {n:,} <= 3 x bare INSERT ... SELECT (no indexes)",
               f"{best['enqueue_campaign']:.1f} s = {ratio:.2f} x (the same rows into contents + queue directly:"
               f" {best['contents + queue'] / bare:.2f} x)", ratio <= 3)
        target("a re-run adds 0 rows", str(again), again == 0)
        if added != n or first_chunk != min(n, chunk) or live != n:
            print(f"FAIL: enqueue_campaign added {added:,} contents and {first_chunk:,} queue rows (all chunks:"
                  f" {live:,}), expected {n:,} and {min(n, chunk):,} ({n:,})", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
