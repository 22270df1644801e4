"""The runner: claim, render, send in parallel, report. No queue decisions.

Three objects with one job each:

- the claimer (`Runner`, the main thread): reclaim (at most once a second,
  once this runner's own outcomes are written) → claim_batch → get_templates
  → submit the rows to the send pool; claims again while full batches come
  back and the pool has room; when a claim comes back short, says it waits
  for work (`Waiting`: enqueue notifies only then), claims once more and
  waits for a NOTIFY (or the poll interval, or free room). It claims and
  reclaims nothing while the completer cannot write.
- the send pool (`mailroom.sendpool`): the SMTP connections; builds each mail
  (over SMTP ahead of need, up to one per session, while the relay holds the
  sessions) and sends it. One bad mail (a template that cannot compile, a recursion, an
  encoding error, variables nested too deep for Python's json: the claim
  leaves them as text, see queries.claim_batch) fails that mail with the
  error recorded, never the runner.
- the completer (`mailroom.completer`): buffers outcomes and releases, writes
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

import psycopg
import psycopg_pool
from psycopg.rows import dict_row

from mailroom import exitcodes, logs, metrics, queries
from mailroom.backoff import Backoff
from mailroom.completer import Completer, Report
from mailroom.dkim import Signing
from mailroom.unsubscribe import Unsubscribe
from mailroom.heartbeat import Heartbeat, Vitals
from mailroom.logs import event
from mailroom.render import Built, RenderError, Renderer, read_json_columns
from mailroom.sendpool import AsyncSendPool, ThreadSendPool
from mailroom.transport import Outcome, Transport

_log = logging.getLogger(logs.LOGGER_NAME)

RECLAIM_INTERVAL = 1.0
LEASE_CHECK_INTERVAL = 1.0
# The wake-up handshake's advisory locks are never worth waiting for: a
# stray holder must not stall the runner (it polls instead).
WAITING_LOCK_TIMEOUT_MS = 200

__all__ = ["Backoff", "FatalError", "Runner", "Settings", "default_worker_name"]


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Settings:
    dsn: str = field(repr=False)  # may hold a password
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

    @property
    def db_timeout(self) -> float:
        """statement_timeout and lock_timeout of every runner connection:
        below the grace, so a blocked statement cannot outlast the stop."""
        return min(30.0, max(0.25, self.grace / 4))

    @property
    def write_reserve(self) -> float:
        """Seconds of the grace kept for the last outcome and release writes."""
        return min(self.grace / 2, 5.0)


class FatalError(Exception):
    """The runner cannot start (or go on); `exit_code` is one of mailroom.exitcodes."""

    def __init__(self, message: str, exit_code: int = exitcodes.REFUSED):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Batch:
    """One claim's lease: which of its mail is still being sent, and which
    has no outcome in the database yet (both keep the lease extended)."""

    token: str  # the lease token's text (queries.claim_batch)
    lease: float
    unfinished: set
    unrecorded: set
    extended_at: float = field(default_factory=time.monotonic)


@dataclass
class Job:
    row: dict
    batch: Batch


class Waiting:
    """The runner's side of enqueue's wake-up protocol (deploy/runner_waiting.sql,
    deploy/enqueue.sql). enqueue notifies only while some runner is waiting
    (a row in mailroom.runner_waits for its backend); this runner waits, on a
    connection of its own, from the first claim that comes back short until a
    claim comes back full. Before it
    sleeps until notified it claims once more after enqueues_settled: every
    enqueue that saw nobody waiting has committed by then, so that claim finds
    its mail and no wake-up is lost."""

    def __init__(self, connect):
        self._connect = connect
        self.conn: psycopg.Connection | None = None
        self.held = False
        self.settled = False

    def prepare(self) -> str:
        """'claim': the barrier just passed, claim once more; 'retry': an
        enqueue that may not have woken us is in flight, try again shortly;
        'sleep': sleep until notified."""
        if self.settled:
            return "sleep"
        if not self.held:
            if self.conn is None or self.conn.closed:
                self.conn = self._connect()
            queries.runner_waiting(self.conn, True)
            self.held = True
        self.settled = queries.enqueues_settled(self.conn)
        return "claim" if self.settled else "retry"

    def end(self) -> None:
        """Busy again: enqueues need not wake us."""
        if self.held:
            self.held = self.settled = False
            queries.runner_waiting(self.conn, False)

    def reset(self) -> None:
        """The connection failed: start over (its row goes at the next
        runner_waiting call of any runner once the backend has exited)."""
        self.held = self.settled = False
        self.close()

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None


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
        self.transport = transport or Transport(settings.smtp, local_hostname=None)
        self.renderer = Renderer(settings.from_address, settings.message_id_domain)
        self.signing = Signing(settings.dkim, self.renderer.domain)
        self.unsubscribe = settings.unsubscribe or Unsubscribe(None, {}, {}, {})
        self.streams_read_at = 0.0  # monotonic; which streams carry headers is read again every minute
        self.needs_message = self.transport.needs_message
        self.on_flush, self.on_flush_every = on_flush, on_flush_every
        self.pool: psycopg_pool.ConnectionPool | None = None
        self.completer: Completer | None = None
        self.lock = threading.Lock()  # batches, pending, counts
        self.batches: dict[str, Batch] = {}  # by lease token
        self.pending = 0  # claimed and not yet sent or handed back
        metrics.IN_FLIGHT.set_function(lambda: self.pending)  # read when scraped, not set on every mail
        self.low_water = 2 * settings.concurrency
        self.stopping = threading.Event()  # stop claiming
        self.stop_requested_at: float | None = None
        self.wake = threading.Event()
        self.db_state = logs.StateLog("db")
        self.listen_state = logs.StateLog("listen")
        self.waiting = Waiting(self._connect_waiting)
        if self.transport.url.scheme in ("smtp", "smtps"):
            # Waiting on a relay: coroutines, one thread for all connections.
            self.sendpool = AsyncSendPool(self.transport, settings.concurrency, lambda job: self._build(job.row),
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
        # The runner's row in mailroom.runners and its runner.summary line,
        # written on the completer's flushes (see _on_flush).
        self.heartbeat = Heartbeat(settings.worker, self._vitals, sender=settings.sender,
                                   concurrency=settings.concurrency, interval=settings.heartbeat_interval,
                                   summary_every=settings.summary_interval)

    # -- counters (for a heartbeat or a summary line) -------------------------------
    def stats(self) -> dict:
        with self.lock:
            counts, in_flight = dict(self.counts), self.pending
        written = dict(self.completer.written) if self.completer else {}
        unwritten = self.completer.pending if self.completer else 0
        return {**counts, "in_flight": in_flight, "unwritten": unwritten,
                "released": written.get("released", 0), "dropped": written.get("dropped", 0)}

    def _vitals(self) -> Vitals:
        """What the heartbeat row and the summary line report: counts since
        start, mail in flight, and the relay's state (transport.health, which
        the send pools and the probe keep)."""
        st, health = self.stats(), self.transport.health
        return Vitals(in_flight=st["in_flight"], sent=st.get("sent", 0), retried=st.get("retry", 0),
                      failed=st.get("failed", 0), ambiguous=st.get("ambiguous", 0),
                      relay_up=health.is_up, relay_error=health.error)

    def _on_flush(self, conn) -> None:
        """The completer's hook, on the connection of a flush that wrote
        something (and, while nothing is written, every heartbeat interval):
        the heartbeat row and the summary line when due, then the caller's
        own on_flush."""
        self.heartbeat.after_flush(conn)
        if self.on_flush is not None:
            self.on_flush(conn)

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
    def _conn_kwargs(self, lock_timeout_ms: int | None = None) -> dict:
        timeout_ms = int(self.s.db_timeout * 1000)
        # READ COMMITTED whatever the database's default: claim_batch, mark_outcomes,
        # release, extend_lease and reclaim refuse anything else (0A000).
        options = (f"{self._dsn_options} -c statement_timeout={timeout_ms}"
                   f" -c lock_timeout={lock_timeout_ms or timeout_ms}"
                   r" -c default_transaction_isolation=read\ committed").strip()
        return {"autocommit": True, "row_factory": dict_row, "options": options,
                "application_name": f"mailroom-run {self.s.worker}"[:63]}

    def _connect(self, **kw) -> psycopg.Connection:
        return psycopg.connect(self.s.dsn, connect_timeout=10, **self._conn_kwargs(**kw))

    def _connect_waiting(self) -> psycopg.Connection:
        return self._connect(lock_timeout_ms=min(WAITING_LOCK_TIMEOUT_MS, int(self.s.db_timeout * 1000)))

    def open(self) -> None:
        try:
            info = psycopg.conninfo.conninfo_to_dict(self.s.dsn)
        except psycopg.ProgrammingError as e:
            raise FatalError(f"--dsn: cannot parse: {e}", exitcodes.USAGE) from None
        self._dsn_options = str(info.get("options") or "")
        logs.register_secret(info.get("password"))
        try:  # a direct first connection gives a clear error for bad configuration
            self._connect().close()
        except psycopg.Error as e:
            raise FatalError(f"cannot connect to the database: {' '.join(str(e).split())}",
                             exitcodes.UNREACHABLE) from None
        self.pool = psycopg_pool.ConnectionPool(
            self.s.dsn,
            min_size=1,
            max_size=4,
            kwargs=self._conn_kwargs(),
            open=False,
            check=_check_if_idle,
            name="mailroom-run",
            reconnect_timeout=24 * 3600,
        )
        try:
            self.pool.open(wait=True, timeout=15)
        except psycopg_pool.PoolTimeout as e:
            self.pool.close(timeout=1)
            raise FatalError(f"cannot connect to the database: {e}", exitcodes.UNREACHABLE) from None
        try:
            missing = queries.missing_runner_functions(self.pool)
        except (queries.DatabaseUnavailable, queries.QueryError) as e:
            self.pool.close(timeout=1)
            raise FatalError(f"cannot check the runner's privileges: {e}", exitcodes.UNREACHABLE) from None
        if missing:
            self.pool.close(timeout=1)
            raise FatalError(
                "the role cannot execute mailroom." + ", mailroom.".join(missing)
                + " (SQLSTATE 42501: grant it mailroom_runner, or deploy the schema)", exitcodes.REFUSED)
        # Read even without --unsubscribe-url: run() warns when a stream wants the headers.
        self._read_streams()
        every = self.s.heartbeat_interval
        if self.on_flush_every is not None:
            every = min(every, self.on_flush_every)
        self.completer = Completer(self.pool, on_flush=self._on_flush, on_flush_every=every, state=self.db_state)
        metrics.UP.labels("db").set(1)
        metrics.UP.labels("transport").set(1)

    def close(self) -> None:
        self.waiting.close()
        if self.pool is not None:
            self.pool.close(timeout=1)
            self.pool = None

    # -- the whole life --------------------------------------------------------------
    def run(self) -> int:
        self.open()
        event(
            logging.INFO, "runner.start", worker=self.s.worker, transport=self.transport.url.redacted(),
            concurrency=self.s.concurrency, batch=self.s.batch, lease=self.s.lease,
            sender=self.s.sender or "*", poll_interval=self.s.poll_interval,
            db_timeout=self.s.db_timeout,
        )
        if not self.unsubscribe.enabled:
            self._warn_if_unsubscribe_is_due()
        self.heartbeat.after_flush(self.pool)  # the first heartbeat: running from the start
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

        want = self.s.concurrency + 128
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < want:
            new = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            if new < want:
                event(logging.WARNING, "runner.open_files_limit", limit=new, wanted=want,
                      note="raise the hard limit (ulimit -Hn, LimitNOFILE=) for this --concurrency")

    def _start_threads(self) -> None:
        self._raise_open_files_limit()
        self.completer.start()
        self.sendpool.start()
        for target, name in ((self._lease_keeper, "leases"), (self._listener, "listener")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    # -- the claimer -------------------------------------------------------------------
    def _main_loop(self) -> None:
        db_backoff, smtp_backoff = Backoff(), Backoff(base=0.5, cap=30.0)
        # An enqueue in flight that may not wake us is a matter of milliseconds,
        # unless an application holds its transaction open.
        settle_backoff = Backoff(base=0.005, cap=0.2)
        last_reclaim = 0.0
        while not self.stopping.is_set():
            if not self.transport.health.is_up:
                if self.s.exit_when_idle and self._idle():
                    event(logging.INFO, "runner.idle_exit", reason="transport down")
                    break
                self._probe_transport(smtp_backoff)
                continue
            if not self.completer.writable:
                # Claiming more, or reclaiming, on top of outcomes the database
                # does not have could send them again: wait until it takes them.
                self.stopping.wait(0.2)
                continue
            with self.lock:
                room = self.pending <= self.low_water
            if not room:
                self.wake.wait(1.0)
                self.wake.clear()
                continue
            self.wake.clear()
            try:
                if time.monotonic() - last_reclaim >= RECLAIM_INTERVAL:
                    # Our own outcomes first (waiting for a flush in progress):
                    # reclaim must never re-queue mail this runner has sent but
                    # not yet recorded.
                    if not self.completer.flush():
                        continue
                    n = queries.reclaim(self.pool)
                    last_reclaim = time.monotonic()
                    if n:
                        event(logging.INFO, "runner.reclaimed", count=n)
                got = self._claim()
                self._db_ok(db_backoff)
            except (queries.DatabaseUnavailable, queries.QueryError) as e:
                # Any refusal, not only a lost connection: a revoked grant or a
                # read-only database may be fixed while the runner waits.
                self._db_down(e, db_backoff)
                continue
            if got == self.s.batch:
                self._busy()
                continue  # more is waiting: claim again as soon as there is room
            throttled = self._send_rate_wait()
            if throttled:
                # A send rate, not an empty queue, cut the claim short: come
                # back when the budget frees rather than after a full poll.
                self.wake.wait(min(throttled, self.s.poll_interval))
                continue
            if self.s.exit_when_idle and got == 0:
                if self._idle():
                    event(logging.INFO, "runner.idle_exit")
                    break
                self.wake.wait(0.2)
                continue
            step = self._prepare_to_sleep()
            if step == "claim":
                continue
            if step == "retry":
                self.wake.wait(settle_backoff.next())
                continue
            settle_backoff.reset()
            self.wake.wait(self.s.poll_interval)

    def _busy(self) -> None:
        try:
            self.waiting.end()
        except (queries.DatabaseUnavailable, queries.QueryError) as e:
            event(logging.DEBUG, "runner.waiting_lost", error=queries.first_line(e))
            self.waiting.reset()

    def _prepare_to_sleep(self) -> str:
        """See Waiting. Without its connection the runner cannot be sure to be
        woken: it polls at most every 0.5 s until the connection is back."""
        try:
            return self.waiting.prepare()
        except (queries.DatabaseUnavailable, queries.QueryError, psycopg.Error) as e:
            event(logging.DEBUG, "runner.waiting_lost", error=queries.first_line(e))
            self.waiting.reset()
            self.wake.wait(min(0.5, self.s.poll_interval))
            return "claim"

    def _send_rate_wait(self) -> float | None:
        try:
            wait = queries.send_rate_retry_after(self.pool, self.s.sender)
        except (queries.DatabaseUnavailable, queries.QueryError):
            return None  # the next claim finds out whether the database is back
        return wait if wait and wait > 0 else None

    def _idle(self) -> bool:
        with self.lock:
            busy = self.pending
        return busy == 0 and self.completer.pending == 0

    def _read_streams(self) -> None:
        """Which streams carry unsubscribe headers (mailroom.streams); the
        last answer serves while the database does not give one."""
        try:
            self.unsubscribe.streams = queries.stream_settings(self.pool)
        except (queries.DatabaseUnavailable, queries.QueryError) as e:
            event(logging.WARNING, "streams.unavailable", error=str(e))
        self.streams_read_at = time.monotonic()

    def _warn_if_unsubscribe_is_due(self) -> None:
        """At start, without --unsubscribe-url: say so when a stream's mail
        should carry unsubscribe headers (RFC 8058; bulk senders must offer
        them), since this runner will send it without."""
        wanting = sorted(name for name, headers in self.unsubscribe.streams.items() if headers)
        if wanting:
            event(logging.WARNING, "unsubscribe.not_configured", streams=",".join(wanting),
                  hint="their mail goes out without List-Unsubscribe headers: give --unsubscribe-url "
                       "(MAILROOM_UNSUBSCRIBE_URL) and signing keys; --unsubscribe-mailto alone adds none")

    def _claim(self) -> int:
        if self.unsubscribe.enabled and time.monotonic() - self.streams_read_at > 60:
            self._read_streams()
        t0 = time.perf_counter()
        rows = queries.claim_batch(self.pool, self.s.worker, self.s.batch, self.s.lease, self.s.sender)
        claim_s = time.perf_counter() - t0
        metrics.CLAIM_SECONDS.observe(claim_s)
        event(logging.DEBUG, "batch.claimed", count=len(rows), ms=round(claim_s * 1000, 1))
        if not rows:
            return 0
        # Templates only when mail is built (plain null:// builds nothing).
        keys = sorted({r["template_key"] for r in rows if r.get("template_key")}) if self.needs_message else []
        unloaded: set[str] = set()
        if keys:
            try:
                self.renderer.load(queries.get_templates(self.pool, keys))
            except (queries.DatabaseUnavailable, queries.QueryError) as e:
                # Cached versions serve; mail whose template was never loaded
                # goes back to the queue rather than failing for a DB hiccup.
                unloaded = {k for k in keys if self.renderer.cached_version(k) is None}
                event(logging.WARNING, "templates.unavailable", error=str(e), handed_back=sorted(unloaded))
        by_token: dict[object, list[dict]] = defaultdict(list)
        for r in rows:
            by_token[r["lease_token"]].append(r)
        for token, trs in by_token.items():
            ids = {r["id"] for r in trs}
            b = Batch(token, self.s.lease, set(ids), set(ids))
            with self.lock:
                self.batches[token] = b
                self.pending += len(trs)
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

    def _db_down(self, e: Exception, backoff: Backoff) -> None:
        self.db_state.down(e, pending_outcomes=self.completer.pending)
        metrics.UP.labels("db").set(0)
        self.stopping.wait(backoff.next())

    def _db_ok(self, backoff: Backoff) -> None:
        if self.db_state.up():
            metrics.UP.labels("db").set(1)
        backoff.reset()

    # -- what the send pool calls ---------------------------------------------------------
    def _should_hand_back(self) -> bool:
        return self.stopping.is_set() or not self.transport.health.is_up

    def _build(self, row: dict) -> Built | Outcome:
        """The mail, or the outcome that fails it: whatever one row's template,
        variables or headers raise stays with that row."""
        try:
            if self.needs_message:
                read_json_columns(row)  # left as text by the claim; each job is built once
                url = self.unsubscribe.url_for(row)
                if url is not None:
                    row["unsubscribe_url"] = url  # {{ unsubscribe_url }} in its templates
                built = self.unsubscribe.apply(row, self.renderer.build(row), url)
                built = self.signing.apply(row, built)  # Feedback-ID, DKIM: the final bytes
            else:  # plain null://: measures the queue machinery, not rendering
                built = Built(self.renderer.envelope_from, row["to_address"], b"", "")
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
        built = self._build(row)
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
        """One mail's outcome: counted, logged, handed to the completer."""
        row = job.row
        key = (row.get("sender") or "default", outcome.outcome)
        counter = self._mail_counters.get(key)
        if counter is None:
            counter = self._mail_counters[key] = metrics.MAILS.labels(*key)
        counter.inc()
        level = logging.DEBUG if outcome.outcome in ("sent", "retry") else logging.INFO
        if _log.isEnabledFor(level):  # sent mail is logged at debug: spare the call at info
            event(level, f"mail.{outcome.outcome}", id=row["id"], attempt=row.get("attempt"),
                  code=outcome.smtp_code, enhanced=outcome.smtp_enhanced, detail=outcome.detail)
        b, mid = job.batch, row["id"]
        self.completer.report(Report(mid, b.token, outcome.as_json(), payload_json=outcome.as_json_text(),
                                     on_written=lambda: self._recorded(b, [mid])))
        with self.lock:
            self.counts[outcome.outcome] += 1
            self._done_locked(job)

    def _hand_back(self, job: Job) -> None:
        b = job.batch
        self.completer.release(b.token, [job.row["id"]], on_written=lambda ids: self._recorded(b, ids))
        with self.lock:
            self.counts["handed_back"] += 1
            self._done_locked(job)

    def _done_locked(self, job: Job) -> None:
        b = job.batch
        b.unfinished.discard(job.row["id"])
        self.pending -= 1
        if not b.unfinished:
            self.completer.flush_soon()
        if self.pending == self.low_water or self.pending == 0:
            self.wake.set()

    def _recorded(self, b: Batch, ids: list[int]) -> None:
        """The database has these ids' outcome or release (completer thread)."""
        with self.lock:
            b.unrecorded.difference_update(ids)
            if not b.unrecorded and not b.unfinished:
                self.batches.pop(b.token, None)

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
        now = time.monotonic()
        with self.lock:
            due = [(b, sorted(b.unrecorded)) for b in self.batches.values()
                   if b.unrecorded and now - b.extended_at >= b.lease / 2]
        for b, ids in due:
            try:
                n = queries.extend_lease(self.pool, ids, b.token, b.lease)
            except (queries.DatabaseUnavailable, queries.QueryError) as e:
                self.db_state.down(e)
                return False
            b.extended_at = now
            event(logging.DEBUG, "lease.extended", token=b.token, requested=len(ids), extended=n)
        return True

    # -- listener --------------------------------------------------------------------
    def _listener(self) -> None:
        backoff = Backoff()
        while not self.stopping.is_set():
            conn = None
            try:
                conn = self._connect()
                queries.listen(conn)
                self.listen_state.up()
                backoff.reset()
                self.wake.set()  # notifications may have been missed while away
                while not self.stopping.is_set():
                    for n in conn.notifies(timeout=0.5):
                        if self.s.sender is None or n.payload in (self.s.sender, "released", ""):
                            self.wake.set()
            except (psycopg.Error, queries.DatabaseUnavailable, queries.QueryError) as e:
                if not self.stopping.is_set():
                    self.listen_state.down(queries.first_line(e))
                    self.stopping.wait(backoff.next())
            finally:
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass

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
        self.completer.stop(timeout=max(0.0, deadline - time.monotonic()))
        if not self.completer.drain(deadline):
            event(logging.ERROR, "runner.unrecorded", count=self.completer.pending,
                  error=self.completer.last_error,
                  note="outcomes not written; leases expire and reclaim decides")
            self.exit_code = self.exit_code or exitcodes.UNRECORDED
        for t in self._threads:
            t.join(max(0.0, min(1.0, deadline + 1.0 - time.monotonic())))
        # The last counts, then shown as stopped (skipped while the database is down).
        self.heartbeat.stop(self.pool, self.db_state.is_up)
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


IDLE_CHECK_AFTER = 2.0  # seconds a pooled connection may sit unused before it is checked


def _check_if_idle(conn: psycopg.Connection) -> None:
    """The pool's check: a round trip only for a connection unused for a
    while (the server may have gone away meanwhile). One that is in steady use
    is handed out as is; if it broke since, the call fails as DatabaseUnavailable
    and is retried, and the pool discards the broken connection. Under load
    this saves a round trip on every claim, template fetch and outcome write."""
    now = time.monotonic()
    if now - getattr(conn, "_mailroom_used_at", 0.0) > IDLE_CHECK_AFTER:
        psycopg_pool.ConnectionPool.check_connection(conn)
    conn._mailroom_used_at = now
