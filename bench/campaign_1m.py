"""Benchmark: enqueue_campaign of 1,000,000 recipients from a users table.

Runs in a scratch database on the embedded cluster (or on MAILROOM_BENCH_DSN,
a superuser libpq URL), deployed with Sqitch, and prints:

    users table        1,000,000 rows   ...s
    enqueue_campaign   1,000,000 added  ...s
    re-run             0 added          ...s

The second call must add 0 rows (UNIQUE (campaign_id, recipient_id)).
Usage: .venv/bin/python bench/campaign_1m.py [--recipients N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import scratch_database  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipients", type=int, default=1_000_000)
    args = parser.parse_args()

    with scratch_database("mailroom_bench_campaign") as url, psycopg.connect(url, autocommit=True) as conn:
        n = args.recipients
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
        conn.execute("ANALYZE public.users")
        conn.execute("SELECT mailroom.upsert_template('digest', 'Your week', 'Hello {{ name }}')")
        print(f"users table        {n:>9,} rows    {time.perf_counter() - t:6.1f}s")

        query = "SELECT id AS recipient_id, email, vars, time_zone FROM public.users"
        conn.execute("SET ROLE mailroom_app")
        for label in ("enqueue_campaign", "re-run"):
            t = time.perf_counter()
            with conn.transaction():
                conn.execute(
                    "SELECT mailroom.enqueue_campaign('weekly digest 2026-07-06', 'digest', %s,"
                    " p_window_start => '08:00', p_window_end => '20:00')",
                    (query,),
                )
            elapsed = time.perf_counter() - t
            conn.execute("RESET ROLE")
            added = conn.execute("SELECT count(*) FROM mailroom.messages").fetchone()[0]
            conn.execute("SET ROLE mailroom_app")
            if label == "re-run":
                added -= first
            else:
                first = added
            print(f"{label:<18} {added:>9,} added   {elapsed:6.1f}s")
        conn.execute("RESET ROLE")
        if added != 0:
            print("FAIL: the re-run added rows", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
