"""Crash semantics: UNLOGGED tables are emptied by crash recovery.

On a throwaway cluster that this test initdb's itself (never the shared one):
fill the cache and the limiter, `pg_ctl stop -m immediate` (a crash as far as
PostgreSQL can tell), start again, and show both start cold and keep working
while a logged table kept its row.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

from mailroom.embedded import PG_BIN, SUPERUSER, Cluster, _as_owner, _running_as_root, project_root


class ThrowawayCluster(Cluster):
    """The embedded cluster's code, pointed at a temporary folder."""

    def __init__(self, state: Path):
        super().__init__(project_root())
        self._state = state

    @property
    def state_dir(self) -> Path:
        return self._state

    def _choose_home(self) -> Path:
        return self._state / "cluster"

    def crash(self) -> None:
        subprocess.run(
            _as_owner([str(PG_BIN / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "immediate", "-w"]),
            check=True, capture_output=True,
        )


@pytest.fixture
def throwaway():
    state = Path(tempfile.mkdtemp(prefix="mailroom-crash-", dir="/var/tmp"))
    os.chmod(state, 0o755)  # the postgres user must reach its data folder below
    if _running_as_root():
        owner = pwd.getpwnam(SUPERUSER)
        os.chown(state, owner.pw_uid, owner.pw_gid)
    cluster = ThrowawayCluster(state)
    try:
        yield cluster
    finally:
        if cluster.is_running():
            cluster.crash()  # nothing to keep: the fastest way down
        shutil.rmtree(state, ignore_errors=True)


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
