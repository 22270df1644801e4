"""The runner loop: claim, render, send in parallel, report. No queue decisions.

Threads of one runner process:

- main: reclaim (at most once a second, after writing this runner's pending
  outcomes) → claim_batch → get_templates → hand the rows to the workers;
  claims again while full batches come back and the workers have room; when
  a claim comes back short, says it waits for work (Waiting: enqueue notifies
  only then), claims once more and waits for a NOTIFY (or the poll interval,
  or free capacity);
- N workers: each keeps one transport connection open, builds the mail and
  sends it, and puts the outcome in an in-memory buffer;
- housekeeper: writes the buffer with one mark_outcomes call every 100 ms (and
  at once when a batch completes), hands back unsent claims with release, and
  extends a batch's lease when half of it has passed;
- listener: LISTEN on its own autocommit connection; sets the wake-up event.

Faults: a lost database connection or SMTP server is logged once per state
change and retried with exponential backoff and jitter; outcomes stay in the
buffer until they are written. No database transaction is open while a worker
talks SMTP: every call in queries.py is one autocommit statement.

Shutdown: the first SIGTERM/SIGINT stops claiming; mails already being sent
finish within --grace and their outcomes are written; claims not yet started
are released. A second signal exits at once (the leases expire and reclaim
recovers the rows).
"""

from __future__ import annotations

import logging
import os
import queue
import random
import signal
import socket
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import psycopg
import psycopg_pool
from psycopg.rows import dict_row

from mailroom import logs, metrics, queries
from mailroom.logs import event
from mailroom.dkim import Signing
from mailroom.render import Built, RenderError, Renderer
from mailroom.transport import Outcome, Transport

FLUSH_INTERVAL = 0.1
RECLAIM_INTERVAL = 1.0
MAX_OUTCOMES_PER_CALL = 1000  # keeps each mark_outcomes transaction short


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
    dkim: dict = field(default_factory=dict, repr=False)  # sender -> dkim.Signer, loaded by load_profiles


class Backoff:
    """Exponential backoff with jitter: base, 2*base, ... up to cap, each drawn
    uniformly from its upper half so many runners do not retry in step."""

    def __init__(self, base: float = 0.2, cap: float = 10.0):
        self.base, self.cap, self.n = base, cap, 0

    def next(self) -> float:
        d = min(self.cap, self.base * (2 ** self.n))
        self.n = min(self.n + 1, 30)
        return random.uniform(d / 2, d)

    def reset(self) -> None:
        self.n = 0


class FatalError(Exception):
    """A configuration problem the runner cannot recover from (exit code 3)."""


@dataclass
class Batch:
    token: object
    lease: float
    ids: set
    unfinished: set  # not yet sent (or being sent)
    unrecorded: set  # outcome not yet written to the database
    extended_at: float = field(default_factory=time.monotonic)


@dataclass
class Job:
    row: dict
    batch: Batch


class Waiting:
    """The runner's side of enqueue's wake-up protocol (deploy/runner_waiting.sql,
    deploy/enqueue.sql). enqueue notifies only while some runner holds the
    waiting lock; this runner holds it, on a connection of its own, from the
    first claim that comes back short until a claim comes back full. Before it
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
        """The connection failed: start over (its hold ended with it)."""
        self.held = self.settled = False
        self.close()

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None


class Runner:
    def __init__(self, settings: Settings, transport: Transport | None = None):
        self.s = settings
        if settings.concurrency < 1 or settings.batch < 1:
            raise ValueError("--concurrency and --batch must be >= 1")
        if settings.lease < 2:
            raise ValueError("--lease must be at least 2 seconds")
        self.transport = transport or Transport(settings.smtp, local_hostname=None)
        self.renderer = Renderer(settings.from_address, settings.message_id_domain)
        self.signing = Signing(settings.dkim, self.renderer.domain)
        self.needs_message = self.transport.needs_message
        self.pool: psycopg_pool.ConnectionPool | None = None
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.lock = threading.Lock()
        self.flush_lock = threading.Lock()
        self.batches: dict[object, Batch] = {}
        self.outcomes: list[tuple[Job, Outcome]] = []
        self.unsent: dict[object, list[int]] = defaultdict(list)
        self.pending = 0  # claimed and not yet sent or handed back
        self.low_water = 2 * settings.concurrency
        self.stopping = threading.Event()  # stop claiming
        self.wake = threading.Event()
        self.flush_now = threading.Event()
        self.housekeeper_stop = threading.Event()
        self.db_state = logs.StateLog("db")
        self.listen_state = logs.StateLog("listen")
        self.waiting = Waiting(lambda: psycopg.connect(self.s.dsn, connect_timeout=10, **self._conn_kwargs()))
        self.exit_code = 0
        self.signals = 0
        self.totals = defaultdict(int)
        self._threads: list[threading.Thread] = []

    # -- signals -------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        self.signals += 1
        if self.signals > 1:
            # Leases expire and reclaim recovers whatever was claimed.
            os.write(2, b"mailroom: second signal, exiting at once\n")
            os._exit(128 + signum)
        self.request_stop(signal.Signals(signum).name)

    def request_stop(self, why: str = "requested") -> None:
        if not self.stopping.is_set():
            event(logging.INFO, "runner.stopping", reason=why, in_flight=self.pending)
        self.stopping.set()
        self.wake.set()

    # -- set-up ----------------------------------------------------------------------
    def _conn_kwargs(self) -> dict:
        return {"autocommit": True, "row_factory": dict_row, "application_name": f"mailroom-run {self.s.worker}"[:63]}

    def open(self) -> None:
        try:
            info = psycopg.conninfo.conninfo_to_dict(self.s.dsn)
        except psycopg.ProgrammingError as e:
            raise FatalError(f"--dsn: cannot parse: {e}") from None
        logs.register_secret(info.get("password"))
        try:  # a direct first connection gives a clear error for bad configuration
            psycopg.connect(self.s.dsn, connect_timeout=10, **self._conn_kwargs()).close()
        except psycopg.Error as e:
            raise FatalError(f"cannot connect to the database: {' '.join(str(e).split())}") from None
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
            raise FatalError(f"cannot connect to the database: {e}") from None
        metrics.UP.labels("db").set(1)
        metrics.UP.labels("transport").set(1)

    def close(self) -> None:
        self.waiting.close()
        if self.pool is not None:
            self.pool.close(timeout=2)
            self.pool = None

    # -- the whole life --------------------------------------------------------------
    def run(self) -> int:
        self.open()
        event(
            logging.INFO, "runner.start", worker=self.s.worker, transport=self.transport.url.redacted(),
            concurrency=self.s.concurrency, batch=self.s.batch, lease=self.s.lease,
            sender=self.s.sender or "*", poll_interval=self.s.poll_interval,
        )
        self._start_threads()
        try:
            self._main_loop()
        except FatalError as e:
            event(logging.ERROR, "runner.fatal", error=str(e))
            self.exit_code = 3
            self.request_stop("fatal error")
        finally:
            self.stopping.set()
            self._shutdown()
        return self.exit_code

    def _start_threads(self) -> None:
        for i in range(self.s.concurrency):
            t = threading.Thread(target=self._worker, name=f"worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        self._housekeeper_thread = threading.Thread(target=self._housekeeper, name="housekeeper", daemon=True)
        self._housekeeper_thread.start()
        self._listener_thread = threading.Thread(target=self._listener, name="listener", daemon=True)
        self._listener_thread.start()

    # -- main loop -------------------------------------------------------------------
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
                    if not self._flush():
                        raise queries.DatabaseUnavailable("outcomes not yet written")
                    n = queries.reclaim(self.pool)
                    last_reclaim = time.monotonic()
                    if n:
                        event(logging.INFO, "runner.reclaimed", count=n)
                got = self._claim()
                self._db_ok(db_backoff)
            except queries.DatabaseUnavailable as e:
                self._db_down(e, db_backoff, self.stopping)
                continue
            except queries.QueryError as e:
                if _transient(e.sqlstate):
                    self._db_down(e, db_backoff, self.stopping)
                    continue
                raise FatalError(f"claim: {e}") from None
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
            return self.pending == 0 and not self.outcomes and not any(self.unsent.values())

    def _claim(self) -> int:
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
            b = Batch(token, self.s.lease, ids, set(ids), set(ids))
            with self.lock:
                self.batches[token] = b
                self.pending += len(trs)
                metrics.IN_FLIGHT.set(self.pending)
            for sender, count in Counter(r.get("sender") or "default" for r in trs).items():
                metrics.CLAIMED.labels(sender).inc(count)
            for r in trs:
                if r.get("template_key") in unloaded:
                    self._hand_back(Job(r, b))
                else:
                    self.jobs.put(Job(r, b))
        self.totals["claimed"] += len(rows)
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

    def _db_down(self, e: Exception, backoff: Backoff, stop: threading.Event) -> None:
        with self.lock:
            buffered = len(self.outcomes)
        self.db_state.down(e, pending_outcomes=buffered)
        metrics.UP.labels("db").set(0)
        stop.wait(backoff.next())

    def _db_ok(self, backoff: Backoff) -> None:
        if self.db_state.up():
            metrics.UP.labels("db").set(1)
        backoff.reset()

    # -- workers ---------------------------------------------------------------------
    def _worker(self) -> None:
        conn = self.transport.connection()
        try:
            while True:
                job = self.jobs.get()
                if job is None:
                    return
                if self.stopping.is_set() or not self.transport.health.is_up:
                    self._hand_back(job)
                    continue
                self._send(conn, job)
        finally:
            conn.close()

    def _send(self, conn, job: Job) -> None:
        row = job.row
        t0 = time.perf_counter()
        try:
            if self.needs_message:
                built = self.signing.apply(row, self.renderer.build(row))  # Feedback-ID, DKIM: the final bytes
            else:  # plain null://: measures the queue machinery, not rendering
                built = Built(self.renderer.envelope_from, row["to_address"], b"", "")
        except RenderError as e:
            outcome = Outcome("failed", detail=f"render: {e}")
        except Exception as e:  # noqa: BLE001 - one bad row never stops the runner
            outcome = Outcome("failed", detail=f"render: {type(e).__name__}: {e}")
        else:
            try:
                outcome = conn.send(built.envelope_from, built.rcpt, built.data)
            except Exception as e:  # noqa: BLE001 - transports should not raise; be safe
                conn.close()
                outcome = Outcome("retry", detail=f"transport: {type(e).__name__}: {e}")
            self.transport.note(outcome)
        metrics.SEND_SECONDS.observe(time.perf_counter() - t0)
        sender = row.get("sender") or "default"
        metrics.MAILS.labels(sender, outcome.outcome).inc()
        level = logging.DEBUG if outcome.outcome in ("sent", "retry") else logging.INFO
        event(level, f"mail.{outcome.outcome}", id=row["id"], attempt=row.get("attempt"),
              code=outcome.smtp_code, enhanced=outcome.smtp_enhanced, detail=outcome.detail)
        with self.lock:
            self.outcomes.append((job, outcome))
            self.totals[outcome.outcome] += 1
            self._done_locked(job)

    def _hand_back(self, job: Job) -> None:
        with self.lock:
            self.unsent[job.batch.token].append(job.row["id"])
            self._done_locked(job)
        self.flush_now.set()

    def _done_locked(self, job: Job) -> None:
        b = job.batch
        b.unfinished.discard(job.row["id"])
        self.pending -= 1
        metrics.IN_FLIGHT.set(self.pending)
        if not b.unfinished:
            self.flush_now.set()
        if self.pending == self.low_water or self.pending == 0:
            self.wake.set()

    # -- housekeeper -----------------------------------------------------------------
    def _housekeeper(self) -> None:
        backoff = Backoff()
        while True:
            self.flush_now.wait(FLUSH_INTERVAL)
            self.flush_now.clear()
            ok = self._flush() and self._extend_leases()
            if ok:
                self._db_ok(backoff)
            if self.housekeeper_stop.is_set():
                return
            if not ok:
                self.housekeeper_stop.wait(backoff.next())

    def _flush(self) -> bool:
        """Write buffered outcomes, then hand back unsent claims. False on a DB fault.
        One flush at a time (housekeeper, main loop, shutdown)."""
        with self.flush_lock:
            return self._flush_locked()

    def _flush_locked(self) -> bool:
        with self.lock:
            items, self.outcomes = self.outcomes, []
            unsent, self.unsent = self.unsent, defaultdict(list)
        ok = True
        if items:
            written, ok, error = self._write_outcomes(items)
            with self.lock:
                for j, _ in written:
                    j.batch.unrecorded.discard(j.row["id"])
                    self._forget_if_done(j.batch)
                if not ok:
                    done = {id(it) for it in written}
                    kept = [it for it in items if id(it) not in done]
                    self.outcomes[:0] = kept  # keep them, oldest first
            if not ok:
                self.db_state.down(error, pending_outcomes=len(items) - len(written))
                metrics.UP.labels("db").set(0)
        for token, ids in unsent.items():
            if not ids:
                continue
            if not ok:
                with self.lock:
                    self.unsent[token].extend(ids)
                continue
            try:
                queries.release(self.pool, ids, token)
            except (queries.DatabaseUnavailable, queries.QueryError) as e:
                with self.lock:
                    self.unsent[token].extend(ids)
                self.db_state.down(e)
                ok = False
                continue
            metrics.RELEASED.inc(len(ids))
            self.totals["released"] += len(ids)
            with self.lock:
                b = self.batches.get(token)
                if b is not None:
                    b.unrecorded.difference_update(ids)
                    self._forget_if_done(b)
        return ok

    def _write_outcomes(self, items):
        """mark_outcomes in as few calls as possible (one per 1000, and the same
        id never twice in one call, e.g. claimed again after a lease ran out
        during an outage).
        Returns (written items, ok, error). An outcome the database rejects as
        invalid input is logged and dropped rather than retried for ever."""
        chunks: list[list] = []
        seen: list[set] = []
        for it in items:
            mid = it[0].row["id"]
            for chunk, ids in zip(chunks, seen):
                if mid not in ids and len(chunk) < MAX_OUTCOMES_PER_CALL:
                    chunk.append(it)
                    ids.add(mid)
                    break
            else:
                chunks.append([it])
                seen.append({mid})
        written: list = []
        for chunk in chunks:
            try:
                t0 = time.perf_counter()
                queries.mark_outcomes(self.pool, [self._payload(it) for it in chunk])
                event(logging.DEBUG, "outcomes.written", count=len(chunk),
                      ms=round((time.perf_counter() - t0) * 1000, 1))
            except queries.DatabaseUnavailable as e:
                return written, False, e
            except queries.QueryError as e:
                if _transient(e.sqlstate):
                    return written, False, e
                for it in chunk:  # find the bad one(s), write the rest
                    try:
                        queries.mark_outcomes(self.pool, [self._payload(it)])
                    except queries.DatabaseUnavailable as e2:
                        return written, False, e2
                    except queries.QueryError as e2:
                        if _transient(e2.sqlstate):
                            return written, False, e2
                        event(logging.ERROR, "runner.outcome_rejected", id=it[0].row["id"], error=str(e2))
                    written.append(it)
                continue
            written.extend(chunk)
        return written, True, None

    @staticmethod
    def _payload(item) -> dict:
        j, o = item
        return {"id": j.row["id"], "token": str(j.batch.token), **o.as_json()}

    def _forget_if_done(self, b: Batch) -> None:
        if not b.unrecorded and not b.unfinished:
            self.batches.pop(b.token, None)

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
                conn = psycopg.connect(self.s.dsn, connect_timeout=10, **self._conn_kwargs())
                queries.listen(conn)
                self.listen_state.up()
                backoff.reset()
                self.wake.set()  # notifications may have been missed while away
                while not self.stopping.is_set():
                    for n in conn.notifies(timeout=1.0):
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
        deadline = time.monotonic() + self.s.grace
        for _ in self._threads:
            self.jobs.put(None)  # workers hand back what is still queued, then stop
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = sum(t.is_alive() for t in self._threads)
        if stuck:
            event(logging.WARNING, "runner.grace_exceeded", sends_abandoned=stuck,
                  note="their leases expire and reclaim recovers them")
        # Last writes: outcomes and releases, retried while the database is away.
        self.housekeeper_stop.set()
        self.flush_now.set()
        self._housekeeper_thread.join(5)
        final_deadline = time.monotonic() + max(5.0, self.s.grace)
        backoff = Backoff()
        while True:
            with self.lock:
                left = len(self.outcomes) + sum(len(v) for v in self.unsent.values())
            if not left:
                break
            if time.monotonic() > final_deadline:
                event(logging.ERROR, "runner.unrecorded", count=left,
                      note="outcomes not written; leases expire and reclaim decides")
                self.exit_code = self.exit_code or 4
                break
            if self._flush():
                continue
            time.sleep(backoff.next())
        self._listener_thread.join(2)
        self.close()
        event(logging.INFO, "runner.stopped", **{k: v for k, v in sorted(self.totals.items())})


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


def _transient(sqlstate: str | None) -> bool:
    """Errors worth retrying: serialization, deadlock, resources, operator intervention."""
    return bool(sqlstate) and sqlstate[:2] in ("40", "53", "57", "08", "55")
