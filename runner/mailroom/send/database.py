"""One database a runner serves, with everything that belongs to it.

A runner serves one database or several (`mailroom run --dsn A --dsn B`).
Everything that is per database lives here, so that the claimer (runner.py)
only decides which database to claim from next:

- its connection pool, and how to talk to it: directly, or through a
  transaction-mode pooler (`--pooled`: no startup options, no prepared
  statements, the timeouts sent with every call as SET LOCAL, see below);
- its completer: a mail's outcome goes back to the database it came from,
  and while one database cannot take its outcomes only its own claims stop;
- its templates (a Renderer per database: two shards may each have a
  template "welcome" of their own);
- its wake-ups: a LISTEN connection and the enqueue wake-up protocol
  (`Waiting`), both session state, so through a transaction-mode pooler they
  need a direct connection (`--listen-dsn`) and without one the runner polls;
- its heartbeat row (mailroom.runners of that database) with the counts of
  the mail that came from it;
- its health: a database that is down or read-only is retried with backoff
  on its own schedule while the others go on.

Through a transaction-mode pooler (PgBouncer pool_mode = transaction) each
statement may run on a different server session, so a runner keeps nothing
in a session: every call is one simple-protocol query string
`SET LOCAL statement_timeout ...; SET LOCAL lock_timeout ...; SELECT ...`,
one implicit transaction (client-side binding, psycopg's ClientCursor), so
the limits hold for that call whichever server connection runs it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

import psycopg
import psycopg_pool
from psycopg.rows import dict_row

from mailroom import exitcodes, logs, metrics, queries
from mailroom.backoff import Backoff
from mailroom.send.completer import Completer
from mailroom.send.heartbeat import Heartbeat, Vitals
from mailroom.logs import event
from mailroom.send.render import Renderer

# The wake-up handshake is never worth waiting for: a stray lock holder must
# not stall the runner (it polls instead).
WAITING_LOCK_TIMEOUT_MS = 200
RECLAIM_INTERVAL = 1.0
IDLE_CHECK_AFTER = 2.0  # seconds a pooled connection may sit unused before it is checked


class FatalError(Exception):
    """The runner cannot start (or go on); `exit_code` is one of mailroom.exitcodes."""

    def __init__(self, message: str, exit_code: int = exitcodes.REFUSED):
        super().__init__(message)
        self.exit_code = exit_code


def database_label(dsn: str) -> str:
    """host:port/dbname of a DSN, never its password: the name a database
    goes by in the log, the metrics and the heartbeat."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    host = str(info.get("host") or info.get("hostaddr") or "local").split(",")[0]
    port = str(info.get("port") or "5432").split(",")[0]
    return f"{host}:{port}/{info.get('dbname') or info.get('user') or ''}"


class Waiting:
    """The runner's side of enqueue's wake-up protocol (deploy/runner_waiting.sql,
    deploy/enqueue.sql). enqueue notifies only while some runner is waiting
    (a row in mailroom.runner_waits for its backend); this runner waits, on a
    connection of its own, from the first claim that comes back short until a
    claim comes back full. Before it sleeps until notified it claims once
    more after enqueues_settled: every enqueue that saw nobody waiting has
    committed by then, so that claim finds its mail and no wake-up is lost.

    `connect` None: no session to wait on (a transaction-mode pooler without
    --listen-dsn); the runner polls and prepare() always says sleep."""

    def __init__(self, connect: Callable[[], psycopg.Connection] | None):
        self._connect = connect
        self.conn: psycopg.Connection | None = None
        self.held = False
        self.settled = False

    def prepare(self) -> str:
        """'claim': the barrier just passed, claim once more; 'retry': an
        enqueue that may not have woken us is in flight, try again shortly;
        'sleep': sleep until notified."""
        if self._connect is None or self.settled:
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


class Database:
    """One database of a runner (see the module's doc)."""

    def __init__(self, dsn: str, *, settings, listen_dsn: str | None = None, pooled: bool = False,
                 on_flush: Callable | None = None, on_flush_every: float | None = None):
        try:
            info = psycopg.conninfo.conninfo_to_dict(dsn)
            if listen_dsn:
                logs.register_secret(psycopg.conninfo.conninfo_to_dict(listen_dsn).get("password"))
        except psycopg.ProgrammingError as e:
            raise FatalError(f"--dsn: cannot parse: {e}", exitcodes.USAGE) from None
        logs.register_secret(info.get("password"))
        self.s = settings
        self.dsn = dsn
        self.listen_dsn = listen_dsn if listen_dsn else (None if pooled else dsn)
        self.pooled = pooled
        self.name = database_label(dsn)
        self._dsn_options = str(info.get("options") or "")
        if pooled and self._dsn_options:
            raise FatalError(f"--dsn {self.name}: a transaction-mode pooler does not take startup options "
                             "(options=...): set them on the role or database instead", exitcodes.USAGE)
        self._on_flush, self._on_flush_every = on_flush, on_flush_every
        self.renderer = Renderer(settings.from_address, settings.message_id_domain)
        self.pool: psycopg_pool.ConnectionPool | None = None
        self.completer: Completer | None = None
        self.state = logs.StateLog("db")
        self.listen_state = logs.StateLog("listen")
        self.waiting = Waiting(self._connect_waiting if self.listen_dsn else None)
        self.backoff = Backoff()
        self.retry_at = 0.0  # monotonic: while down, not tried again before
        self.last_reclaim = 0.0
        self.last_claimed = 0  # rows of the last claim
        self.streams: dict[str, bool] = {}
        self.streams_read_at = 0.0
        # Counts of this database's mail since start (the heartbeat row in it tells them).
        self.counts: Counter = Counter()
        self.pending = 0
        self.heartbeat: Heartbeat | None = None

    # -- connections ---------------------------------------------------------------
    def _timeouts_ms(self, lock_timeout_ms: int | None) -> tuple[int, int]:
        timeout_ms = int(self.s.db_timeout * 1000)
        return timeout_ms, lock_timeout_ms or timeout_ms

    def conn_kwargs(self, lock_timeout_ms: int | None = None, *, direct: bool = False) -> dict:
        statement_ms, lock_ms = self._timeouts_ms(lock_timeout_ms)
        kwargs = {"autocommit": True, "row_factory": dict_row,
                  "application_name": f"mailroom-run {self.s.worker}"[:63]}
        if self.pooled and not direct:
            # Nothing that lives in a session: no startup options (PgBouncer
            # refuses them), no server-side prepared statements (PgBouncer
            # 1.18 in transaction mode hands them to other clients' sessions).
            kwargs.update(prepare_threshold=None, cursor_factory=psycopg.ClientCursor)
            return kwargs
        # READ COMMITTED whatever the database's default: claim_batch, mark_outcomes,
        # release, extend_lease and reclaim refuse anything else (0A000).
        options = (f"{self._dsn_options} -c statement_timeout={statement_ms} -c lock_timeout={lock_ms}"
                   r" -c default_transaction_isolation=read\ committed").strip()
        kwargs["options"] = options
        return kwargs

    def per_call_settings(self) -> str:
        statement_ms, lock_ms = self._timeouts_ms(None)
        return (f"SET LOCAL statement_timeout = {statement_ms}; SET LOCAL lock_timeout = {lock_ms}; "
                "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; ")

    def _configure(self, conn: psycopg.Connection) -> None:
        if self.pooled:
            conn._mailroom_per_call = self.per_call_settings()  # queries._execute sends it with each call

    def connect(self, **kw) -> psycopg.Connection:
        conn = psycopg.connect(self.dsn, connect_timeout=10, **self.conn_kwargs(**kw))
        self._configure(conn)
        return conn

    def connect_direct(self, **kw) -> psycopg.Connection:
        """A session of its own (LISTEN, the wake-up protocol): over
        --listen-dsn when there is one, else the DSN itself."""
        return psycopg.connect(self.listen_dsn, connect_timeout=10, **self.conn_kwargs(direct=True, **kw))

    def _connect_waiting(self) -> psycopg.Connection:
        return self.connect_direct(lock_timeout_ms=min(WAITING_LOCK_TIMEOUT_MS, int(self.s.db_timeout * 1000)))

    def open(self, vitals: Callable[[], Vitals], named: bool = False) -> None:
        """Connect, check the role's rights, read the streams. named: the
        runner serves several databases, and says which in its summary lines."""
        try:  # a direct first connection gives a clear error for bad configuration
            self.connect().close()
        except psycopg.Error as e:
            raise FatalError(f"cannot connect to the database {self.name}: {' '.join(str(e).split())}",
                             exitcodes.UNREACHABLE) from None
        self.pool = psycopg_pool.ConnectionPool(
            self.dsn, min_size=1, max_size=4, kwargs=self.conn_kwargs(), open=False, check=_check_if_idle,
            configure=self._configure, name=f"mailroom-run {self.name}", reconnect_timeout=24 * 3600,
        )
        try:
            self.pool.open(wait=True, timeout=15)
        except psycopg_pool.PoolTimeout as e:
            self.pool.close(timeout=1)
            raise FatalError(f"cannot connect to the database {self.name}: {e}", exitcodes.UNREACHABLE) from None
        try:
            missing = queries.missing_runner_functions(self.pool)
        except (queries.DatabaseUnavailable, queries.QueryError) as e:
            self.pool.close(timeout=1)
            raise FatalError(f"cannot check the runner's privileges on {self.name}: {e}",
                             exitcodes.UNREACHABLE) from None
        if missing:
            self.pool.close(timeout=1)
            raise FatalError(
                f"the role cannot execute mailroom." + ", mailroom.".join(missing) + f" on {self.name}"
                " (SQLSTATE 42501: grant it mailroom_runner, or deploy the schema)", exitcodes.REFUSED)
        self.read_streams()
        every = self.s.heartbeat_interval
        if self._on_flush_every is not None:
            every = min(every, self._on_flush_every)
        self.heartbeat = Heartbeat(self.s.worker, vitals, sender=self.s.sender, concurrency=self.s.concurrency,
                                   interval=self.s.heartbeat_interval, summary_every=self.s.summary_interval,
                                   database=self.name if named else None)
        self.completer = Completer(self.pool, on_flush=self._after_flush, on_flush_every=every, state=self.state)

    def _after_flush(self, conn) -> None:
        """The completer's hook, on the connection of a flush that wrote
        something (and, while nothing is written, every heartbeat interval):
        the heartbeat row and the summary line when due, then the caller's
        own on_flush."""
        self.heartbeat.after_flush(conn)
        if self._on_flush is not None:
            self._on_flush(conn)

    def close(self) -> None:
        self.waiting.close()
        if self.pool is not None:
            self.pool.close(timeout=1)
            self.pool = None

    # -- health --------------------------------------------------------------------
    def ready(self, now: float) -> bool:
        """May be claimed from now: not waiting out a failure, and its
        completer can write (claiming or reclaiming on top of outcomes the
        database does not have could send them again)."""
        return now >= self.retry_at and self.completer.writable

    def failed(self, e: Exception) -> None:
        """A call failed: this database waits its backoff; the others go on.
        Any refusal, not only a lost connection: a revoked grant or a
        read-only database may be fixed while the runner waits."""
        self.state.down(e, database=self.name, pending_outcomes=self.completer.pending)
        metrics.UP.labels("db").set(0)
        self.retry_at = time.monotonic() + self.backoff.next()

    def answered(self) -> None:
        if self.state.up(database=self.name):
            metrics.UP.labels("db").set(1)
        self.backoff.reset()
        self.retry_at = 0.0

    def reclaim_if_due(self) -> None:
        """reclaim, at most once a second, once this runner's own outcomes
        are written (waiting for a flush in progress): reclaim must never
        re-queue mail this runner has sent but not yet recorded."""
        if time.monotonic() - self.last_reclaim < RECLAIM_INTERVAL:
            return
        if not self.completer.flush():
            raise queries.DatabaseUnavailable(self.completer.last_error or "outcomes not written")
        n = queries.reclaim(self.pool)
        self.last_reclaim = time.monotonic()
        if n:
            event(logging.INFO, "runner.reclaimed", count=n, database=self.name)

    def read_streams(self) -> None:
        """Which streams carry unsubscribe headers (mailroom.streams); the
        last answer serves while the database does not give one."""
        try:
            self.streams = queries.stream_settings(self.pool)
        except (queries.DatabaseUnavailable, queries.QueryError) as e:
            event(logging.WARNING, "streams.unavailable", error=str(e), database=self.name)
        self.streams_read_at = time.monotonic()

    # -- wake-ups ------------------------------------------------------------------
    def busy(self) -> None:
        try:
            self.waiting.end()
        except (queries.DatabaseUnavailable, queries.QueryError) as e:
            event(logging.DEBUG, "runner.waiting_lost", error=queries.first_line(e), database=self.name)
            self.waiting.reset()

    def prepare_to_sleep(self) -> str:
        """See Waiting. Without its connection the runner cannot be sure to be
        woken: 'poll' (claim again within half a second) until it is back."""
        try:
            return self.waiting.prepare()
        except (queries.DatabaseUnavailable, queries.QueryError, psycopg.Error) as e:
            event(logging.DEBUG, "runner.waiting_lost", error=queries.first_line(e), database=self.name)
            self.waiting.reset()
            return "poll"

    def listen(self, stopping: threading.Event, wake: threading.Event, sender: str | None) -> None:
        """The listener thread's loop: LISTEN on a session of its own, wake
        the claimer on a notification for this runner's mail."""
        backoff = Backoff()
        while not stopping.is_set():
            conn = None
            try:
                conn = self.connect_direct()
                queries.listen(conn)
                self.listen_state.up(database=self.name)
                backoff.reset()
                wake.set()  # notifications may have been missed while away
                while not stopping.is_set():
                    for n in conn.notifies(timeout=0.5):
                        if sender is None or n.payload in (sender, "released", ""):
                            wake.set()
            except (psycopg.Error, queries.DatabaseUnavailable, queries.QueryError) as e:
                if not stopping.is_set():
                    self.listen_state.down(queries.first_line(e), database=self.name)
                    stopping.wait(backoff.next())
            finally:
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass


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
