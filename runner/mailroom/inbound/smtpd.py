"""What mailroom's SMTP servers share: `mailroom inbound` (server.py) and
`mailroom submit` (mailroom/submit/server.py). Each writes what it accepts
in its own transaction on a small pool, and reads DATA as the bytes the
client sent."""

from __future__ import annotations

import psycopg_pool
from psycopg.rows import dict_row

from mailroom import queries


class PooledStore:
    """A connection pool for one server; `functions` are what its role must execute."""

    functions: tuple[str, ...] = ()

    def __init__(self, dsn: str, name: str, pool_size: int = 4):
        self.pool = psycopg_pool.ConnectionPool(
            dsn, min_size=1, max_size=pool_size, open=False, name=name,
            kwargs={"row_factory": dict_row, "autocommit": True, "application_name": name.replace("-", " ")},
            check=psycopg_pool.ConnectionPool.check_connection, reconnect_timeout=24 * 3600)

    def open(self, timeout: float = 10.0) -> None:
        self.pool.open(wait=True, timeout=timeout)

    def close(self) -> None:
        self.pool.close()

    def missing_functions(self) -> list[str]:
        return queries.missing_functions(self.pool, self.functions)


def raw_data(envelope) -> bytes:
    """DATA as received (aiosmtpd decodes it to str when SMTPUTF8 is used)."""
    raw = envelope.original_content or envelope.content or b""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    return raw
