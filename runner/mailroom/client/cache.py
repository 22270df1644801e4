"""Cache-aside with stampede protection, on mailroom's UNLOGGED cache table.

    from mailroom.client.cache import get_or_set

    courses = get_or_set(conn, "courses:list:page=2", ttl=300,
                         loader=lambda: expensive_query(filters))

On a miss, exactly one caller across all processes and hosts runs `loader`
(it holds the key's load lock, a row of mailroom.cache_loads, see
deploy/cache_get_or_lock.sql);
the others wait for it and read the stored value. Values are anything JSON can
hold. A cache error is a miss, never a failure: the loader runs instead.

The connection must be in autocommit mode: the value has to be committed
before the lock is released, or the waiters would find nothing and load again.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, Callable, TypeVar

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

log = logging.getLogger(__name__)

T = TypeVar("T")

def _interval(seconds: float | timedelta | None) -> timedelta | None:
    if seconds is None or isinstance(seconds, timedelta):
        return seconds
    return timedelta(seconds=seconds)


def get(conn: psycopg.Connection, key: str, default: Any = None) -> Any:
    """The value under `key`, or `default` on a miss or an expired entry."""
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute("SELECT v IS NOT NULL, v FROM mailroom.cache_get(%s) AS v", (key,))
        hit, value = cur.fetchone()
    return value if hit else default


def set(conn: psycopg.Connection, key: str, value: Any, ttl: float | timedelta | None = None) -> None:  # noqa: A001
    """Store `value` under `key`; `ttl` in seconds (or a timedelta), None = no expiry."""
    conn.execute("SELECT mailroom.cache_set(%s, %s, %s)", (key, Jsonb(value), _interval(ttl)))


def delete(conn: psycopg.Connection, key: str) -> bool:
    with conn.cursor(row_factory=tuple_row) as cur:
        return cur.execute("SELECT mailroom.cache_delete(%s)", (key,)).fetchone()[0]


def delete_prefix(conn: psycopg.Connection, prefix: str) -> int:
    """Remove every key starting with `prefix` (exact: no wildcards)."""
    with conn.cursor(row_factory=tuple_row) as cur:
        return cur.execute("SELECT mailroom.cache_delete_prefix(%s)", (prefix,)).fetchone()[0]


def get_or_set(
    conn: psycopg.Connection,
    key: str,
    ttl: float | timedelta | None,
    loader: Callable[[], T],
    *,
    wait: float = 5.0,
) -> T:
    """Return the cached value of `key`, or run `loader` once across every
    caller, store its result for `ttl` seconds and return it.

    `wait`: how long to wait for another caller's load before loading anyway.
    """
    if not conn.autocommit:
        raise ValueError("mailroom.cache.get_or_set needs an autocommit connection "
                         "(the value must be committed before the load lock is released)")
    try:
        with conn.cursor(row_factory=tuple_row) as cur:
            hit, value, locked = cur.execute(
                "SELECT hit, value, locked FROM mailroom.cache_get_or_lock(%s, %s)",
                (key, timedelta(seconds=wait)),
            ).fetchone()
    except psycopg.Error as e:
        log.warning("mailroom cache: read of %r failed, loading without the cache: %s", key, e)
        return loader()
    if hit:
        return value
    try:
        value = loader()
        try:
            set(conn, key, value, ttl)
        except psycopg.Error as e:
            log.warning("mailroom cache: write of %r failed: %s", key, e)
        return value
    finally:
        if locked:
            try:
                conn.execute("SELECT mailroom.cache_unlock(%s)", (key,))
            except psycopg.Error as e:
                # A broken connection has released its session lock already.
                log.warning("mailroom cache: unlock of %r failed: %s", key, e)
