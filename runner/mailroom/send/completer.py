"""The completer: outcomes and releases on their way to the database.

One small object with one job, modelled on River's job completer
(riverqueue/river internal/jobcompleter/job_completer.go): the send pool
hands it each mail's outcome (`report`) and each claim it hands back unsent
(`release`); it buffers them, writes them in batches (`mark_outcomes`,
`release`) on a timer or when a batch fills, and keeps every one until the
database has it. Nothing else touches its buffers.

What is dropped, and only that: a report the database refuses *for its own
input* — a data exception, SQLSTATE class 22 (an outcome mark_outcomes does
not know, an id release refuses). A refused call is split in halves until the
one refused item is alone, so one bad report never drops the others.
Everything else keeps the whole buffer and is retried with backoff: a lost
connection, a read-only database after a failover (25006), a revoked grant
(42501), a function missing because runner and schema are out of step
(42883), statement or lock timeouts (57014, 55P03), serialization failures
and deadlocks (40001, 40P01), I/O and internal errors (58xxx, XX000), and
anything not in class 22. While the buffer cannot be written,
`writable` is false and the runner claims and reclaims nothing (it must not
claim more, nor reclaim what it has sent, on top of outcomes the database
does not have).

`on_flush(conn)` (optional) runs on the same connection after each
successful flush that wrote something: a heartbeat or a summary rides on
the outcome writes instead of costing its own round trip; with
`on_flush_every` it also runs when nothing was written for that many
seconds. An error in it is logged and never holds outcomes back.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from mailroom import logs, metrics, queries
from mailroom.backoff import Backoff
from mailroom.logs import event

FLUSH_INTERVAL = 0.1  # seconds an outcome may wait to be batched with others
FLUSH_SIZE = 200  # a flush starts at once when this many reports wait
MAX_PER_CALL = 1000  # keeps each mark_outcomes transaction short


def refuses_input(sqlstate: str | None) -> bool:
    """True when the database refused the call for the data it was given
    (class 22: data exception). Only then can one report be at fault; every
    other error is about the database or the runner's rights, and retrying
    the same report later is right."""
    return bool(sqlstate) and sqlstate.startswith("22")


@dataclass
class Report:
    """One mail's outcome on its way to mark_outcomes."""

    message_id: int
    token: object  # the claim's lease token: a UUID, or its text
    payload: dict  # Outcome.as_json(): outcome, smtp_code, detail, ...
    on_written: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    done: bool = False  # written (or dropped): a retry after a later failure skips it
    # payload as JSON text when the sender has it already (Outcome.as_json_text,
    # made once per Outcome: most mail shares the relay's usual reply).
    payload_json: str | None = field(default=None, repr=False, compare=False)

    def json_text(self) -> str:
        """This report as mark_outcomes' JSON object, written out directly:
        a fifth of the CPU of json.dumps of a dict made for each report. The
        id is an integer and the token a UUID's text, neither needs escaping."""
        fields = self.payload_json if self.payload_json is not None else json.dumps(self.payload)
        head = '{"id": %d, "token": "%s"' % (self.message_id, self.token)
        return head + (", " + fields[1:] if fields != "{}" else "}")


@dataclass
class Release:
    token: object
    ids: list[int]
    on_written: Callable[[list[int]], None] | None = field(default=None, repr=False, compare=False)
    done: set = field(default_factory=set)  # ids released (or dropped) so far


class Completer:
    def __init__(self, pool, *, on_flush: Callable | None = None, on_flush_every: float | None = None,
                 state: logs.StateLog | None = None, flush_interval: float = FLUSH_INTERVAL,
                 flush_size: int = FLUSH_SIZE, max_per_call: int = MAX_PER_CALL):
        self.pool = pool
        self.on_flush = on_flush
        # With nothing to write for this long, the timer thread runs on_flush
        # by itself (a heartbeat must not go stale while the runner is idle).
        self.on_flush_every = on_flush_every
        self._on_flush_at = time.monotonic()
        self.state = state or logs.StateLog("db")
        self.flush_interval, self.flush_size = flush_interval, flush_size
        self.max_per_call = self.per_call = max_per_call
        self._lock = threading.Lock()  # the buffers
        self._flush_lock = threading.Lock()  # one flush at a time
        self._reports: list[Report] = []
        self._releases: list[Release] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False  # the last flush could not write what it had
        self._failing_kind: str | None = None  # its SQLSTATE or error class, logged once per change
        self.backoff = Backoff()
        self.last_error: str | None = None
        # What the database has taken, by outcome ("sent", "retry", ...), plus
        # "released" and "dropped" (refused for its own input): easy to read
        # for a heartbeat or a summary line.
        self.written: Counter = Counter()

    # -- the producer's side ------------------------------------------------------
    def report(self, report: Report) -> None:
        with self._lock:
            self._reports.append(report)
            full = len(self._reports) >= self.flush_size
        if full:
            self._wake.set()

    def release(self, token, ids: list[int], on_written: Callable[[list[int]], None] | None = None) -> None:
        if ids:
            with self._lock:
                self._releases.append(Release(token, list(ids), on_written))
            self._wake.set()

    def flush_soon(self) -> None:
        self._wake.set()

    @property
    def pending(self) -> int:
        """Reports and released ids the database does not have yet."""
        with self._lock:
            return len(self._reports) + sum(len(r.ids) for r in self._releases)

    @property
    def writable(self) -> bool:
        """False from a flush that could not write until one that could."""
        return not self._failing

    # -- the thread -----------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="completer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            if not self.flush():
                self._stop.wait(self.backoff.next())
            elif (self.on_flush is not None and self.on_flush_every is not None
                  and time.monotonic() - self._on_flush_at >= self.on_flush_every):
                try:
                    with self.pool.connection(timeout=2.0) as conn:
                        self._call_on_flush(conn)
                except Exception as e:  # noqa: BLE001 - no connection: the next flush tells
                    event(logging.DEBUG, "completer.on_flush_skipped", error=queries.first_line(e))

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the timer thread (the final flush is the caller's: see drain)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def drain(self, deadline: float) -> bool:
        """Flush until nothing is pending or the monotonic `deadline` passes
        (retrying with backoff in between). True when everything was written."""
        backoff = Backoff(base=0.05, cap=1.0)
        while True:
            if self.flush() and not self.pending:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, backoff.next()))

    # -- one flush --------------------------------------------------------------------
    def flush(self) -> bool:
        """Write what is buffered now: outcomes first, then releases. True when
        all of it was written (or refused for its own input); False when
        something stays buffered for the next try."""
        with self._flush_lock:
            with self._lock:
                reports, self._reports = self._reports, []
                releases, self._releases = self._releases, []
            if not reports and not releases:
                return True
            wrote_any = False
            error = None
            try:
                with self.pool.connection(timeout=2.0) as conn:
                    error, left_reports = self._write_reports(conn, reports)
                    wrote_any = len(left_reports) < len(reports)
                    left_releases = releases
                    if error is None:  # outcomes first: a release never overtakes a report
                        error, left_releases = self._write_releases(conn, releases)
                        wrote_any = wrote_any or len(left_releases) < len(releases)
                    if wrote_any and self.on_flush is not None:
                        self._call_on_flush(conn)
            except Exception as e:  # noqa: BLE001 - no connection (pool timeout, ...): keep everything
                error = e if isinstance(e, (queries.DatabaseUnavailable, queries.QueryError)) else queries.translate(e)
                left_reports = [r for r in reports if not r.done]
                left_releases = [r for r in releases if set(r.ids) - r.done]
            if error is None:
                self._failing = False
                self._failing_kind = None
                self.last_error = None
                self.backoff.reset()
                self.per_call = min(self.max_per_call, self.per_call * 2)
                if self.state.up():
                    metrics.UP.labels("db").set(1)
                return True
            with self._lock:  # keep them, oldest first
                self._reports[:0] = left_reports
                self._releases[:0] = left_releases
            self._failing = True
            self.last_error = str(error)
            kind = getattr(error, "sqlstate", None) or type(error).__name__
            if kind != self._failing_kind:
                # db.down says the database went away once; this says, once per
                # kind of error, why the outcomes still wait (a grant, read-only, ...).
                self._failing_kind = kind
                event(logging.WARNING, "outcomes.unwritten", error=str(error), pending=len(left_reports),
                      releases=sum(len(r.ids) for r in left_releases))
            if getattr(error, "sqlstate", None) == "57014":
                # A statement timeout: smaller calls may fit under it.
                self.per_call = max(1, self.per_call // 2)
            self.state.down(error, pending_outcomes=len(left_reports),
                            pending_releases=sum(len(r.ids) for r in left_releases))
            metrics.UP.labels("db").set(0)
            return False

    def _call_on_flush(self, conn) -> None:
        self._on_flush_at = time.monotonic()
        try:
            self.on_flush(conn)
        except Exception as e:  # noqa: BLE001 - a heartbeat never holds outcomes back
            event(logging.WARNING, "completer.on_flush_failed", error=queries.first_line(e))

    def _chunks(self, reports: list[Report]) -> list[list[Report]]:
        """As few calls as possible, at most per_call each, and the same message
        never twice in one call (claimed again after its lease ran out during
        an outage: both reports must reach the ledger)."""
        chunks: list[list[Report]] = []
        seen: list[set] = []
        for r in reports:
            for chunk, ids in zip(chunks, seen):
                if r.message_id not in ids and len(chunk) < self.per_call:
                    chunk.append(r)
                    ids.add(r.message_id)
                    break
            else:
                chunks.append([r])
                seen.append({r.message_id})
        return chunks

    def _write_reports(self, conn, reports: list[Report]):
        """(error or None, reports not written). Refused calls are bisected."""
        for i, chunk in enumerate(chunks := self._chunks(reports)):
            error = self._write_report_chunk(conn, chunk)
            if error is not None:
                left = [r for c in chunks[i:] for r in c if not r.done]
                return error, left
        return None, []

    def _write_report_chunk(self, conn, chunk: list[Report]):
        try:
            t0 = time.perf_counter()
            queries.mark_outcomes(conn, [r.json_text() for r in chunk])
        except queries.QueryError as e:
            if not refuses_input(e.sqlstate):
                return e
            if len(chunk) == 1:
                (r,) = chunk
                event(logging.ERROR, "runner.outcome_rejected", id=r.message_id,
                      outcome=r.payload.get("outcome"), error=str(e))
                self._done_report(r, dropped=True)
                return None
            half = len(chunk) // 2
            return self._write_report_chunk(conn, chunk[:half]) or self._write_report_chunk(conn, chunk[half:])
        except queries.DatabaseUnavailable as e:
            return e
        event(logging.DEBUG, "outcomes.written", count=len(chunk), ms=round((time.perf_counter() - t0) * 1000, 1))
        for r in chunk:
            self._done_report(r)
        return None

    def _done_report(self, r: Report, dropped: bool = False) -> None:
        r.done = True
        self.written["dropped" if dropped else r.payload.get("outcome", "?")] += 1
        if r.on_written is not None:
            r.on_written()

    def _write_releases(self, conn, releases: list[Release]):
        for i, rel in enumerate(releases):
            error = self._write_release(conn, rel, rel.ids)
            if error is not None:
                return error, releases[i:]
        return None, []

    def _write_release(self, conn, rel: Release, ids: list[int]):
        ids = [x for x in ids if x not in rel.done]
        if not ids:
            return None
        try:
            queries.release(conn, ids, rel.token)
        except queries.QueryError as e:
            if not refuses_input(e.sqlstate):
                return e
            if len(ids) == 1:
                # The lease expires and reclaim recovers the mail: nothing is lost
                # by not handing it back early, and the runner is not wedged.
                event(logging.ERROR, "runner.release_rejected", id=ids[0], error=str(e))
                rel.done.add(ids[0])
                self.written["dropped"] += 1
                if rel.on_written is not None:
                    rel.on_written([ids[0]])
                return None
            half = len(ids) // 2
            return self._write_release(conn, rel, ids[:half]) or self._write_release(conn, rel, ids[half:])
        except queries.DatabaseUnavailable as e:
            return e
        rel.done.update(ids)
        self.written["released"] += len(ids)
        metrics.RELEASED.inc(len(ids))
        if rel.on_written is not None:
            rel.on_written(list(ids))
        return None
