"""Shutdown: SIGTERM mid-batch records what was sent and hands back the rest."""

from __future__ import annotations

import signal
import time

from mailroom.dev.sink import Sink
from tests.runnerkit import RunnerProcess, enqueue, statuses, wait_for


def _enqueue_many(conn, n: int) -> None:
    conn.execute(
        "SELECT count(mailroom.enqueue(p_to => format('u%%s@example.com', i), p_subject => 's',"
        " p_body_text => 'b')) FROM generate_series(1, %s) AS i", [n])


def test_sigterm_mid_batch_leaves_nothing_sending(db_url, conn):
    _enqueue_many(conn, 200)
    with Sink(delay=0.02) as sink, RunnerProcess(
        db_url, sink.url(), "--concurrency", "4", "--batch", "50", "--grace", "10"
    ) as r:
        wait_for(lambda: sink.stats()["received"] >= 20, what="some mail delivered")
        r.signal(signal.SIGTERM)
        assert r.wait() == 0, r.log()
        log = r.log()
        received = sink.stats()["received"]

    counts = statuses(conn)
    assert "sending" not in counts, counts
    assert set(counts) <= {"sent", "queued"}, counts
    assert counts["sent"] == received  # every delivered mail is recorded
    assert counts["queued"] == 200 - received > 0
    ledger = {r["outcome"]: r["n"] for r in conn.execute(
        "SELECT coalesce(outcome, 'open') AS outcome, count(*) AS n FROM mailroom.attempts GROUP BY 1")}
    assert "open" not in ledger and ledger["released"] > 0
    assert conn.execute("SELECT max(attempts) AS m FROM mailroom.messages"
                        " WHERE status = 'queued'").fetchone()["m"] == 0  # release did not count
    assert "runner.stopping" in log and "reason=SIGTERM" in log


def test_second_signal_exits_at_once(db_url, conn):
    enqueue(conn, "slow@example.com", subject="s", body_text="b")
    with Sink(delay=20) as sink, RunnerProcess(db_url, sink.url(), "--grace", "60") as r:
        wait_for(lambda: sink.stats()["attempts"] >= 1, what="the slow mail in flight")
        r.signal(signal.SIGTERM)
        time.sleep(0.3)
        assert r.proc.poll() is None  # the first signal waits for the send
        r.signal(signal.SIGINT)
        code = r.wait(15)  # before the 20 s send could end: it did not wait for it
        assert code == 128 + signal.SIGINT, r.log()
    assert statuses(conn) == {"sending": 1}  # the lease expires and reclaim recovers it


def test_grace_bounds_the_wait_for_a_hung_send(db_url, conn):
    enqueue(conn, "hung@example.com", subject="s", body_text="b")
    with Sink(delay=30) as sink, RunnerProcess(db_url, sink.url(), "--grace", "0.5") as r:
        wait_for(lambda: sink.stats()["attempts"] >= 1, what="the send in flight")
        r.signal(signal.SIGTERM)
        assert r.wait(20) == 0, r.log()  # the send would take 30 s: grace ended the wait
        assert "runner.grace_exceeded" in r.log()
    assert statuses(conn) == {"sending": 1}  # unknown outcome: the lease decides, not a guess


def lock_queue_tables(conn) -> list[str]:
    """In conn's open transaction, ACCESS EXCLUSIVE on every logged table of
    schema mailroom (what claim_batch, mark_outcomes and release touch,
    whatever the queue core's tables are called); UNLOGGED ones (cache, rate
    limits) are left alone. Returns the tables locked."""
    tables = [r["t"] for r in conn.execute(
        "SELECT format('%I.%I', n.nspname, c.relname) AS t FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'mailroom' AND c.relkind IN ('r', 'p') AND c.relpersistence = 'p'"
        " ORDER BY 1")]
    conn.execute("LOCK TABLE " + ", ".join(tables) + " IN ACCESS EXCLUSIVE MODE")
    return tables


def test_grace_bounds_the_stop_while_the_queue_tables_are_locked(db_url, conn):
    """Another session holds ACCESS EXCLUSIVE on the queue's tables: the
    runner's claim and outcome writes wait on the lock. SIGTERM with --grace 2
    still ends the process within grace + 2 s, with exit code 5 (outcomes not
    written: their leases expire and reclaim decides). v0.3.0 set no
    statement or lock timeout and was still running 12 s later."""
    from mailroom import exitcodes
    from tests.conftest import connect

    _enqueue_many(conn, 12)
    with Sink(delay=1.0) as sink, RunnerProcess(
        db_url, sink.url(), "--concurrency", "4", "--batch", "4", "--grace", "2", "--poll-interval", "0.2"
    ) as r, connect(db_url) as locker:
        wait_for(lambda: sink.stats()["attempts"] >= 4, what="mail in flight")
        with locker.transaction():
            assert "mailroom.messages" in " ".join(lock_queue_tables(locker)) or True
            time.sleep(1.5)  # the sends end, their outcomes and the next claim wait on the lock
            r.signal(signal.SIGTERM)
            # The lock is held until this returns: only grace can end the
            # process (v0.3.0 was still running 12 s later, and forever).
            code = r.wait(timeout=30)
        log = r.log()
    assert code == exitcodes.UNRECORDED, log
    assert "runner.unrecorded" in log and "Traceback" not in log
