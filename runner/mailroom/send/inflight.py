"""The mail a runner has claimed and not yet finished, batch by batch.

A claim's lease covers its batch while any of its mail is unsent
(`unfinished`) or sent without its outcome in the database yet
(`unrecorded`): the lease keeper extends it at half-time until both are
empty, and it goes on while the completer cannot write, since a sent mail
whose outcome waits in memory must not be reclaimed and sent again
meanwhile. A mail's outcome or release is handed to the completer of the
database it came from."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from mailroom import logs, metrics, queries
from mailroom.backoff import Backoff
from mailroom.logs import event
from mailroom.send.completer import Report
from mailroom.send.database import Database
from mailroom.send.transport import Outcome

_log = logging.getLogger(logs.LOGGER_NAME)

LEASE_CHECK_INTERVAL = 1.0


@dataclass
class Batch:
    """One claim's lease: which of its mail is still being sent, and which
    has no outcome in the database yet (both keep the lease extended)."""

    token: str  # the lease token's text (queries.claim_batch)
    lease: float
    unfinished: set
    unrecorded: set
    db: Database = field(repr=False)  # where the mail came from, and where its outcomes go
    extended_at: float = field(default_factory=time.monotonic)


@dataclass
class Job:
    row: dict
    batch: Batch


class InFlight:
    def __init__(self, low_water: int, wake: threading.Event, *, name_databases: bool):
        self.lock = threading.Lock()  # batches, pending, counts (and each database's)
        self.batches: dict[tuple[str, str], Batch] = {}  # by (database, lease token)
        self.pending = 0  # claimed and not yet sent or handed back
        self.low_water = low_water  # claim again at or below this many
        self.wake = wake  # set when there is room again
        self.name_databases = name_databases  # say which database a mail is from in the log
        # Counts since start: claimed, sent, retry, failed, ambiguous, handed_back.
        self.counts: Counter = Counter()
        self._mail_counters: dict[tuple[str, str], object] = {}  # (sender, outcome) -> metrics.MAILS child
        metrics.IN_FLIGHT.set_function(lambda: self.pending)  # read when scraped, not set on every mail

    def has_room(self) -> bool:
        with self.lock:
            return self.pending <= self.low_water

    def is_empty(self) -> bool:
        with self.lock:
            return self.pending == 0

    def add(self, db: Database, token, rows: list[dict], lease: float) -> Batch:
        """A claim's rows under one lease token: counted in flight until each is finished."""
        ids = {r["id"] for r in rows}
        b = Batch(token, lease, set(ids), set(ids), db)
        with self.lock:
            self.batches[(db.name, token)] = b
            self.pending += len(rows)
            db.pending += len(rows)
            self.counts["claimed"] += len(rows)
        for sender, count in Counter(r.get("sender") or "default" for r in rows).items():
            metrics.CLAIMED.labels(sender).inc(count)
        return b

    def record(self, job: Job, outcome: Outcome) -> None:
        """One mail's outcome: counted, logged, handed to the completer of
        the database it came from."""
        row = job.row
        key = (row.get("sender") or "default", outcome.outcome)
        counter = self._mail_counters.get(key)
        if counter is None:
            counter = self._mail_counters[key] = metrics.MAILS.labels(*key)
        counter.inc()
        level = logging.DEBUG if outcome.outcome in ("sent", "retry") else logging.INFO
        if _log.isEnabledFor(level):  # sent mail is logged at debug: spare the call at info
            event(level, f"mail.{outcome.outcome}", id=row["id"], attempt=row.get("attempt"),
                  code=outcome.smtp_code, enhanced=outcome.smtp_enhanced, detail=outcome.detail,
                  **({"database": job.batch.db.name} if self.name_databases else {}))
        b, mid = job.batch, row["id"]
        b.db.completer.report(Report(mid, b.token, outcome.as_json(), payload_json=outcome.as_json_text(),
                                     on_written=lambda: self._recorded(b, [mid])))
        with self.lock:
            self.counts[outcome.outcome] += 1
            b.db.counts[outcome.outcome] += 1
            self._done_locked(job)

    def hand_back(self, job: Job) -> None:
        """Not sent (stopping, the relay down, its template unavailable): released to the queue."""
        b = job.batch
        b.db.completer.release(b.token, [job.row["id"]], on_written=lambda ids: self._recorded(b, ids))
        with self.lock:
            self.counts["handed_back"] += 1
            self._done_locked(job)

    def _done_locked(self, job: Job) -> None:
        b = job.batch
        b.unfinished.discard(job.row["id"])
        self.pending -= 1
        b.db.pending -= 1
        if not b.unfinished:
            b.db.completer.flush_soon()
        if self.pending == self.low_water or self.pending == 0:
            self.wake.set()

    def _recorded(self, b: Batch, ids: list[int]) -> None:
        """The database has these ids' outcome or release (completer thread)."""
        with self.lock:
            b.unrecorded.difference_update(ids)
            if not b.unrecorded and not b.unfinished:
                self.batches.pop((b.db.name, b.token), None)

    # -- the lease keeper (a thread) -----------------------------------------------------
    def keep_leases(self, stopping: threading.Event, lease: float) -> None:
        """Extends a batch's lease at half-time while any of its mail is unsent
        or unrecorded, until stopping (a failing extension is retried, never fatal)."""
        backoff = Backoff()
        # Often enough that a short lease (the drills use 3 s) is extended well before it ends.
        interval = min(LEASE_CHECK_INTERVAL, lease / 10)
        while not stopping.wait(interval):
            if not self.extend_leases():
                stopping.wait(backoff.next())
            else:
                backoff.reset()

    def extend_leases(self) -> bool:
        """False when a database refused an extension (the others' batches
        are extended all the same)."""
        now = time.monotonic()
        with self.lock:
            due = [(b, sorted(b.unrecorded)) for b in self.batches.values()
                   if b.unrecorded and now - b.extended_at >= b.lease / 2]
        all_ok = True
        failing: set[str] = set()
        for b, ids in due:
            if b.db.name in failing:
                continue
            try:
                n = queries.extend_lease(b.db.pool, ids, b.token, b.lease)
            except (queries.DatabaseUnavailable, queries.QueryError) as e:
                b.db.state.down(e, database=b.db.name)
                failing.add(b.db.name)
                all_ok = False
                continue
            b.extended_at = now
            event(logging.DEBUG, "lease.extended", token=b.token, requested=len(ids), extended=n)
        return all_ok
