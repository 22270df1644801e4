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
from tests.runnerkit import enqueue


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
