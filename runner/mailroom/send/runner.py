"""The runner: claim, render, send in parallel, report. No queue decisions.

`Runner` composes objects with one job each and decides when to claim and
when to wait:

- the claimer (`mailroom.send.claimer`, driven by `Runner`'s loop on the
  main thread): reclaim (at most once a second, once this runner's own
  outcomes are written) → claim_batch → get_templates
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
- the builder (`mailroom.send.build`): a row to the bytes on the wire.
- what is in flight (`mailroom.send.inflight`): each claim's lease and which
  of its mail is unsent or unrecorded; hands each outcome to the completer of
  the mail's database; its lease keeper thread extends leases at half-time.
- the completer (`mailroom.send.completer`): buffers outcomes and releases, writes
  them in batches, keeps them until the database has them.
- each database (`mailroom.send.database`): pool, completer, templates,
  wake-ups (a listener thread on LISTEN), heartbeat.
- the signal watcher (`mailroom.send.signals`, see below).

Faults: a lost database connection or SMTP server is logged once per state
change and retried with exponential backoff and jitter; outcomes stay in the
completer until they are written. No database transaction is open while a
mail is sent: every call in queries.py is one autocommit statement, and every
runner connection carries statement_timeout and lock_timeout (a quarter of
--grace, between 0.25 and 30 s) so that no statement can outlast the stop.

Signals: the first SIGTERM/SIGINT stops claiming; sends already started get until
--grace minus the time kept for the last writes (half the grace, at most
5 s); claims not yet started are released; outcomes and releases are written
until --grace is up. A second signal exits at once (the leases expire and
reclaim recovers the rows).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from mailroom import exitcodes, metrics
from mailroom.backoff import Backoff
from mailroom.logs import event
from mailroom.send.build import MailBuilder
from mailroom.send.claimer import Claimer
from mailroom.send.database import Database, FatalError
from mailroom.send.dkim import Signing
from mailroom.send.heartbeat import Vitals
from mailroom.send.inflight import InFlight, Job
from mailroom.send.sendpool import AsyncSendPool, ThreadSendPool
from mailroom.send.signals import SignalWatcher
from mailroom.send.transport import Outcome, Transport
from mailroom.send.unsubscribe import Unsubscribe

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
    without_unsubscribe: bool = False  # --no-unsubscribe-headers: broadcast mail may leave without them
    verp_domains: dict = field(default_factory=dict)  # sender -> bounce domain (--verp)
    verp: object = field(default=None, repr=False)  # verp.Verp with the signing keys, when verp_domains is set
    # Through a transaction-mode pooler (--pooled): see mailroom.send.database.
    pooled: bool = False
    listen_dsns: list[str] = field(default_factory=list, repr=False)  # direct sessions, one per --dsn
    # The event feed's webhooks (mailroom.send.webhooks): none without secrets.
    webhook_secrets: object = field(default=None, repr=False)  # signing.Keyring
    webhook_ca_file: str | None = None

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
        self.unsubscribe = settings.unsubscribe or Unsubscribe(None, {}, {}, {})
        self.needs_message = self.transport.needs_message
        self.builder = MailBuilder(needs_message=self.needs_message, unsubscribe=self.unsubscribe,
                                   signing=Signing(settings.dkim, self.databases[0].renderer.domain),
                                   verp=settings.verp, verp_domains=settings.verp_domains)
        self.stopping = threading.Event()  # stop claiming
        self.stop_requested_at: float | None = None
        self.wake = threading.Event()
        self.inflight = InFlight(2 * settings.concurrency, self.wake, name_databases=self.several)
        self.signal_watcher = SignalWatcher(self.request_stop)
        if self.transport.url.scheme in ("smtp", "smtps"):
            # Waiting on a relay: coroutines, one thread for all connections.
            self.sendpool = AsyncSendPool(self.transport, settings.concurrency, self._build,
                                          self.inflight.record, self.inflight.hand_back, self._should_hand_back)
            metrics.SESSIONS_IDLE.set_function(lambda: self.sendpool.idle)
            metrics.SENDS_WAITING.set_function(self.sendpool.waiting)
        else:
            # null:// and file:// do not wait on anything: plain threads.
            self.sendpool = ThreadSendPool(self.transport, settings.concurrency, self._deliver,
                                           self.inflight.hand_back, self._should_hand_back)
        self.claimer = Claimer(self.databases, settings, self.inflight, self.sendpool.submit_many,
                               needs_message=self.needs_message, unsubscribe=self.unsubscribe)
        self.exit_code = exitcodes.OK
        self._threads: list[threading.Thread] = []

    # -- counters (for a heartbeat or a summary line) -------------------------------
    def stats(self) -> dict:
        with self.inflight.lock:
            counts, in_flight = dict(self.inflight.counts), self.inflight.pending
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
            with self.inflight.lock:
                counts, in_flight = dict(db.counts), db.pending
            health = self.transport.health
            return Vitals(in_flight=in_flight, sent=counts.get("sent", 0), retried=counts.get("retry", 0),
                          failed=counts.get("failed", 0), ambiguous=counts.get("ambiguous", 0),
                          relay_up=health.is_up, relay_error=health.error)
        return vitals

    # -- signals -------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """Call from the main thread: SIGTERM/SIGINT ask to stop (mailroom.send.signals)."""
        self.signal_watcher.install()

    def request_stop(self, why: str = "requested") -> None:
        if not self.stopping.is_set():
            self.stop_requested_at = time.monotonic()
            event(logging.INFO, "runner.stopping", reason=why, in_flight=self.inflight.pending, grace=self.s.grace)
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
        self.claimer.merge_streams()
        metrics.UP.labels("db").set(1)
        metrics.UP.labels("transport").set(1)

    def close(self) -> None:
        for db in self.databases:
            db.close()

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
            self._refuse_or_warn_without_unsubscribe()
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
        targets = [(self.inflight.keep_leases, (self.stopping, self.s.lease), "leases")]
        for db in self.databases:
            if db.listen_dsn is not None:  # through a pooler without --listen-dsn: polling only
                targets.append((db.listen, (self.stopping, self.wake, self.s.sender), "listener"))
        for target, args, name in targets:
            t = threading.Thread(target=target, args=args, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        if self.s.webhook_secrets is not None:
            from mailroom.send.webhooks import WebhookDeliverer

            for db in self.databases:  # threads and a connection of their own: never in the mail's way
                deliverer = WebhookDeliverer(db.dsn, self.s.webhook_secrets, self.s.worker, self.stopping,
                                             ca_file=self.s.webhook_ca_file, label=db.name)
                deliverer.start()
                self._threads.append(deliverer.thread)

    # -- the main loop: when to claim, when to wait ----------------------------------------
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
            if not self.inflight.has_room():
                self.wake.wait(1.0)
                self.wake.clear()
                continue
            self.wake.clear()
            claimed, full, short = self.claimer.round()
            if full:
                continue  # more is waiting: claim again as soon as there is room
            if not short:
                # Every database is waiting out a failure or its unwritten
                # outcomes: come back when the first may be tried again.
                self.stopping.wait(self.claimer.until_a_database_is_due())
                continue
            throttled = self.claimer.send_rate_wait(short)
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
            self.wake.wait(min(self.s.poll_interval, self.claimer.until_a_database_is_due(self.s.poll_interval)))

    def _idle(self) -> bool:
        return self.inflight.is_empty() and all(db.completer.pending == 0 for db in self.databases)

    def _refuse_or_warn_without_unsubscribe(self) -> None:
        """At start, without --unsubscribe-url: a stream whose mail should
        carry unsubscribe headers (RFC 8058; Gmail and Yahoo require them for
        bulk mail) would be sent without. Refuse to start (a configuration
        error, exit 2) unless the operator said so with
        --no-unsubscribe-headers; then warn once."""
        wanting = sorted(name for name, headers in self.unsubscribe.streams.items() if headers)
        if not wanting:
            return
        if not self.s.without_unsubscribe:
            self.close()
            raise FatalError(
                f"stream {', '.join(wanting)} wants unsubscribe headers and no --unsubscribe-url is given "
                "(MAILROOM_UNSUBSCRIBE_URL, with signing keys): its mail would go out without List-Unsubscribe. "
                "Give the URL, or --no-unsubscribe-headers (MAILROOM_NO_UNSUBSCRIBE_HEADERS=1) to send it "
                "without them, or mailroom.define_stream(name, false, ...) if the stream is not bulk mail",
                exitcodes.USAGE)
        event(logging.WARNING, "unsubscribe.not_configured", streams=",".join(wanting),
              hint="--no-unsubscribe-headers: their mail goes out without List-Unsubscribe headers; give "
                   "--unsubscribe-url (MAILROOM_UNSUBSCRIBE_URL) and signing keys; --unsubscribe-mailto alone "
                   "adds none")

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

    def _build(self, job: Job):
        return self.builder.build(job.row, job.batch.db.renderer)

    def _deliver(self, conn, job: Job) -> None:
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
        self.inflight.record(job, outcome)

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
