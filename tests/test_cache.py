"""The cache from applications: stampede protection across connections,
the Python helper, and the prefix delete's use of the primary key."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from mailroom.client import cache


def test_twenty_connections_on_one_missing_key_run_the_loader_once(db_url):
    n = 20
    conns = [psycopg.connect(db_url, autocommit=True) for _ in range(n)]
    calls = []
    calls_lock = threading.Lock()
    start = threading.Barrier(n)
    results = [None] * n
    errors = []

    def loader():
        with calls_lock:
            calls.append(threading.get_ident())
        time.sleep(0.3)  # an expensive query: everyone else arrives meanwhile
        return {"courses": [1, 2, 3], "loaded_by": threading.get_ident()}

    def worker(i):
        try:
            start.wait()
            results[i] = cache.get_or_set(conns[i], "courses:list:page=1", 60, loader)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in conns:
        c.close()

    assert not errors
    assert len(calls) == 1, f"the loader ran {len(calls)} times"
    assert all(r == results[0] for r in results), "every caller got the one loaded value"
    assert results[0]["courses"] == [1, 2, 3]


def test_a_failing_loader_releases_the_lock(db_url, conn):
    with psycopg.connect(db_url, autocommit=True) as other:
        with pytest.raises(RuntimeError):
            cache.get_or_set(other, "k", 60, lambda: (_ for _ in ()).throw(RuntimeError("db down")))
        # The lock is free again: the next caller becomes the loader at once.
        row = conn.execute("SELECT hit, locked FROM mailroom.cache_get_or_lock('k', '0')").fetchone()
        assert row == {"hit": False, "locked": True}
        conn.execute("SELECT mailroom.cache_unlock('k')")


def test_a_loader_whose_connection_dies_releases_the_lock(db_url, conn):
    dying = psycopg.connect(db_url, autocommit=True)
    assert dying.execute("SELECT locked FROM mailroom.cache_get_or_lock('k', '0')").fetchone() == (True,)
    waiter = {}

    def wait_for_it():
        with psycopg.connect(db_url, autocommit=True) as c:
            waiter["row"] = c.execute("SELECT hit, locked FROM mailroom.cache_get_or_lock('k', '10 s')").fetchone()
            c.execute("SELECT mailroom.cache_unlock('k')")

    t = threading.Thread(target=wait_for_it)
    t.start()
    time.sleep(0.2)
    dying.close()  # the loader's process is gone: its session lock goes with it
    t.join(timeout=10)
    assert waiter["row"] == (False, True), "the waiter took over the load"


def test_waiting_in_vain_loads_without_the_lock(db_url, conn):
    conn.execute("SELECT * FROM mailroom.cache_get_or_lock('slow', '0')")  # holds the lock
    with psycopg.connect(db_url, autocommit=True) as other:
        t0 = time.monotonic()
        assert cache.get_or_set(other, "slow", 60, lambda: "mine", wait=0.2) == "mine"
        assert time.monotonic() - t0 >= 0.2
    conn.execute("SELECT mailroom.cache_unlock('slow')")


def test_helpers_round_trip(conn):
    cache.set(conn, "a:1", {"x": [1, "two"]}, ttl=60)
    cache.set(conn, "a:2", None)  # a JSON null is a value, not a miss
    cache.set(conn, "b:1", 3)
    assert cache.get(conn, "a:1") == {"x": [1, "two"]}
    assert cache.get(conn, "a:2", default="miss") is None
    assert cache.get(conn, "zzz", default="miss") == "miss"
    assert cache.delete_prefix(conn, "a:") == 2
    assert cache.delete(conn, "b:1") is True
    assert cache.get(conn, "b:1", default="miss") == "miss"


def test_get_or_set_refuses_a_transaction_connection(db_url):
    with psycopg.connect(db_url) as c:
        with pytest.raises(ValueError, match="autocommit"):
            cache.get_or_set(c, "k", 60, lambda: 1)


def test_prefix_delete_is_a_range_scan_of_the_primary_key(conn):
    conn.execute("INSERT INTO mailroom.cache (key, value) SELECT 'k' || g, '1' FROM generate_series(1, 5000) g")
    conn.execute("ANALYZE mailroom.cache")
    plan = conn.execute(
        "EXPLAIN (FORMAT JSON) DELETE FROM mailroom.cache WHERE starts_with(key, 'k12')"
    ).fetchone()["QUERY PLAN"]
    text = str(plan)
    assert "cache_pkey" in text and "Seq Scan" not in text, text
