"""Crash semantics: UNLOGGED tables are emptied by crash recovery.

On a throwaway cluster that this test initdb's itself (never the shared one):
fill the cache and the limiter, `pg_ctl stop -m immediate` (a crash as far as
PostgreSQL can tell), start again, and show both start cold and keep working
while a logged table kept its row.
"""

from __future__ import annotations

import psycopg
import pytest


@pytest.mark.slow
def test_cache_and_limiter_start_cold_after_a_crash_and_keep_working(throwaway):
    quiet = lambda m: None  # noqa: E731
    throwaway.up(log=quiet)
    url = throwaway.url()
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE public.durable (id int PRIMARY KEY)")
        c.execute("INSERT INTO public.durable VALUES (1)")
        c.execute("SELECT mailroom.cache_set('k:' || g, to_jsonb(g), NULL) FROM generate_series(1, 100) g")
        for _ in range(3):
            c.execute("SELECT * FROM mailroom.rate_limit('login:1', 3, '1 hour')")
        assert c.execute("SELECT allowed FROM mailroom.rate_limit('login:1', 3, '1 hour')").fetchone() == (False,)
        c.execute("CHECKPOINT")  # the logged row is on disk whatever synchronous_commit says

    throwaway.crash()
    throwaway.up(deploy=False, log=quiet)

    with psycopg.connect(throwaway.url(), autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM public.durable").fetchone() == (1,), "logged data survived"
        assert c.execute("SELECT count(*) FROM mailroom.cache").fetchone() == (0,), "the cache starts cold"
        assert c.execute("SELECT count(*) FROM mailroom.rate_limits").fetchone() == (0,), "every limit starts fresh"
        assert c.execute("SELECT mailroom.cache_get('k:1')").fetchone() == (None,)
        c.execute("SELECT mailroom.cache_set('k:1', '\"warm again\"', '1 minute')")
        assert c.execute("SELECT mailroom.cache_get('k:1')").fetchone() == ("warm again",)
        assert c.execute("SELECT allowed, remaining FROM mailroom.rate_limit('login:1', 3, '1 hour')").fetchone() == (True, 2)
        assert c.execute("SELECT allowed FROM mailroom.rate_limit_sliding('s', 1, '1 hour')").fetchone() == (True,)
