"""Fleet faults and shard changes (docs/fleet.md), against the real thing:
a directory over cloned shards (tests/fleetkit.py), real PL/Proxy, and for
adding and retiring a shard real runners draining into a real SMTP sink."""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager

import psycopg
import pytest
from psycopg import sql

from tests.conftest import cloned_database, connect
from tests.fleetkit import build_fleet, connstr_of
from tests.runnerkit import enqueue, wait_for


@pytest.fixture(scope="module")
def fleet(server_url, template_db):
    with build_fleet(server_url, template_db) as f:
        yield f


def _status(fleet) -> dict[str, dict]:
    with fleet.call() as c:
        return {r["shard"]: r for r in c.execute("SELECT * FROM mailroom_fleet.shard_status()")}


@contextmanager
def _silent_listener():
    """A loopback port that accepts TCP connections and never says a word:
    a hung shard as PL/Proxy sees it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        t.join()
        for s in held:
            s.close()
        server.close()


def _fails(fleet, call: str, guard: str = "120s") -> psycopg.Error:
    """The call's error. A client-side statement_timeout guards the test from
    a call that would hang forever: it must fail on its own, before that."""
    with fleet.call() as c, pytest.raises(psycopg.Error) as e:
        c.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(guard)))
        c.execute(call)
    assert e.value.sqlstate != "57014", f"{call} hung until the test's guard: {e.value}"
    return e.value


def test_shard_status_is_every_shards_summary_with_its_warnings(fleet):
    a, b = fleet.names
    with fleet.shard(a) as sa:
        enqueue(sa, "status-a@example.com", subject="s", body_text="b")
    with fleet.call() as c:
        summary = {r["shard"]: r for r in c.execute("SELECT * FROM mailroom_fleet.queue_summary()")}
        warnings = c.execute("SELECT shard, warning FROM mailroom_fleet.queue_stats() WHERE kind = 'warning'"
                             " ORDER BY 1, 2").fetchall()
    status = _status(fleet)
    assert sorted(status) == sorted([a, b])
    for name in (a, b):
        row = status[name]
        assert row["answered"] is True and row["error"] is None and row["error_code"] is None
        assert row["partitions"] == [p for p, n in fleet.partitions().items() if n == name]
        for col in ("messages", "due", "queued", "sending", "paused", "review", "warnings"):
            assert row[col] == summary[name][col], (name, col)
    assert sorted((s, w["warning"]) for s, r in status.items() for w in r["warning_list"]) == \
        [(w["shard"], w["warning"]) for w in warnings]


def test_a_shard_down_is_marked_and_the_others_still_answer(fleet):
    up, down = fleet.names
    with fleet.shard_down(down) as port:
        status = _status(fleet)
        error = _fails(fleet, "SELECT * FROM mailroom_fleet.queue_summary()")
    assert status[up]["answered"] is True and status[up]["messages"] is not None
    row = status[down]
    assert row["answered"] is False and row["messages"] is None and row["warning_list"] is None
    assert row["partitions"] == [1, 3] and row["error_code"] == "XX000"
    assert row["error"].startswith(f"partition p1, p3 (dbname {down}): ")
    assert f"port {port} failed" in row["error"] and "Connection refused" in row["error"]
    assert f"[{down}]" in str(error) and "Connection refused" in str(error)


def test_a_hung_shard_is_ended_by_the_directorys_statement_timeout_only(fleet):
    """A shard that accepts TCP and never answers the startup: PL/Proxy 2.10
    ends it neither at the connect string's connect_timeout nor at the
    server's query_timeout (checked), so the protection is a
    statement_timeout on the directory session (docs/fleet.md): the call
    then fails with 57014 instead of hanging forever."""
    down = fleet.names[1]
    with _silent_listener() as port:
        hung = f"dbname={down} host=127.0.0.1 port={port} connect_timeout=2"
        with fleet.shard_down(down, connstr=hung), fleet.call() as c:
            c.execute("SET statement_timeout = '5s'")
            for call in ("SELECT * FROM mailroom_fleet.queue_summary()", "SELECT * FROM mailroom_fleet.shard_status()"):
                with pytest.raises(psycopg.errors.QueryCanceled):
                    c.execute(call)


@contextmanager
def _server_option(fleet, name: str, value: str):
    fleet.set_partitions({name: value}, action="ADD")
    try:
        yield
    finally:
        with connect(fleet.directory) as d:
            d.execute(sql.SQL("ALTER SERVER mailroom_fleet OPTIONS (DROP {})").format(sql.Identifier(name)))


# -- a query that blocks on a shard (a lock held there) -------------------------------
#
# Each call below runs under a statement_timeout on the directory session (the
# guard), so a lock wait nothing else ends fails the test at the guard instead
# of hanging the suite.

ENQUEUE = "SELECT * FROM mailroom_fleet.enqueue(%s, 'hi', 'body', p_delivery_key => %s)"


def _address_on(fleet, shard: str, name: str) -> str:
    with fleet.call() as c:
        for i in range(1000):
            address = f"{name}{i}@blocked.example"
            if fleet.layout[c.execute("SELECT mailroom_fleet.partition_of(%s) AS p", (address,)).fetchone()["p"]] == shard:
                return address
    raise AssertionError(f"no address on {shard}")


@contextmanager
def _held(fleet, shard: str, *statements: tuple[str, tuple]):
    """An open transaction on the shard that ran `statements` (and holds their
    locks) for the duration; rolled back after."""
    with fleet.shard(shard) as holder:
        holder.autocommit = False
        for statement, params in statements:
            holder.execute(statement, params)
        try:
            yield
        finally:
            holder.rollback()


def _lock_waiters(fleet, shard: str) -> int:
    """Backends on the shard waiting on a lock (the directory's remote calls)."""
    with fleet.shard(shard) as s:
        return s.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
                         " AND wait_event_type = 'Lock'").fetchone()["n"]


def _agent(fleet) -> str:
    """The login the directory uses on the shards (its user mapping)."""
    with connect(fleet.directory) as d:
        options = d.execute("SELECT umoptions FROM pg_user_mappings WHERE srvname = 'mailroom_fleet'").fetchone()
    return next(o.split("=", 1)[1] for o in options["umoptions"] if o.startswith("user="))


@contextmanager
def _shard_login_setting(fleet, shard: str, name: str, value: str):
    """ALTER ROLE <the directory's shard login> IN DATABASE shard SET name = value
    (new PL/Proxy connections, i.e. new directory sessions, take it)."""
    role = sql.Identifier(_agent(fleet))
    with fleet.shard(shard) as s:
        s.execute(sql.SQL("ALTER ROLE {} IN DATABASE {} SET {} = {}").format(
            role, sql.Identifier(shard), sql.Identifier(name), sql.Literal(value)))
        try:
            yield
        finally:
            s.execute(sql.SQL("ALTER ROLE {} IN DATABASE {} RESET {}").format(
                role, sql.Identifier(shard), sql.Identifier(name)))


LOCK_MAIL = ("LOCK TABLE mailroom.queue, mailroom.contents IN ACCESS EXCLUSIVE MODE", ())


def _run_guarded(fleet, call: str, params: tuple = (), guard: str = "10s") -> psycopg.Error | None:
    """The call's error (None if it succeeded) under the guard."""
    with fleet.call() as c:
        c.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(guard)))
        try:
            c.execute(call, params).fetchall()
        except psycopg.Error as e:
            return e
    return None


def test_the_servers_query_timeout_ends_a_lock_wait_on_a_shard(fleet):
    """query_timeout = 2 s on the server, the shard's queue and contents locked: the call
    fails with PL/Proxy's own "query timeout" (XX000, well before the
    directory session's 15 s guard), the shard's backend stops waiting;
    shard_status marks that shard and the other answers; suppress blocked on
    a row lock fails the same way and the other shard has committed it."""
    up, down = fleet.names
    with _server_option(fleet, "query_timeout", "2"), _held(fleet, down, LOCK_MAIL):
        error = _run_guarded(fleet, "SELECT * FROM mailroom_fleet.queue_summary()", guard="15s")
        assert error is not None and error.sqlstate == "XX000", error
        assert str(error) == "PL/Proxy function mailroom_fleet.queue_summary(0): query timeout"
        with fleet.call() as c:
            c.execute("SET statement_timeout = '15s'")
            status = {r["shard"]: r for r in c.execute("SELECT * FROM mailroom_fleet.shard_status()")}
        print("waiters after query_timeout:", _lock_waiters(fleet, down))
        # suppress needs the row another transaction on the shard is inserting.
        victim = "qt-victim@blocked.example"
        with _held(fleet, down, ("SELECT mailroom.suppress(%s, 'manual', 'held')", (victim,))):
            error = _run_guarded(fleet, "SELECT * FROM mailroom_fleet.suppress(%s)", (victim,), guard="15s")
        assert error is not None and str(error) == "PL/Proxy function mailroom_fleet.suppress(4): query timeout"
    assert status[up]["answered"] is True
    assert status[down]["answered"] is False and "query timeout" in status[down]["error"], status[down]
    wait_for(lambda: _lock_waiters(fleet, down) == 0, timeout=10, what="the shard's remote query ended")
    with fleet.shard(up) as s:  # the other shard committed it: run the call again
        assert s.execute("SELECT count(*) AS n FROM mailroom.suppressions"
                         " WHERE address_key = mailroom._address_key(%s)", (victim,)).fetchone()["n"] == 1


def test_the_directorys_statement_timeout_ends_a_lock_wait_and_cancels_the_shards_query(fleet):
    """Only a statement_timeout on the directory session: every call blocked
    on the locked shard fails with 57014, and the shard's backend stops
    waiting (PL/Proxy cancels its remote query), so the lock holder is not
    left with a queue of waiters."""
    up, down = fleet.names
    address = _address_on(fleet, down, "dirtimeout")
    with _held(fleet, down, LOCK_MAIL):
        for call, params in (("SELECT * FROM mailroom_fleet.queue_stats()", ()),
                             ("SELECT * FROM mailroom_fleet.inspect('nothing')", ()),
                             (ENQUEUE, (address, "dirtimeout"))):
            error = _run_guarded(fleet, call, params, guard="3s")
            assert isinstance(error, psycopg.errors.QueryCanceled), (call, error)
            wait_for(lambda: _lock_waiters(fleet, down) == 0, timeout=30, what="the shard's remote query ended")
    with fleet.shard(down) as s:
        assert s.execute("SELECT count(*) AS n FROM mailroom.messages WHERE to_address = %s",
                         (address,)).fetchone()["n"] == 0


@pytest.mark.parametrize("setting, value, sqlstate, says", [
    ("lock_timeout", "1s", "55P03", "canceling statement due to lock timeout"),
    ("statement_timeout", "1s", "57014", "canceling statement due to statement timeout")])
def test_a_timeout_on_the_shard_login_frees_the_shards_backend(fleet, setting, value, sqlstate, says):
    """lock_timeout / statement_timeout set on the directory's shard login (in
    the shard's database): the shard ends the blocked query itself, so its
    backend stops waiting while the lock is still held, and the call fails.
    Usually as a REMOTE ERROR naming the shard, with its SQLSTATE; but
    PL/Proxy 2.10 without a query_timeout sometimes misses that error and
    waits on (seen with inspect: the shard's backend idle, the directory
    still waiting), so then only the directory session's statement_timeout
    (the 20 s guard here) ends the call. enqueue for an address on another
    shard goes on."""
    up, down = fleet.names
    free = _address_on(fleet, up, f"{setting}f")
    with _shard_login_setting(fleet, down, setting, value), _held(fleet, down, LOCK_MAIL):
        for call, params in (("SELECT * FROM mailroom_fleet.queue_summary()", ()),
                             ("SELECT * FROM mailroom_fleet.inspect('x')", ()),
                             (ENQUEUE, (_address_on(fleet, down, f"{setting}b"), f"{setting}-blocked"))):
            error = _run_guarded(fleet, call, params, guard="20s")
            assert error is not None, call
            if "REMOTE ERROR" in str(error):
                assert error.sqlstate == sqlstate and f"[{down}] REMOTE ERROR: {says}" in str(error), str(error)
            else:
                print(f"PL/Proxy missed the shard's error for {call}: {error}")
                assert isinstance(error, psycopg.errors.QueryCanceled), (call, error)
            assert _lock_waiters(fleet, down) == 0, call
        assert _run_guarded(fleet, ENQUEUE, (free, f"{setting}-free")) is None


# -- a stale map: a partition at a database that is no shard, or renamed -------------

def test_a_stale_map_fails_queue_stats_and_inspect_naming_the_database(fleet, server_url):
    """Partitions at a database that is no mailroom shard (recreated empty) or
    at one that does not exist (renamed): both calls fail, naming it."""
    down = fleet.names[1]
    with cloned_database(server_url, "template0") as empty:
        empty_name = psycopg.conninfo.conninfo_to_dict(empty)["dbname"]
        renamed = f"{down}_renamed"
        missing = ("XX000", f'database "{renamed}" does not exist')
        for target, name, expected in (
                (connstr_of(empty), empty_name, {"queue_stats": ("42P01", 'relation "mailroom.queue_stats" does not exist'),
                                                 "inspect": ("3F000", 'schema "mailroom" does not exist')}),
                (connstr_of(fleet.shards[1]).replace(down, renamed), renamed,
                 {"queue_stats": missing, "inspect": missing})):
            with fleet.shard_down(down, connstr=target):
                for call, (sqlstate, says) in (("SELECT * FROM mailroom_fleet.queue_stats()", expected["queue_stats"]),
                                               ("SELECT * FROM mailroom_fleet.inspect('anything')", expected["inspect"])):
                    error = _fails(fleet, call, guard="30s")
                    assert error.sqlstate == sqlstate and f"[{name}]" in str(error) and says in str(error), \
                        (call, str(error))
