"""A runner the database can see: its heartbeat row, and one summary line a minute.

`Heartbeat` owns two small jobs the rest of the runner need not know about:

- the row in `mailroom.runners` (deploy/runner_heartbeat.sql): written with
  the outcome flushes, on the connection the flush used, at most once per
  `MIN_GAP` while something changes and every `interval` while nothing does;
  so a working runner costs the database about one tiny upsert a second, never
  a round trip per mail. A clean stop writes the last counts and calls
  `runner_gone`. Operators read `mailroom.runner_status`; a runner silent for
  three intervals is shown as lost.
- the `runner.summary` log line: once a minute while the runner works, the
  counts and the send rate since the previous line; nothing when nothing was
  done, so an idle runner stays quiet at level info.

It reads the runner's state through one callable returning `Vitals`, and
never raises into its caller: a heartbeat that cannot be written must not
stop the flush it rides on (a database outage is logged by the runner already;
a refused call, e.g. a schema older than the runner, is logged once).

The hooks, whatever the runner's shape: after each flush attempt call
`after_flush(conn_or_pool, db_ok)`; at shutdown, after the last flush,
`stop(pool)`.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import psycopg
import psycopg_pool

from mailroom import logs, metrics, queries
from mailroom.logs import event

DEFAULT_INTERVAL = 5.0  # seconds between heartbeats of an idle runner
MIN_GAP = 1.0  # seconds: a working runner's flushes carry a heartbeat at most this often
DEFAULT_SUMMARY_EVERY = 60.0  # seconds between runner.summary lines
RELAY_ERROR_MAX = 200  # characters kept of the relay's error (the table allows 300)

# scheme://user:password@ -> scheme://user:***@ (a relay error quoting a URL)
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/@:]*:)[^\s/@]+@")


def runner_version() -> str:
    """The installed package's version (the one `pip` knows), else the module's."""
    try:
        from importlib.metadata import version

        return version("mailroom")
    except Exception:  # noqa: BLE001 - running from a source tree without metadata
        from mailroom import __version__

        return __version__


def safe_relay_error(text: str | None) -> str | None:
    """What may be stored about a relay error: registered secrets and URL
    passwords replaced by ***, one line, short."""
    if not text:
        return None
    text = _URL_PASSWORD.sub(r"\1***@", logs.redact(text))
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text[:RELAY_ERROR_MAX] or None


@dataclass(frozen=True)
class Vitals:
    """What the runner says about itself, counted since it started."""

    in_flight: int = 0
    sent: int = 0
    retried: int = 0
    failed: int = 0
    ambiguous: int = 0
    relay_up: bool = True
    relay_error: str | None = None

    def done(self) -> int:
        return self.sent + self.retried + self.failed + self.ambiguous


class Heartbeat:
    def __init__(
        self,
        worker: str,
        vitals: Callable[[], Vitals],
        *,
        sender: str | None = None,
        concurrency: int = 1,
        interval: float = DEFAULT_INTERVAL,
        summary_every: float = DEFAULT_SUMMARY_EVERY,
        min_gap: float = MIN_GAP,
        clock: Callable[[], float] = time.monotonic,
        database: str | None = None,
    ):
        if interval < 1:
            raise ValueError("heartbeat interval must be at least 1 second")
        self.worker = worker
        self.run_id = uuid.uuid4()  # a restart under the same worker name is a new run
        self.host = socket.gethostname()[:255] or "unknown"
        self.pid = os.getpid()
        self.version = runner_version()[:64]
        self.sender = sender
        self.concurrency = concurrency
        self.interval = interval
        self.min_gap = min(min_gap, interval)
        self.summary_every = summary_every
        self._vitals = vitals
        self._clock = clock
        self.database = database  # named in the summary line when a runner serves several
        self._beat_at: float | None = None  # last attempt to write (monotonic)
        self._written: Vitals | None = None  # what the last written beat said
        self._refused = logs.StateLog("heartbeat")  # a call the database refused, logged once
        self._summary_at = clock()
        self._summary_base = Vitals()

    # -- the row -------------------------------------------------------------------
    def due(self) -> bool:
        """A beat is due: never written, `interval` passed, or something
        changed and `min_gap` passed."""
        if self._beat_at is None:
            return True
        elapsed = self._clock() - self._beat_at
        if elapsed >= self.interval:
            return True
        return elapsed >= self.min_gap and self._vitals() != self._written

    def write(self, conn: psycopg.Connection) -> bool:
        """Write the row now, one statement on `conn`. False if it failed."""
        v = self._vitals()
        self._beat_at = self._clock()  # a failed attempt waits its turn like a written one
        try:
            queries.runner_heartbeat(
                conn, worker=self.worker, run_id=self.run_id, host=self.host, pid=self.pid,
                version=self.version, sender=self.sender, concurrency=self.concurrency,
                interval=timedelta(seconds=self.interval), in_flight=v.in_flight, sent=v.sent,
                retried=v.retried, failed=v.failed, ambiguous=v.ambiguous, relay_up=v.relay_up,
                relay_error=None if v.relay_up else safe_relay_error(v.relay_error),
            )
        except queries.DatabaseUnavailable:
            return False  # the runner logs db.down; the next flush tries again
        except queries.QueryError as e:
            self._refused.down(e, worker=self.worker)
            return False
        self._written = v
        self._refused.up()
        try:
            metrics.export_deliverability(*queries.deliverability(conn))
        except (queries.DatabaseUnavailable, queries.QueryError):
            pass  # metrics only: the next beat reads them again
        return True

    def after_flush(self, conn_or_pool, db_ok: bool = True) -> None:
        """The hook after every flush attempt (with or without outcomes): the
        summary line when due, then the heartbeat when due and the database
        answered the flush."""
        self.log_summary_if_due()
        if db_ok and self.due():
            self._on(conn_or_pool, self.write)

    def stop(self, conn_or_pool, db_ok: bool = True) -> None:
        """A clean stop: the last counts, then runner_gone (shown as stopped).
        Skipped while the database is down: shutdown must not wait for it (the
        row then turns lost after three intervals)."""
        self.log_summary(force=True)
        if not db_ok:
            return

        def last(conn):
            if self.write(conn):
                try:
                    queries.runner_gone(conn, self.worker, self.run_id)
                except (queries.DatabaseUnavailable, queries.QueryError) as e:
                    event(logging.WARNING, "heartbeat.gone_failed", error=str(e))

        self._on(conn_or_pool, last)

    @staticmethod
    def _on(conn_or_pool, action) -> None:
        if not isinstance(conn_or_pool, psycopg_pool.ConnectionPool):
            action(conn_or_pool)
            return
        try:
            with conn_or_pool.connection(timeout=2.0) as conn:
                action(conn)
        except (psycopg.Error, psycopg_pool.PoolTimeout):
            pass  # no connection now: the database's outage is the runner's to log

    # -- the summary line ----------------------------------------------------------
    def log_summary_if_due(self) -> None:
        if self._clock() - self._summary_at >= self.summary_every:
            self.log_summary()

    def log_summary(self, force: bool = False) -> None:
        """runner.summary with the counts and rate since the last line; silent
        when nothing was done (unless forced and something was)."""
        now, v = self._clock(), self._vitals()
        base, seconds = self._summary_base, now - self._summary_at
        self._summary_at, self._summary_base = now, v
        done = v.done() - base.done()
        if done <= 0 or (seconds <= 0 and not force):
            return
        event(
            logging.INFO, "runner.summary", seconds=round(seconds, 1),
            sent=v.sent - base.sent, retried=v.retried - base.retried, failed=v.failed - base.failed,
            ambiguous=v.ambiguous - base.ambiguous,
            per_second=round((v.sent - base.sent) / seconds, 1) if seconds > 0 else None,
            in_flight=v.in_flight, total_sent=v.sent, relay="up" if v.relay_up else "down",
            **({"database": self.database} if self.database else {}),
        )
