"""The runner and the application's calls through a real PgBouncer, in session
and in transaction mode (pool_mode = transaction: each transaction may run on
another server session, so nothing may live in a session)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import dict_row

from mailroom.dev.sink import Sink
from tests.conftest import connect
from tests.pgbouncerkit import PgBouncer
from tests.runnerkit import RunnerProcess, enqueue, settled, statuses, wait_for

FAST = ("--concurrency", "2", "--batch", "20", "--heartbeat-interval", "1")


def _dbname(url: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(url)["dbname"]


def _app_connect(url: str) -> psycopg.Connection:
    """An application's connection through a pooler: no server-side prepared
    statements (PgBouncer 1.18 cannot keep them in transaction mode)."""
    return psycopg.connect(url, autocommit=True, row_factory=dict_row, prepare_threshold=None)


@pytest.fixture(params=["session", "transaction"])
def bouncer(request, server_url):
    with PgBouncer(server_url, pool_mode=request.param, pool_size=2) as b:
        yield b


@pytest.fixture
def sink():
    with Sink(keep=True) as s:
        yield s


def test_enqueue_in_the_applications_transaction_and_a_pooled_runner_drain(bouncer, db_url, conn, sink):
    via = bouncer.url(_dbname(db_url))
    with _app_connect(via) as app:
        for i in range(30):  # more calls than psycopg's prepare threshold (5)
            with app.transaction():
                enqueue(app, f"user{i}@example.com", subject=f"Order {i}", body_text="Thanks",
                        delivery_key=f"order-{i}")
        with pytest.raises(RuntimeError):
            with app.transaction():
                enqueue(app, "never@example.com", subject="never", body_text="never", delivery_key="never")
                raise RuntimeError("the business write failed")
    with RunnerProcess(via, sink.url(), "--pooled", "--poll-interval", "0.2", "--exit-when-idle", *FAST) as r:
        assert r.wait(120) == 0, r.log()
        assert "pooled=True" in r.log()
    assert statuses(conn) == {"sent": 30}
    assert sorted(m["rcpt_tos"][0] for m in sink.messages) == sorted(f"user{i}@example.com" for i in range(30))
    # Nothing the runner set stayed behind in the sessions it shared.
    with _app_connect(via) as other:
        for _ in range(4):
            row = other.execute("SELECT current_setting('statement_timeout') AS st,"
                                " current_setting('lock_timeout') AS lt").fetchone()
            assert row == {"st": "0", "lt": "0"}


def test_wake_ups_over_the_direct_connection_and_polling_without_it(db_url, conn, server_url):
    """Through transaction pooling LISTEN cannot hold: with --listen-dsn the
    runner listens on a direct session (an hour's poll interval, yet mail
    goes at once); without it the runner polls (and says nothing is lost)."""
    with PgBouncer(server_url, pool_mode="transaction") as bouncer:
        via = bouncer.url(_dbname(db_url))
        with RunnerProcess(via, "null://", "--pooled", "--listen-dsn", db_url, "--poll-interval", "3600",
                           *FAST) as r:
            wait_for(lambda: "listen.up" in r.log() or "runner.start" in r.log(), 30, what="start")
            wait_for(lambda: conn.execute("SELECT count(*) AS n FROM mailroom.runner_waits").fetchone()["n"] == 1,
                     60, what="the runner waiting for work on its direct session")
            with _app_connect(via) as app:
                enqueue(app, "woken@example.com", subject="Hi", body_text="Hi")
            wait_for(lambda: settled(conn, 1), 60, what="mail sent on the wake-up, not the hour's poll")
            assert r.stop() == 0, r.log()
        with RunnerProcess(via, "null://", "--pooled", "--poll-interval", "0.3", *FAST) as r:
            wait_for(lambda: "runner.start" in r.log(), 30, what="start")
            with _app_connect(via) as app:
                enqueue(app, "polled@example.com", subject="Hi", body_text="Hi")
            wait_for(lambda: settled(conn, 2), 60, what="mail sent on the next poll")
            assert r.stop() == 0, r.log()
            assert "listener" not in r.log() or "listen.down" not in r.log()


def test_a_pooled_runner_rides_out_a_pgbouncer_restart(db_url, conn, server_url, sink):
    """PgBouncer restarted mid-drain: every connection is cut; the runner
    keeps the outcomes it could not write, reconnects and finishes. Nothing
    lost, nothing sent twice."""
    with connect(db_url) as c:
        c.execute("SELECT mailroom.enqueue(k || '@example.com', 'Drill', 'Body', p_delivery_key => k)"
                  " FROM (SELECT 'r-' || i AS k FROM generate_series(1, 300) i) s")
    slow = Sink(keep=True, delay=0.01)
    with slow, PgBouncer(server_url, pool_mode="transaction") as bouncer:
        via = bouncer.url(_dbname(db_url))
        with RunnerProcess(via, slow.url(), "--pooled", "--poll-interval", "0.2", *FAST) as r:
            wait_for(lambda: slow.stats()["received"] >= 30, 60, what="the drain under way")
            bouncer.restart()
            wait_for(lambda: settled(conn, 300), 180, what="the drain finished after the restart")
            assert r.stop() == 0, r.log()
        assert slow.stats()["duplicates"] == 0, slow.stats()["duplicate_ids"]
    assert statuses(conn) == {"sent": 300}
