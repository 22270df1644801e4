"""The console's database access: a small pool of connections as a login
that holds mailroom_operator and nothing more, and every statement the
console sends (reads of the operator views and functions, writes through the
operator functions; never a table)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from mailroom import exitcodes, logs


class ConsoleDatabaseError(RuntimeError):
    """The database cannot serve the console: unreachable (exit code 3), or
    the wrong role (4)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


# The roles the console's login must not hold: it reads and decides as an
# operator, so it should not be able to enqueue, claim, or own the schema.
_FORBIDDEN_ROLES = ("mailroom_owner", "mailroom_app", "mailroom_runner")
# On a fleet directory (--fleet-dsn) it reads as mailroom_fleet_operator,
# and may not enqueue (mailroom_fleet_app) nor hold the shards' mapping.
FLEET_ROLE = "mailroom_fleet_operator"
FLEET_FORBIDDEN_ROLES = ("mailroom_fleet_owner", "mailroom_fleet_app", *_FORBIDDEN_ROLES)

# Roles that do not exist in the cluster are neither held nor a membership
# (pg_has_role would fail on them).
ROLE_CHECK = """
SELECT r.rolsuper,
       EXISTS (SELECT FROM pg_roles g WHERE g.rolname = %(role)s)
         AND pg_has_role(current_user, %(role)s, 'USAGE') AS member,
       ARRAY(SELECT f FROM unnest(%(forbidden)s::text[]) f
             WHERE EXISTS (SELECT FROM pg_roles g WHERE g.rolname = f) AND pg_has_role(current_user, f, 'USAGE')) AS extra
FROM pg_roles r WHERE r.rolname = current_user
"""


def safe_dsn(dsn: str) -> str:
    """The DSN as it may be shown: without its password."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(unparsable DSN)"
    info.pop("password", None)
    return psycopg.conninfo.make_conninfo(**info)


class Database:
    """The console's pool over one database, as a login that holds `role`
    and none of `forbidden` (the shard: mailroom_operator; the fleet
    directory: mailroom_fleet_operator, with a statement_timeout, since
    PL/Proxy's own timeouts do not end a hung shard)."""

    def __init__(self, dsn: str, *, max_size: int = 6, role: str = "mailroom_operator",
                 forbidden: tuple[str, ...] = _FORBIDDEN_ROLES, option: str = "--dsn",
                 suggested_login: str = "mailroom_console", statement_timeout: str | None = None):
        try:
            info = psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as e:
            raise ConsoleDatabaseError(f"{option}: cannot parse: {logs.redact(str(e))}", exitcodes.USAGE) from None
        logs.register_secret(info.get("password"))
        self._dsn = dsn
        self.role, self.forbidden, self.option, self.suggested_login = role, forbidden, option, suggested_login
        self.shown_dsn = safe_dsn(dsn)

        def configure(conn: psycopg.Connection) -> None:
            if statement_timeout:
                conn.execute("SELECT set_config('statement_timeout', %s, false)", (statement_timeout,))

        self.pool = ConnectionPool(
            dsn, min_size=1, max_size=max_size, open=False, check=ConnectionPool.check_connection,
            configure=configure,
            kwargs={"autocommit": True, "row_factory": dict_row, "application_name": "mailroom-console",
                    "connect_timeout": 10},
        )

    def open(self) -> None:
        """Connect now and check the role, so bad configuration fails at start
        (one plain connection first: its error says why, where the pool
        would only retry until its timeout)."""
        try:
            with psycopg.connect(self._dsn, connect_timeout=10, row_factory=dict_row) as conn:
                row = conn.execute(ROLE_CHECK, {"role": self.role, "forbidden": list(self.forbidden)}).fetchone()
        except psycopg.OperationalError as e:
            reason = logs.redact(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
            raise ConsoleDatabaseError(f"cannot connect to {self.shown_dsn}: {reason}", exitcodes.UNREACHABLE) from None
        if not row["member"]:
            raise ConsoleDatabaseError(f"{self.option}: the console's login must be a member of {self.role}",
                                       exitcodes.REFUSED)
        if row["rolsuper"] or row["extra"]:
            held = ["superuser"] if row["rolsuper"] else []
            raise ConsoleDatabaseError(
                f"{self.option}: the console's login must hold {self.role} and nothing more, it is also "
                + ", ".join(held + list(row["extra"])) + ": use a login made for it"
                f" (CREATE ROLE {self.suggested_login} LOGIN IN ROLE {self.role})", exitcodes.REFUSED)
        try:
            self.pool.open(wait=True, timeout=15)
        except PoolTimeout as e:
            raise ConsoleDatabaseError(f"cannot connect to {self.shown_dsn}: {e}", exitcodes.UNREACHABLE) from None

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        with self.pool.connection() as conn:
            yield conn

    def all_at_once(self, **reads: str | tuple[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        """Several independent reads on the pool's connections at the same
        time: a page that needs five costs the slowest, not their sum."""
        from concurrent.futures import ThreadPoolExecutor

        def run(read):
            statement, params = read if isinstance(read, tuple) else (read, None)
            return self.all(statement, params)

        with ThreadPoolExecutor(max_workers=self.pool.max_size) as workers:
            futures = {name: workers.submit(run, read) for name, read in reads.items()}
            return {name: future.result() for name, future in futures.items()}

    def all(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        with self.connection() as conn:
            return conn.execute(sql, params).fetchall()

    def one(self, sql: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        with self.connection() as conn:
            return conn.execute(sql, params).fetchone()


# --- what the console sends ------------------------------------------------------

QUEUE_STATS = "SELECT * FROM mailroom.queue_stats"
# Due for over a minute: mail runners should have taken by now.
OVERDUE_BY_SENDER = "SELECT * FROM mailroom.overdue_counts(interval '1 minute')"
RUNNER_WARNINGS = "SELECT * FROM mailroom.runner_warnings()"
RUNNERS = "SELECT * FROM mailroom.runner_status WHERE state <> 'stopped' OR stopped_at > now() - interval '1 hour'"
THROUGHPUT = "SELECT * FROM mailroom.throughput(%(window)s::interval, %(bucket)s::interval)"
FAILURES_BY_SENDER = "SELECT * FROM mailroom.failures_by_sender(interval '1 day')"
# Not campaign_progress: it reads every campaign's history on each call.
CAMPAIGNS = "SELECT * FROM mailroom.campaign_summaries(200)"
CAMPAIGN_ACTIONS = {
    "pause": "SELECT mailroom.pause_campaign(%(id)s) AS result",
    "resume": "SELECT mailroom.resume_campaign(%(id)s) AS result",
    "cancel": "SELECT mailroom.cancel_campaign(%(id)s) AS result",
}
REVIEW_QUEUE = "SELECT * FROM mailroom.review_queue ORDER BY in_review_since LIMIT 500"
RESOLVE_REVIEW = "SELECT mailroom.resolve_review(%(id)s, %(decision)s) AS result"
FIND_MESSAGES = "SELECT * FROM mailroom.find_messages(%(q)s)"
INSPECT = "SELECT mailroom.inspect(%(ref)s) AS mail"
SUPPRESSIONS = "SELECT * FROM mailroom.suppression_search(%(q)s, 200)"
SUPPRESS = "SELECT mailroom.suppress(%(address)s, %(reason)s, %(source)s) AS result"
UNSUPPRESS = "SELECT mailroom.unsuppress(%(address)s) AS result"
FORGET = ("SELECT coalesce(string_agg(f.part || ' ' || f.rows, ', ') FILTER (WHERE f.rows > 0), 'nothing') AS result"
          " FROM mailroom.forget(%(address)s) AS f")
SCHEDULES = "SELECT * FROM mailroom.schedule_list(500)"
SEND_RATES = "SELECT * FROM mailroom.send_rate_usage()"
DESTINATION_RATES = "SELECT * FROM mailroom.destination_rates()"
SENDER_WARMUPS = "SELECT * FROM mailroom.sender_warmup_status()"
# The URL without its query or fragment, which often carry an access token;
# secret_name is the name of the runners' signing key, never the key.
WEBHOOKS = ("SELECT w.name, regexp_replace(w.url, '[?#].*$', '?…') AS url, w.secret_name, w.kinds, w.streams,"
            " w.status, w.paused_reason, w.paused_at, w.failures, w.max_failures, w.next_attempt_at, w.delivered,"
            " w.last_delivered_at, w.last_error, w.last_failure_at, w.delivering_worker, w.cursor, w.events_behind,"
            " w.warning FROM mailroom.webhook_status w ORDER BY w.name")
WEBHOOK_ACTIONS = {
    "pause": "SELECT mailroom.webhook_endpoint_pause(%(name)s) AS result",
    "resume": "SELECT mailroom.webhook_endpoint_resume(%(name)s) AS result",
}
# On the fleet directory: every shard asked on its own; one that does not
# answer is a row with answered = false and its error (docs/fleet.md).
FLEET_SHARDS = "SELECT * FROM mailroom_fleet.shard_status() ORDER BY shard"
