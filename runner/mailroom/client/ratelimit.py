"""Rate limits for applications, on mailroom's UNLOGGED rate_limits table.

    from mailroom.client.ratelimit import rate_limit

    d = rate_limit(conn, f"login:{ip}", limit=10, window=60, on_error="deny")
    if not d.allowed:
        return too_many_requests(retry_after=d.retry_after)

`on_error` has no default on purpose: when the database cannot answer, the
caller decides. "allow" (fail open) keeps the application up when the limiter
is unhealthy - right for limits that protect comfort (API quotas, noisy
clients). "deny" (fail closed) refuses - right for limits that protect
something (login attempts, password resets, sending money or mail).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

import psycopg
from psycopg.rows import tuple_row

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    remaining: int
    retry_after: float  # seconds until a hit could be allowed; 0 when allowed
    degraded: bool = False  # True: the database did not answer, on_error decided


def rate_limit(
    conn: psycopg.Connection,
    key: str,
    limit: int,
    window: float | timedelta,
    *,
    on_error: Literal["allow", "deny"],
    sliding: bool = False,
) -> Decision:
    """Count one hit on `key` against `limit` per `window` (seconds or timedelta).

    sliding=False: fixed window (one upsert; up to 2 x limit across a window
    boundary). sliding=True: never more than `limit` in any span of `window`.
    Bad arguments (SQLSTATE 22023) raise whatever on_error says.
    """
    if on_error not in ("allow", "deny"):
        raise ValueError("on_error must be 'allow' (fail open) or 'deny' (fail closed)")
    if not isinstance(window, timedelta):
        window = timedelta(seconds=window)
    fn = "rate_limit_sliding" if sliding else "rate_limit"
    sql = f"SELECT allowed, remaining, retry_after FROM mailroom.{fn}(%s, %s, %s)"
    try:
        with conn.cursor(row_factory=tuple_row) as cur:
            if conn.autocommit:
                row = cur.execute(sql, (key, limit, window)).fetchone()
            else:
                with conn.transaction():  # a savepoint: a failure leaves the caller's transaction usable
                    row = cur.execute(sql, (key, limit, window)).fetchone()
    except psycopg.Error as e:
        if getattr(e, "sqlstate", None) == "22023":
            raise
        log.warning("mailroom rate limit %r: database error, failing %s: %s",
                    key, "open" if on_error == "allow" else "closed", e)
        return Decision(on_error == "allow", 0, 0.0, degraded=True)
    allowed, remaining, retry_after = row
    return Decision(allowed, remaining, retry_after.total_seconds() if retry_after is not None else float("inf"))
