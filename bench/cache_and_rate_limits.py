"""Benchmark: the cache and the rate limiter against plain SQL on logged tables.

  cache_get hit        vs  SELECT by primary key on a logged table of the same shape
  cache_set            vs  INSERT ... ON CONFLICT on that logged table
  rate_limit           vs  a plain counter upsert on a logged table
  rate_limit_sliding   vs  the same plain upsert

One connection, prepared statements, best of 3 runs; ratios > 1 mean mailroom's
function costs that many times the plain statement. The issue sets no target
here beyond reporting the ratios; the target lines are this script's own
bounds (cache_get <= 1.5 x the PK SELECT, the writers <= 2 x the plain upsert
with synchronous_commit=off, where no WAL flush hides the difference).
Run: make bench (or .venv/bin/python bench/cache_and_rate_limits.py [--quick]
with the cluster up; --quick: 500 calls per run instead of 3,000).
"""

from __future__ import annotations

import os
import random
import sys
from datetime import timedelta
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_parser, per_op_us, scratch_database, target  # noqa: E402

ARGS = bench_parser(__doc__).parse_args()
N = int(os.environ.get("BENCH_N", "500" if ARGS.quick else "3000"))
KEYS = 10_000
VALUE = {"id": 1, "title": "An introduction to PostgreSQL", "tags": ["db", "sql"], "body": "x" * 150}

rng = random.Random(42)
keys = [f"courses:item:{rng.randrange(KEYS)}" for _ in range(N)]
limit_keys = [f"api:tenant-{rng.randrange(100)}" for _ in range(N)]
second = timedelta(seconds=1)


def setup(c: psycopg.Connection) -> None:
    c.execute("""
        CREATE TABLE public.kv (
          key text COLLATE "C" PRIMARY KEY, value jsonb NOT NULL, expires_at timestamptz,
          created_at timestamptz NOT NULL DEFAULT now(), accessed_at timestamptz NOT NULL DEFAULT now())""")
    c.execute("CREATE INDEX ON public.kv (expires_at) WHERE expires_at IS NOT NULL")
    c.execute("CREATE TABLE public.counters (key text COLLATE \"C\" PRIMARY KEY, window_start timestamptz, hits int)")
    c.execute("""INSERT INTO public.kv (key, value, expires_at)
                 SELECT 'courses:item:' || g, %s, now() + interval '1 day' FROM generate_series(0, %s) g""",
              (Jsonb(VALUE), KEYS - 1))
    c.execute("SELECT mailroom.cache_set('courses:item:' || g, %s, interval '1 day') FROM generate_series(0, %s) g",
              (Jsonb(VALUE), KEYS - 1))
    c.execute("VACUUM ANALYZE public.kv")
    c.execute("VACUUM ANALYZE mailroom.cache")


def main() -> None:
    with scratch_database("mailroom_bench") as url, psycopg.connect(url, autocommit=True) as c:
        setup(c)
        rows = []

        def pair(label, ours_sql, ours_args, plain_sql, plain_args):
            # Alternate the two, best of 3 each: the machine is shared, bursts of noise hit both.
            ours = plain = float("inf")
            for _ in range(3):
                ours = min(ours, per_op_us(lambda i: c.execute(ours_sql, ours_args(i), prepare=True).fetchall(), N, 1))
                plain = min(plain, per_op_us(lambda i: c.execute(plain_sql, plain_args(i), prepare=True).fetchall(), N, 1))
            rows.append((label, ours, plain))

        for sync in ("on", "off"):
            c.execute(f"SET synchronous_commit = {sync}")
            tag = f" (synchronous_commit={sync})"
            if sync == "on":
                pair("cache_get hit / PK SELECT (logged)",
                     "SELECT mailroom.cache_get(%s)", lambda i: (keys[i],),
                     "SELECT value FROM public.kv WHERE key = %s AND (expires_at IS NULL OR expires_at > now())",
                     lambda i: (keys[i],))
            pair("cache_set / upsert (logged)" + tag,
                 "SELECT mailroom.cache_set(%s, %s, %s)", lambda i: (keys[i], Jsonb(VALUE), timedelta(days=1)),
                 """INSERT INTO public.kv AS k (key, value, expires_at) VALUES (%s, %s, now() + %s)
                    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at,
                    created_at = now(), accessed_at = now() RETURNING 1""",
                 lambda i: (keys[i], Jsonb(VALUE), timedelta(days=1)))
            plain_upsert = """INSERT INTO public.counters AS r (key, window_start, hits)
                              VALUES (%s, date_trunc('second', now()), 1)
                              ON CONFLICT (key) DO UPDATE SET hits = r.hits + 1 RETURNING hits"""
            pair("rate_limit / upsert (logged)" + tag,
                 "SELECT * FROM mailroom.rate_limit(%s, 1000000, %s)", lambda i: (limit_keys[i], second),
                 plain_upsert, lambda i: (limit_keys[i],))
            pair("rate_limit_sliding / upsert (logged)" + tag,
                 "SELECT * FROM mailroom.rate_limit_sliding(%s, 1000000, %s)", lambda i: (limit_keys[i], second),
                 plain_upsert, lambda i: (limit_keys[i],))

        print(f"mailroom bench: cache and rate limits, {N} calls per run, one connection, best of 3")
        print("(the unlogged functions write no WAL; with synchronous_commit=on a logged upsert waits for a WAL flush)")
        print(f"{'comparison':58} {'ours µs':>9} {'plain µs':>9} {'ratio':>7}")
        for label, ours, plain in rows:
            print(f"{label:58} {ours:9.1f} {plain:9.1f} {ours / plain:7.2f}")
        for label, ours, plain in rows:
            if label.startswith("cache_get"):
                target("cache_get hit <= 1.5 x PK SELECT (own bound, the issue sets none)", f"{ours / plain:.2f} x", ours / plain <= 1.5)
            elif label.endswith("(synchronous_commit=off)"):
                name = label.split(" / ")[0]
                target(f"{name} <= 2 x plain upsert, synchronous_commit=off (own bound, the issue sets none)", f"{ours / plain:.2f} x", ours / plain <= 2)


if __name__ == "__main__":
    main()
