"""Bloat (issue 7, item 9): drain 1,000,000 mails, then table and index sizes,
dead tuples and claim latency at the end vs the start; with PostgreSQL's
autovacuum defaults and with the settings mailroom deploys (v0.4: on
mailroom.queue, contents and attempts, as their tables' changes set them)
plus the naptime docs/operations.md recommends ("Vacuum and the queue tables").

Per configuration, a fresh scratch database: 1,000,000 queued mails (--quick:
100,000) written as the owner and VACUUM ANALYZEd. Claim latency at the start
= 20 claims of 100 (each marked sent) before the drain; then 3 connections
drain the rest as the runner does, from SQL (no SMTP): claim_batch(w, 1000),
then mark_outcomes (all sent) in a second transaction, until nothing is left.
At the end: sizes, pg_stat_user_tables (dead tuples, autovacuum runs), and 20
claims of 100 over 2,000 freshly queued mails, which sit behind every entry
the drain left in the claim index.

The defaults configuration RESETs every per-table autovacuum setting of the
three tables in its scratch database (fillfactor stays: it is the table's shape). The deployed configuration adds
autovacuum_naptime = 10s, a server setting: this script sets it with ALTER
SYSTEM for that configuration only and resets it afterwards. Usage: .venv/bin/python bench/bloat.py [--quick]
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (_server_url, bench_parser, insert_mail, scratch_database, sent_stats, target,  # noqa: E402
                     vacuum_analyze)

ROOT = Path(__file__).resolve().parents[1]
DRAINERS, DRAIN_BATCH, PROBES, PROBE_BATCH = 3, 1000, 20, 100


TABLES = ("queue", "contents", "attempts")


def defaults_sql(conn: psycopg.Connection) -> list[str]:
    """The statements that put the queue tables back on PostgreSQL's
    autovacuum defaults: RESET of each per-table autovacuum setting deployed."""
    rows = conn.execute(
        "SELECT c.relname, array_agg(split_part(o, '=', 1) ORDER BY o) FROM pg_class c, unnest(c.reloptions) o"
        " WHERE c.relnamespace = 'mailroom'::regnamespace AND c.relname = ANY(%s)"
        "   AND o LIKE 'autovacuum%%' GROUP BY c.relname ORDER BY c.relname", (list(TABLES),)).fetchall()
    return [f"ALTER TABLE mailroom.{rel} RESET ({', '.join(opts)})" for rel, opts in rows]


def fill(conn: psycopg.Connection, n: int, run_at: str) -> None:
    insert_mail(conn, "delivery_key, to_address, subject, body_text",
                "SELECT 'b-' || gen_random_uuid(), 'u' || g || '@d' || (g %% 100) || '.example', 'Hello', 'Body'"
                " FROM generate_series(1, %s) g", (n,), run_at=run_at)


def claim_and_mark(conn: psycopg.Connection, worker: str, limit: int) -> int:
    rows = conn.execute("SELECT id, lease_token FROM mailroom.claim_batch(%s, %s)", (worker, limit),
                        prepare=True).fetchall()
    if rows:
        results = [{"id": i, "token": str(t), "outcome": "sent"} for i, t in rows]
        conn.execute("SELECT mailroom.mark_outcomes(%s::jsonb)", (json.dumps(results),), prepare=True)
    return len(rows)


def probe(conn: psycopg.Connection) -> list[float]:
    times = []
    for i in range(PROBES):
        t0 = time.perf_counter()
        n = len(conn.execute("SELECT id FROM mailroom.claim_batch(%s, %s)", (f"probe-{i}", PROBE_BATCH),
                             prepare=True).fetchall())
        times.append((time.perf_counter() - t0) * 1000)
        if n != PROBE_BATCH:
            raise RuntimeError(f"probe claim got {n} rows")
    conn.execute("SELECT mailroom.mark_outcomes(jsonb_agg(jsonb_build_object('id', id, 'token', lease_token,"
                 " 'outcome', 'sent'))) FROM mailroom.queue WHERE status = 'sending'")
    return times


def stats(conn: psycopg.Connection) -> list[tuple]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute(
        """
        SELECT s.relname, pg_relation_size(s.relid), pg_indexes_size(s.relid),
               pg_relation_size('mailroom.queue_claim_idx'), s.n_live_tup, s.n_dead_tup,
               s.autovacuum_count, s.n_tup_hot_upd, s.n_tup_upd
        FROM pg_stat_user_tables s
        WHERE s.schemaname = 'mailroom' AND s.relname = ANY(%s)
        ORDER BY array_position(%s, s.relname::text)
        """, (list(TABLES), list(TABLES))).fetchall()


def run(label: str, n: int, settings: list[str]) -> dict:
    with scratch_database("mailroom_bench_bloat") as url, psycopg.connect(url, autocommit=True) as conn:
        for statement in settings:
            conn.execute(statement)
        fill(conn, n, "now() - interval '1 hour'")
        vacuum_analyze(conn)
        start = probe(conn)
        t0 = time.perf_counter()
        errors: list[BaseException] = []

        def drain(k: int) -> None:
            try:
                with psycopg.connect(url, autocommit=True) as c:
                    while claim_and_mark(c, f"drain-{k}", DRAIN_BATCH):
                        pass
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=drain, args=(k,)) for k in range(DRAINERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        drained = time.perf_counter() - t0
        sent = sent_stats(conn)[0]
        time.sleep(1.5)  # let the statistics of the drain connections arrive
        after = stats(conn)
        fill(conn, PROBES * PROBE_BATCH, "now()")
        end = probe(conn)
    print(f"{label}: drained {sent:,} in {drained:.1f} s ({sent / drained:,.0f}/s)")
    return {"label": label, "start": start, "end": end, "stats": after, "drained": drained}


def main() -> int:
    args = bench_parser(__doc__).parse_args()
    n = 100_000 if args.quick else 1_000_000
    with scratch_database("mailroom_bench_bloat") as url, psycopg.connect(url, autocommit=True) as c:
        defaults = defaults_sql(c)
    print(f"mailroom bench: bloat after draining {n:,} mails, {DRAINERS} connections, claims of {DRAIN_BATCH}")
    print("PostgreSQL defaults: " + "; ".join(" ".join(st.split()) for st in defaults))
    print("as deployed: the per-table settings deployed on mailroom.queue, contents and attempts,"
          " and autovacuum_naptime = 10s")
    results = [run("PostgreSQL defaults", n, defaults)]
    server = _server_url()
    with psycopg.connect(server, autocommit=True) as c:
        c.execute("ALTER SYSTEM SET autovacuum_naptime = '10s'")
        c.execute("SELECT pg_reload_conf()")
    try:
        results.append(run("as deployed", n, []))
    finally:
        with psycopg.connect(server, autocommit=True) as c:
            c.execute("ALTER SYSTEM RESET autovacuum_naptime")
            c.execute("SELECT pg_reload_conf()")

    mb = 1024 * 1024
    print(f"{'configuration':22} {'table':9} {'heap MB':>8} {'idx MB':>7} {'claim idx MB':>12} {'live':>9}"
          f" {'dead':>9} {'autovac':>7} {'HOT %':>6}")
    for r in results:
        for rel, heap, idx, claim, live, dead, av, hot, upd in r["stats"]:
            print(f"{r['label']:22} {rel:9} {heap / mb:8.1f} {idx / mb:7.1f} "
                  f"{(claim / mb if rel == 'queue' else 0):12.2f} {live:9,} {dead:9,} {av:7} "
                  f"{(100 * hot / upd if upd else 0):6.1f}")
    print(f"{'configuration':22} {'claim ms start':>15} {'claim ms end':>13} {'end/start':>9}   (median of {PROBES} claims of {PROBE_BATCH})")
    for r in results:
        s, e = statistics.median(r["start"]), statistics.median(r["end"])
        print(f"{r['label']:22} {s:15.2f} {e:13.2f} {e / s:9.2f}")
    for r in results:
        ratio = statistics.median(r["end"]) / statistics.median(r["start"])
        dead = sum(row[5] for row in r["stats"])
        target(f"claim latency after draining {n:,} / before, {r['label']} (own bound <= 1.5, the issue sets none)",
               f"{ratio:.2f} ({dead:,} dead tuples left)", ratio <= 1.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
