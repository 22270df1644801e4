"""A login with nothing but CONNECT cannot disturb mailroom's locks (issue 32, item 4).

v0.4.0 kept two locks in the advisory namespace, which belongs to every
login: the wake-up barrier (1835100525/3) and each cache key's load lock
(1835100524/hashtext(key)). A stranger holding the barrier made
enqueues_settled false for good (runners never slept, claiming in a loop);
one holding a key's load lock made every cache_get_or_lock of that key wait
its p_wait and fail. Both are now mailroom's own: a table lock on
mailroom.enqueue_barrier and a row of mailroom.cache_loads, which a stranger
can neither take nor see.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from mailroom import queries
from tests.conftest import connect

BARRIER = (1835100525, 3)


@pytest.fixture
def stranger(db_url, conn):
    """A session of a login with only PUBLIC's default CONNECT."""
    name = f"stranger_{uuid.uuid4().hex[:10]}"
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    try:
        with connect(db_url, user=name) as session:
            yield session
    finally:
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_a_stranger_holding_the_old_barrier_lock_does_not_keep_runners_awake(db_url, conn, stranger):
    stranger.execute("SELECT pg_advisory_lock(%s, %s)", BARRIER)
    runner = connect(db_url)
    try:
        conn.execute("SELECT mailroom.enqueue('ann@example.com', 'Hi', 'B')")
        assert queries.runner_waiting(runner, True)
        assert queries.enqueues_settled(runner), "nothing of mailroom's is in flight: the runner may sleep"
    finally:
        runner.close()


def test_a_stranger_cannot_take_or_read_the_barrier(stranger):
    for statement in ("LOCK TABLE mailroom.enqueue_barrier IN SHARE MODE NOWAIT",
                      "SELECT FROM mailroom.enqueue_barrier FOR UPDATE"):
        stranger.execute("BEGIN")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            stranger.execute(statement)
        stranger.execute("ROLLBACK")


def test_the_barrier_still_holds_an_enqueue_in_flight(db_url, conn):
    """What the barrier is for (tests/test_wakeup.py has the rest): an
    enqueue that saw nobody waiting keeps runners from sleeping until it ends."""
    app = psycopg.connect(db_url)
    runner = connect(db_url)
    try:
        app.execute("SELECT mailroom.enqueue('bob@example.com', 'Hi', 'B')")
        queries.runner_waiting(runner, True)
        assert not queries.enqueues_settled(runner)
        app.commit()
        assert queries.enqueues_settled(runner)
    finally:
        app.close()
        runner.close()


def test_a_stranger_holding_a_cache_keys_old_load_lock_does_not_stall_the_cache(conn, stranger):
    key = "report:2026-12"
    stranger.execute("SELECT pg_advisory_lock(1835100524, hashtext(%s))", (key,))
    row = conn.execute("SELECT hit, locked FROM mailroom.cache_get_or_lock(%s, '2 seconds')", (key,)).fetchone()
    assert row == {"hit": False, "locked": True}, "the caller loads at once instead of waiting in vain"
    assert conn.execute("SELECT mailroom.cache_unlock(%s) AS ok", (key,)).fetchone()["ok"]


def test_a_stranger_cannot_see_or_take_a_cache_load(conn, stranger):
    conn.execute("SELECT * FROM mailroom.cache_get_or_lock('k', '0')")
    for statement in ("SELECT * FROM mailroom.cache_loads",
                      "INSERT INTO mailroom.cache_loads VALUES ('k2', pg_backend_pid(), now())",
                      "SELECT * FROM mailroom.cache_get_or_lock('k', '0')",
                      "SELECT mailroom._cache_take_load('k')"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            stranger.execute(statement)
    assert conn.execute("SELECT mailroom.cache_unlock('k') AS ok").fetchone()["ok"]


def test_a_load_whose_lease_ran_out_is_taken_over(db_url, conn):
    holder = connect(db_url)
    try:
        assert holder.execute("SELECT locked FROM mailroom.cache_get_or_lock('slow', '0')").fetchone()["locked"]
        assert conn.execute("SELECT locked FROM mailroom.cache_get_or_lock('slow', '0')").fetchone() == \
            {"locked": False}, "a live holder within its lease keeps the key"
        conn.execute("UPDATE mailroom.cache_loads SET leased = leased - interval '61 seconds' WHERE key = 'slow'")
        assert conn.execute("SELECT locked FROM mailroom.cache_get_or_lock('slow', '0')").fetchone() == \
            {"locked": True}
        assert not holder.execute("SELECT mailroom.cache_unlock('slow') AS ok").fetchone()["ok"], \
            "the old holder no longer has it"
    finally:
        holder.close()
