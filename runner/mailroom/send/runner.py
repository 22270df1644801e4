"""The runner: claim, render, send in parallel, report. No queue decisions.

Three objects with one job each:

- the claimer (`Runner`, the main thread): reclaim (at most once a second,
  once this runner's own outcomes are written) → claim_batch → get_templates
  → submit the rows to the send pool; claims again while full batches come
  back and the pool has room; when a claim comes back short, says it waits
  for work (`Waiting`: enqueue notifies only then), claims once more and
  waits for a NOTIFY (or the poll interval, or free room). It claims and
  reclaims nothing while the completer cannot write.
- the send pool (`mailroom.send.sendpool`): the SMTP connections; builds each mail
  (over SMTP ahead of need, up to one per session, while the relay holds the
  sessions) and sends it. One bad mail (a template that cannot compile, a recursion, an
  encoding error, variables nested too deep for Python's json: the claim
  leaves them as text, see queries.claim_batch) fails that mail with the
  error recorded, never the runner.
- the completer (`mailroom.send.completer`): buffers outcomes and releases, writes
  them in batches, keeps them until the database has them.

Besides: a listener thread (LISTEN on its own autocommit connection, sets the
wake-up event), a lease keeper (extends a batch's lease at half-time while
its mail is unsent or unrecorded) and a signal watcher (see below).

Faults: a lost database connection or SMTP server is logged once per state
change and retried with exponential backoff and jitter; outcomes stay in the
completer until they are written. No database transaction is open while a
mail is sent: every call in queries.py is one autocommit statement, and every
runner connection carries statement_timeout and lock_timeout (a quarter of
--grace, between 0.25 and 30 s) so that no statement can outlast the stop.

Signals: the handler does nothing in Python; `signal.set_wakeup_fd` makes the
interpreter write the signal's number to a socket, and the signal watcher
thread reads it and does the logging and the stopping there (a handler that
logs or sets an Event can deadlock on a lock the interrupted thread holds).
The first SIGTERM/SIGINT stops claiming; sends already started get until
--grace minus the time kept for the last writes (half the grace, at most
5 s); claims not yet started are released; outcomes and releases are written
until --grace is up. A second signal exits at once (the leases expire and
reclaim recovers the rows).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from mailroom import exitcodes, logs, metrics, queries
from mailroom.backoff import Backoff
from mailroom.send.completer import Report
from mailroom.send.database import Database, FatalError
from mailroom.send.dkim import Signing
from mailroom.send.heartbeat import Vitals
from mailroom.logs import event
from mailroom.send.render import Built, RenderError, read_json_columns
from mailroom.send.unsubscribe import Unsubscribe
from mailroom.send.sendpool import AsyncSendPool, ThreadSendPool
from mailroom.send.transport import Outcome, Transport

_log = logging.getLogger(logs.LOGGER_NAME)

LEASE_CHECK_INTERVAL = 1.0

__all__ = ["Backoff", "FatalError", "Runner", "Settings", "default_worker_name"]


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Settings:
    dsns: list[str] = field(repr=False)  # may hold passwords; one database or several
    smtp: str = field(repr=False)
    concurrency: int = 8
    batch: int = 100
    lease: float = 300.0
    sender: str | None = None
    poll_interval: float = 5.0
    grace: float = 30.0
    from_address: str = "mailroom@localhost"
    message_id_domain: str | None = None
    worker: str = field(default_factory=default_worker_name)
    smtp_timeout: float = 30.0
    exit_when_idle: bool = False
    heartbeat_interval: float = 5.0  # hidden options; tests shorten them
    summary_interval: float = 60.0
    dkim: dict = field(default_factory=dict, repr=False)  # sender -> dkim.Signer, loaded by load_profiles
    unsubscribe: Unsubscribe | None = field(default=None, repr=False)  # holds the signing keys
    verp_domains: dict = field(default_factory=dict)  # sender -> bounce domain (--verp)
    verp: object = field(default=None, repr=False)  # verp.Verp with the signing keys, when verp_domains is set
    # Through a transaction-mode pooler (--pooled): see mailroom.send.database.
    pooled: bool = False
    listen_dsns: list[str] = field(default_factory=list, repr=False)  # direct sessions, one per --dsn

    def __post_init__(self):
        if isinstance(self.dsns, str):
            self.dsns = [self.dsns]

    @property
    def db_timeout(self) -> float:
        """statement_timeout and lock_timeout of every runner connection:
        below the grace, so a blocked statement cannot outlast the stop."""
        return min(30.0, max(0.25, self.grace / 4))

    @property
    def write_reserve(self) -> float:
        """Seconds of the grace kept for the last outcome and release writes."""
        return min(self.grace / 2, 5.0)


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


def _note_signal(signum, frame) -> None:
    """The Python-level handler: nothing. The interpreter has already written
    the signal number to the wake-up fd (signal.set_wakeup_fd), which the
    signal watcher thread reads; doing anything here could deadlock."""


class Runner:
    def __init__(self, settings: Settings, transport: Transport | None = None, on_flush=None,
                 on_flush_every: float | None = None):
        self.s = settings
        if settings.concurrency < 1 or settings.batch < 1:
            raise ValueError("--concurrency and --batch must be >= 1")
        if settings.lease < 2:
            raise ValueError("--lease must be at least 2 seconds")
        if not settings.dsns:
            raise ValueError("--dsn: give at least one database")
        if settings.listen_dsns and len(settings.listen_dsns) != len(settings.dsns):
            raise ValueError(f"--listen-dsn: give one per --dsn, in the same order "
                             f"({len(settings.dsns)} --dsn, {len(settings.listen_dsns)} --listen-dsn)")
        self.transport = transport or Transport(settings.smtp, local_hostname=None)
        listen_dsns = settings.listen_dsns or [None] * len(settings.dsns)
        self.databases = [Database(dsn, settings=settings, listen_dsn=listen, pooled=settings.pooled,
                                   on_flush=on_flush, on_flush_every=on_flush_every)
                          for dsn, listen in zip(settings.dsns, listen_dsns)]
        names = [db.name for db in self.databases]
        if len(set(names)) != len(names):
            raise ValueError(f"--dsn: the same database twice: {', '.join(sorted(n for n in set(names) if names.count(n) > 1))}")
        self.several = len(self.databases) > 1
        self._rotation = 0  # which database a claim round starts with
        self.signing = Signing(settings.dkim, self.databases[0].renderer.domain)
        self.unsubscribe = settings.unsubscribe or Unsubscribe(None, {}, {}, {})
        self.needs_message = self.transport.needs_message
        self.lock = threading.Lock()  # batches, pending, counts
        self.batches: dict[tuple[str, str], Batch] = {}  # by (database, lease token)
        self.pending = 0  # claimed and not yet sent or handed back
        metrics.IN_FLIGHT.set_function(lambda: self.pending)  # read when scraped, not set on every mail
        self.low_water = 2 * settings.concurrency
        self.stopping = threading.Event()  # stop claiming
        self.stop_requested_at: float | None = None
        self.wake = threading.Event()
        if self.transport.url.scheme in ("smtp", "smtps"):
            # Waiting on a relay: coroutines, one thread for all connections.
            self.sendpool = AsyncSendPool(self.transport, settings.concurrency, lambda job: self._build(job),
                                          self.record, self._hand_back, self._should_hand_back)
            metrics.SESSIONS_IDLE.set_function(lambda: self.sendpool.idle)
            metrics.SENDS_WAITING.set_function(self.sendpool.waiting)
        else:
            # null:// and file:// do not wait on anything: plain threads.
            self.sendpool = ThreadSendPool(self.transport, settings.concurrency, self._deliver, self._hand_back,
                                           self._should_hand_back)
        self.exit_code = exitcodes.OK
        self.signals = 0
        # Counts since start: claimed, sent, retry, failed, ambiguous, handed_back.
        self.counts: Counter = Counter()
        self._mail_counters: dict[tuple[str, str], object] = {}  # (sender, outcome) -> metrics.MAILS child
        self._threads: list[threading.Thread] = []

    # -- counters (for a heartbeat or a summary line) -------------------------------
    def stats(self) -> dict:
        with self.lock:
            counts, in_flight = dict(self.counts), self.pending
        written: Counter = Counter()
        unwritten = 0
        for db in self.databases:
            if db.completer is not None:
                written.update(db.completer.written)
                unwritten += db.completer.pending
        return {**counts, "in_flight": in_flight, "unwritten": unwritten,
                "released": written.get("released", 0), "dropped": written.get("dropped", 0)}

    def _vitals_of(self, db: Database):
        """What a database's heartbeat row and summary line report: the
        counts of its mail since start, its mail in flight, and the relay's
        state (transport.health, which the send pools and the probe keep)."""
        def vitals() -> Vitals:
            with self.lock:
                counts, in_flight = dict(db.counts), db.pending
            health = self.transport.health
            return Vitals(in_flight=in_flight, sent=counts.get("sent", 0), retried=counts.get("retry", 0),
                          failed=counts.get("failed", 0), ambiguous=counts.get("ambiguous", 0),
                          relay_up=health.is_up, relay_error=health.error)
        return vitals

    # -- signals -------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """Call from the main thread. The watcher thread does what a signal means."""
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._signal_sockets = (reader, writer)  # kept open for the life of the process
        signal.signal(signal.SIGTERM, _note_signal)
        signal.signal(signal.SIGINT, _note_signal)
        threading.Thread(target=self._watch_signals, args=(reader,), name="signals", daemon=True).start()

    def _watch_signals(self, reader: socket.socket) -> None:
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum not in (signal.SIGTERM, signal.SIGINT):
                    continue
                self.signals += 1
                if self.signals > 1:
                    # Leases expire and reclaim recovers whatever was claimed.
                    os.write(2, b"mailroom: second signal, exiting at once\n")
                    os._exit(128 + signum)
                self.request_stop(signal.Signals(signum).name)

    def request_stop(self, why: str = "requested") -> None:
        if not self.stopping.is_set():
            self.stop_requested_at = time.monotonic()
            event(logging.INFO, "runner.stopping", reason=why, in_flight=self.pending, grace=self.s.grace)
        self.stopping.set()
        self.wake.set()

    # -- set-up ----------------------------------------------------------------------
    def open(self) -> None:
        opened = []
        try:
            for db in self.databases:
                db.open(self._vitals_of(db), named=self.several)
                opened.append(db)
        except FatalError:
            for db in opened:
                db.close()
            raise
        # Read even without --unsubscribe-url: run() warns when a stream wants the headers.
        self._merge_streams()
        metrics.UP.labels("db").set(1)
        metrics.UP.labels("transport").set(1)

    def close(self) -> None:
        for db in self.databases:
            db.close()

    def _merge_streams(self) -> None:
        """A stream carries unsubscribe headers when any database says so:
        streams are the fleet's configuration, kept alike on every shard."""
        merged: dict[str, bool] = {}
        for db in self.databases:
            for name, headers in db.streams.items():
                merged[name] = merged.get(name, False) or headers
        self.unsubscribe.streams = merged

    # -- the whole life --------------------------------------------------------------
    def run(self) -> int:
        self.open()
        event(
            logging.INFO, "runner.start", worker=self.s.worker, transport=self.transport.url.redacted(),
            concurrency=self.s.concurrency, batch=self.s.batch, lease=self.s.lease,
            sender=self.s.sender or "*", poll_interval=self.s.poll_interval,
            db_timeout=self.s.db_timeout, databases=",".join(db.name for db in self.databases),
            pooled=self.s.pooled,
        )
        if not self.unsubscribe.enabled:
            self._warn_if_unsubscribe_is_due()
        for db in self.databases:
            db.heartbeat.after_flush(db.pool)  # the first heartbeat: running from the start
        _quiet_garbage_collector()
        self._start_threads()
        try:
            self._main_loop()
        finally:
            self.stopping.set()
            self._shutdown()
        return self.exit_code

    def _raise_open_files_limit(self) -> None:
        """One descriptor per SMTP connection plus the database's and Python's
        own: raise the soft limit towards the hard one when the default 1,024
        would not do."""
        import resource

        want = self.s.concurrency + 128 + 8 * len(self.databases)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < want:
            new = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            if new < want:
                event(logging.WARNING, "runner.open_files_limit", limit=new, wanted=want,
                      note="raise the hard limit (ulimit -Hn, LimitNOFILE=) for this --concurrency")

    def _start_threads(self) -> None:
        self._raise_open_files_limit()
        for db in self.databases:
            db.completer.start()
        self.sendpool.start()
        targets = [(self._lease_keeper, (), "leases")]
        for db in self.databases:
            if db.listen_dsn is not None:  # through a pooler without --listen-dsn: polling only
                targets.append((db.listen, (self.stopping, self.wake, self.s.sender), "listener"))
        for target, args, name in targets:
            t = threading.Thread(target=target, args=args, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    # -- the claimer -------------------------------------------------------------------
    def _main_loop(self) -> None:
        smtp_backoff = Backoff(base=0.5, cap=30.0)
        # An enqueue in flight that may not wake us is a matter of milliseconds,
        # unless an application holds its transaction open.
        settle_backoff = Backoff(base=0.005, cap=0.2)
        while not self.stopping.is_set():
            if not self.transport.health.is_up:
                if self.s.exit_when_idle and self._idle():
                    event(logging.INFO, "runner.idle_exit", reason="transport down")
                    break
                self._probe_transport(smtp_backoff)
                continue
            with self.lock:
                room = self.pending <= self.low_water
            if not room:
                self.wake.wait(1.0)
                self.wake.clear()
                continue
            self.wake.clear()
            claimed, full, short = self._claim_round()
            if full:
                continue  # more is waiting: claim again as soon as there is room
            if not short:
                # Every database is waiting out a failure or its unwritten
                # outcomes: come back when the first may be tried again.
                self.stopping.wait(self._until_a_database_is_due())
                continue
            throttled = self._send_rate_wait(short)
            if throttled:
                # A send rate, not an empty queue, cut the claim short: come
                # back when the budget frees rather than after a full poll.
                self.wake.wait(min(throttled, self.s.poll_interval))
                continue
            if self.s.exit_when_idle and claimed == 0 and len(short) == len(self.databases):
                if self._idle():
                    event(logging.INFO, "runner.idle_exit")
                    break
                self.wake.wait(0.2)
                continue
            steps = {db.prepare_to_sleep() for db in short}
            if "claim" in steps:
                continue
            if "retry" in steps:
                self.wake.wait(settle_backoff.next())
                continue
            settle_backoff.reset()
            if "poll" in steps:
                self.wake.wait(min(0.5, self.s.poll_interval))
                continue
            self.wake.wait(min(self.s.poll_interval, self._until_a_database_is_due(self.s.poll_interval)))

    def _claim_round(self) -> tuple[int, bool, list[Database]]:
        """One claim from each database that may be claimed from, while
        there is room, starting one database further each round: a database
        whose mail keeps coming back in full batches cannot starve the next.
        Returns the rows claimed, whether a claim came back full, and the
        databases whose claim came back short (those may be waited on)."""
        now = time.monotonic()
        order = self.databases[self._rotation:] + self.databases[:self._rotation]
        self._rotation = (self._rotation + 1) % len(self.databases)
        claimed, full, short = 0, False, []
        for db in order:
            if not db.ready(now):
                continue
            with self.lock:
                if self.pending > self.low_water:
                    full = True  # no room left this round: the rest come first next round
                    break
            try:
                db.reclaim_if_due()
                got = self._claim(db)
                db.answered()
            except (queries.DatabaseUnavailable, queries.QueryError) as e:
                db.failed(e)
                continue
            claimed += got
            if got == self.s.batch:
                db.busy()
                full = True
            else:
                short.append(db)
        return claimed, full, short

    def _until_a_database_is_due(self, cap: float = 1.0) -> float:
        """Seconds until a database that could not be claimed from may be
        tried again: the first failure's backoff to end, or shortly for one
        whose outcomes wait to be written (at most cap)."""
        now = time.monotonic()
        waits = [db.retry_at - now if db.retry_at > now else 0.2
                 for db in self.databases if not db.ready(now)]
        return max(0.01, min([cap, *waits]))

    def _send_rate_wait(self, dbs: list[Database]) -> float | None:
        waits = []
        for db in dbs:
            try:
                wait = queries.send_rate_retry_after(db.pool, self.s.sender)
            except (queries.DatabaseUnavailable, queries.QueryError):
                continue  # the next claim finds out whether the database is back
            if wait and wait > 0:
                waits.append(wait)
        # Only when every short claim was cut by a send rate: one that found
        # the queue empty waits for a wake-up instead.
        return min(waits) if waits and len(waits) == len(dbs) else None

    def _idle(self) -> bool:
        with self.lock:
            busy = self.pending
        return busy == 0 and all(db.completer.pending == 0 for db in self.databases)

    def _warn_if_unsubscribe_is_due(self) -> None:
        """At start, without --unsubscribe-url: say so when a stream's mail
        should carry unsubscribe headers (RFC 8058; bulk senders must offer
        them), since this runner will send it without."""
        wanting = sorted(name for name, headers in self.unsubscribe.streams.items() if headers)
        if wanting:
            event(logging.WARNING, "unsubscribe.not_configured", streams=",".join(wanting),
                  hint="their mail goes out without List-Unsubscribe headers: give --unsubscribe-url "
                       "(MAILROOM_UNSUBSCRIBE_URL) and signing keys; --unsubscribe-mailto alone adds none")

    def _claim(self, db: Database) -> int:
        if self.unsubscribe.enabled and time.monotonic() - db.streams_read_at > 60:
            db.read_streams()
            self._merge_streams()
        t0 = time.perf_counter()
        rows = queries.claim_batch(db.pool, self.s.worker, self.s.batch, self.s.lease, self.s.sender)
        claim_s = time.perf_counter() - t0
        metrics.CLAIM_SECONDS.observe(claim_s)
        event(logging.DEBUG, "batch.claimed", count=len(rows), ms=round(claim_s * 1000, 1), database=db.name)
        db.last_claimed = len(rows)
        if not rows:
            return 0
        # Templates only when mail is built (plain null:// builds nothing).
        keys = sorted({r["template_key"] for r in rows if r.get("template_key")}) if self.needs_message else []
        unloaded: set[str] = set()
        if keys:
            try:
                db.renderer.load(queries.get_templates(db.pool, keys))
            except (queries.DatabaseUnavailable, queries.QueryError) as e:
                # Cached versions serve; mail whose template was never loaded
                # goes back to the queue rather than failing for a DB hiccup.
                unloaded = {k for k in keys if db.renderer.cached_version(k) is None}
                event(logging.WARNING, "templates.unavailable", error=str(e), handed_back=sorted(unloaded),
                      database=db.name)
        by_token: dict[object, list[dict]] = defaultdict(list)
        for r in rows:
            by_token[r["lease_token"]].append(r)
        for token, trs in by_token.items():
            ids = {r["id"] for r in trs}
            b = Batch(token, self.s.lease, set(ids), set(ids), db)
            with self.lock:
                self.batches[(db.name, token)] = b
                self.pending += len(trs)
                db.pending += len(trs)
                self.counts["claimed"] += len(trs)
            for sender, count in Counter(r.get("sender") or "default" for r in trs).items():
                metrics.CLAIMED.labels(sender).inc(count)
            ready = []
            for r in trs:
                if r.get("template_key") in unloaded:
                    self._hand_back(Job(r, b))
                else:
                    ready.append(Job(r, b))
            self.sendpool.submit_many(ready)
        return len(rows)

    def _probe_transport(self, backoff: Backoff) -> None:
        metrics.UP.labels("transport").set(0)
        if self.stopping.wait(backoff.next()):
            return
        conn = self.transport.connection()
        try:
            out = conn.probe()
        finally:
            conn.close()
        if out.outcome == "sent":
            self.transport.health.up(transport=self.transport.url.redacted())
            metrics.UP.labels("transport").set(1)
            backoff.reset()
        else:
            # Still down (logged once): health.error keeps the latest reason for the heartbeat.
            self.transport.health.down(out.detail or out.outcome, transport=self.transport.url.redacted())

    # -- what the send pool calls ---------------------------------------------------------
    def _should_hand_back(self) -> bool:
        return self.stopping.is_set() or not self.transport.health.is_up

    def _build(self, job: Job) -> Built | Outcome:
        """The mail, or the outcome that fails it: whatever one row's template,
        variables or headers raise stays with that row."""
        row = job.row
        try:
            if self.needs_message:
                read_json_columns(row)  # left as text by the claim; each job is built once
                url = self.unsubscribe.url_for(row)
                if url is not None:
                    row["unsubscribe_url"] = url  # {{ unsubscribe_url }} in its templates
                built = self.unsubscribe.apply(row, job.batch.db.renderer.build(row), url)
                built = self.signing.apply(row, built)  # Feedback-ID, DKIM: the final bytes
            else:  # plain null://: measures the queue machinery, not rendering
                built = Built(job.batch.db.renderer.envelope_from, row["to_address"], b"", "")
            return self._with_verp(row, built)
        except RenderError as e:
            return Outcome("failed", detail=f"render: {e}")
        except Exception as e:  # noqa: BLE001 - RecursionError, MemoryError, UnicodeError, ...
            return Outcome("failed", detail=f"render: {type(e).__name__}: {e}"[:1000])

    def _with_verp(self, row: dict, built: Built) -> Built:
        """The envelope sender that names the mail (bounce+id.tag@domain) for a
        sender profile with --verp; the From header stays as built."""
        domain = self.s.verp_domains.get(row.get("sender") or "default")
        if domain is None:
            return built
        return replace(built, envelope_from=self.s.verp.address(row["id"], domain))

    def _deliver(self, conn, job: Job) -> None:
        row = job.row
        t0 = time.perf_counter()
        built = self._build(job)
        if isinstance(built, Outcome):
            outcome = built
        else:
            try:
                outcome = conn.send(built.envelope_from, built.rcpt, built.data)
            except Exception as e:  # noqa: BLE001 - transports should not raise; be safe
                conn.close()
                outcome = Outcome("retry", detail=f"transport: {type(e).__name__}: {e}")
            self.transport.note(outcome)
        metrics.SEND_SECONDS.observe(time.perf_counter() - t0)
        self.record(job, outcome)

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
                  **({"database": job.batch.db.name} if self.several else {}))
        b, mid = job.batch, row["id"]
        b.db.completer.report(Report(mid, b.token, outcome.as_json(), payload_json=outcome.as_json_text(),
                                     on_written=lambda: self._recorded(b, [mid])))
        with self.lock:
            self.counts[outcome.outcome] += 1
            b.db.counts[outcome.outcome] += 1
            self._done_locked(job)

    def _hand_back(self, job: Job) -> None:
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

    # -- lease keeper ------------------------------------------------------------------
    def _lease_keeper(self) -> None:
        """Extends a batch's lease at half-time while any of its mail is unsent
        or unrecorded. It goes on while the completer cannot write: a sent
        mail whose outcome waits in memory must not be reclaimed and sent
        again meanwhile (a failing extension is retried, never fatal)."""
        backoff = Backoff()
        # Often enough that a short lease (the drills use 3 s) is extended well before it ends.
        interval = min(LEASE_CHECK_INTERVAL, self.s.lease / 10)
        while not self.stopping.wait(interval):
            if not self._extend_leases():
                self.stopping.wait(backoff.next())
            else:
                backoff.reset()

    def _extend_leases(self) -> bool:
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

    # -- shutdown --------------------------------------------------------------------
    def _shutdown(self) -> None:
        """--grace bounds all of it: sends until grace minus the write reserve,
        then outcomes and releases until the grace is up (each statement is
        bounded by statement_timeout)."""
        started = self.stop_requested_at or time.monotonic()
        deadline = started + self.s.grace
        stuck = self.sendpool.stop(deadline - self.s.write_reserve)
        if stuck:
            event(logging.WARNING, "runner.grace_exceeded", sends_abandoned=stuck,
                  note="their leases expire and reclaim recovers them")
        for db in self.databases:
            db.completer.stop(timeout=max(0.0, deadline - time.monotonic()))
        # Every database's outcomes at once: one that is down must not use up
        # the others' time.
        drained: dict[str, bool] = {}
        drainers = [threading.Thread(target=lambda db=db: drained.__setitem__(db.name, db.completer.drain(deadline)),
                                     name="drain", daemon=True) for db in self.databases]
        for t in drainers:
            t.start()
        for t in drainers:
            t.join(max(0.0, deadline + 1.0 - time.monotonic()))
        for db in self.databases:
            if not drained.get(db.name):
                event(logging.ERROR, "runner.unrecorded", count=db.completer.pending,
                      error=db.completer.last_error, note="outcomes not written; leases expire and reclaim decides",
                      **({"database": db.name} if self.several else {}))
                self.exit_code = self.exit_code or exitcodes.UNRECORDED
        for t in self._threads:
            t.join(max(0.0, min(1.0, deadline + 1.0 - time.monotonic())))
        # The last counts, then shown as stopped (skipped while the database is down).
        for db in self.databases:
            db.heartbeat.stop(db.pool, db.state.is_up)
        self.close()
        stats = self.stats()
        event(logging.INFO, "runner.stopped", **{k: v for k, v in sorted(stats.items())})


# Young-generation collections every 50,000 net allocations instead of 700:
# a runner allocates tens of objects per mail that reference counting frees;
# the few cycles (tracebacks, futures) wait a little longer to be collected.
GC_THRESHOLDS = (50_000, 20, 20)


def _quiet_garbage_collector() -> None:
    """Collections pause every thread, the event loop's sessions among them.
    With 700 as the young threshold, a runner at 1,024 connections ran a
    collection every few milliseconds, an older generation (25-55 ms) every
    second and the oldest (256 ms, every object of the process) every ten:
    each a stall for every session at once (bench/slow_relay.py --trace).
    Frozen, the modules, templates and connections of the start are never
    scanned again; the rest is scanned less often."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
