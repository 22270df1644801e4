"""enqueue wakes runners only when one waits for work, and no wake-up is lost.

The protocol (deploy/runner_waiting.sql, deploy/enqueue.sql): a runner that
waits for work has a row in mailroom.runner_waits; enqueue notifies only
while some row exists; an enqueue that saw nobody waiting holds the barrier
(tried, never waited for) until it commits, and a runner claims once more
after the barrier is free before it sleeps.
"""

from __future__ import annotations

import random
import threading
import time

import psycopg
from psycopg.rows import dict_row

from mailroom import queries
from mailroom.send.database import Waiting
from mailroom.dev.sink import Sink
from tests.conftest import connect
from tests.runnerkit import RunnerProcess, enqueue, settled, wait_for


def _notifications(listener: psycopg.Connection, wait: float = 0.3) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=wait, stop_after=10)]


def _wait_for_dead_rows_removed(db_url: str, conn: psycopg.Connection) -> None:
    """Start and stop waiting on a fresh session until no row is left: a row
    goes once its backend has exited, a moment after the client's close()."""
    cleaner = connect(db_url)
    try:
        def removed() -> bool:
            assert not queries.runner_waiting(cleaner, False), "the cleaner itself was not waiting"
            return conn.execute("SELECT count(*) AS n FROM mailroom.runner_waits").fetchone()["n"] == 0
        wait_for(removed, timeout=10, what="the closed session's row to be removed")
    finally:
        cleaner.close()


def _enqueue(conn, key: str, sender: str = "default") -> None:
    conn.execute("SELECT mailroom.enqueue(%s, 'Hi', 'B', p_delivery_key => %s, p_sender => %s)",
                 (f"{key}@example.com", key, sender))


def test_enqueue_notifies_only_while_a_runner_waits(db_url, conn):
    listener = connect(db_url)
    runner = connect(db_url)
    queries.listen(listener)

    _enqueue(conn, "nobody-waits")
    assert _notifications(listener) == [], "nobody waits: no NOTIFY, no serialized commit"

    assert queries.runner_waiting(runner, True)
    _enqueue(conn, "one-waits", sender="news")
    assert _notifications(listener) == ["news"], "a waiting runner is woken with the sender"

    assert queries.runner_waiting(runner, False)
    assert not queries.runner_waiting(runner, False), "a second release finds nothing to release"
    _enqueue(conn, "busy-again")
    assert _notifications(listener) == []

    queries.runner_waiting(runner, True)
    runner.close()  # a runner that dies leaves its row ...
    _wait_for_dead_rows_removed(db_url, conn)  # ... which the next runner to start or stop removes
    _enqueue(conn, "after-death")
    assert _notifications(listener) == []

    # Mail that is not due yet, or suppressed, never notifies anyway.
    other = connect(db_url)
    queries.runner_waiting(other, True)
    conn.execute("SELECT mailroom.enqueue('later@example.com', 'Hi', 'B', p_send_at => now() + interval '1 hour')")
    assert _notifications(listener) == []
    _enqueue(conn, "due-now")
    assert _notifications(listener) == ["default"]


def test_an_enqueue_in_flight_holds_the_barrier_until_it_commits(db_url, conn):
    app = psycopg.connect(db_url, row_factory=dict_row)  # the application's own transaction
    runner = connect(db_url)
    assert queries.enqueues_settled(runner)

    _enqueue(app, "in-flight")  # nobody waits: it will not notify
    queries.runner_waiting(runner, True)
    assert not queries.enqueues_settled(runner), "the runner must not sleep yet: this mail would be missed"
    # Meanwhile other enqueues go on (shared barrier, and the runner never queues for it).
    _enqueue(conn, "concurrent")
    app.commit()
    assert queries.enqueues_settled(runner)
    got = conn.execute("SELECT delivery_key FROM mailroom.claim_batch('w', 10) ORDER BY delivery_key").fetchall()
    assert [r["delivery_key"] for r in got] == ["concurrent", "in-flight"]

    # A rolled-back enqueue frees the barrier too.
    _enqueue(app, "rolled-back")
    assert not queries.enqueues_settled(runner)
    app.rollback()
    assert queries.enqueues_settled(runner)


def test_the_runner_side_claims_once_more_after_the_barrier_and_then_sleeps(db_url, conn):
    app = psycopg.connect(db_url, row_factory=dict_row)
    waiting = Waiting(lambda: connect(db_url))
    assert waiting.prepare() == "claim", "announced, barrier free: claim once more"
    assert waiting.prepare() == "sleep"
    held = "SELECT count(*) AS n FROM mailroom.runner_waits"
    assert conn.execute(held).fetchone()["n"] == 1
    waiting.end()
    assert conn.execute(held).fetchone()["n"] == 0, "busy: enqueues need not notify"

    _enqueue(app, "slow-app")  # saw nobody waiting
    assert waiting.prepare() == "retry", "an enqueue that did not wake us is in flight"
    assert waiting.prepare() == "retry"
    app.commit()
    assert waiting.prepare() == "claim"
    waiting.reset()
    # The closed connection's row goes the next time any runner starts or stops
    # waiting once its backend has exited, which is a moment after close() returns.
    _wait_for_dead_rows_removed(db_url, conn)


def test_no_wake_up_is_lost_while_runners_go_idle_and_busy(db_url, conn):
    """Runners that never poll (an hour) must still pick up every mail: 300
    mails enqueued from three threads at random moments, in bursts that keep
    the runners switching between busy and waiting. A lost wake-up would
    leave a mail queued for the hour."""
    total, threads = 300, 3
    with Sink(delay=0.002) as sink, RunnerProcess(
        db_url, sink.url(), "--poll-interval", "3600", "--batch", "5", "--concurrency", "4"
    ) as a, RunnerProcess(db_url, sink.url(), "--poll-interval", "3600", "--batch", "5", "--concurrency", "4") as b:
        wait_for(lambda: conn.execute("SELECT count(*) AS n FROM mailroom.runner_waits").fetchone()["n"] == 2,
                 timeout=15, what="both runners waiting for work")

        def produce(k: int) -> None:
            rng = random.Random(k)
            with connect(db_url) as c:
                for i in range(total // threads):
                    _enqueue(c, f"race-{k}-{i}")
                    time.sleep(rng.choice((0, 0, 0.001, 0.003, 0.01, 0.05)))

        producers = [threading.Thread(target=produce, args=(k,)) for k in range(threads)]
        for t in producers:
            t.start()
        for t in producers:
            t.join()
        # A lost wake-up leaves mail queued for the runners' hour-long poll.
        wait_for(lambda: settled(conn, total), timeout=120, interval=0.05, what="every mail sent without polling")
        assert a.stop() == 0, a.log()
        assert b.stop() == 0, b.log()
    assert sink.stats()["received"] == total


def test_an_idle_runner_is_woken_by_enqueue_in_an_application_transaction(db_url, conn):
    app = psycopg.connect(db_url, row_factory=dict_row)
    with Sink() as sink, RunnerProcess(db_url, sink.url(), "--poll-interval", "3600") as r:
        wait_for(lambda: conn.execute("SELECT count(*) AS n FROM mailroom.runner_waits").fetchone()["n"] == 1,
                 timeout=15, what="the runner waiting for work")
        enqueue(app, "tx@example.com", subject="s", body_text="b")
        time.sleep(0.2)
        assert sink.stats()["received"] == 0, "not before the commit"
        app.commit()
        wait_for(lambda: sink.stats()["received"] == 1, timeout=60, interval=0.01, what="delivery after commit")  # polling: an hour
        assert r.stop() == 0, r.log()


def test_an_enqueue_in_a_repeatable_read_transaction_sees_a_runner_that_started_waiting_later(db_url, conn):
    """The locks are not MVCC: a snapshot taken before the runner started
    waiting does not hide it from enqueue."""
    listener = connect(db_url)
    queries.listen(listener)
    app = psycopg.connect(db_url, row_factory=dict_row)
    app.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    app.execute("SELECT count(*) FROM mailroom.messages")  # the snapshot is taken here
    runner = connect(db_url)
    queries.runner_waiting(runner, True)
    _enqueue(app, "old-snapshot")
    app.commit()
    assert _notifications(listener) == ["default"]
