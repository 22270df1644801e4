"""Waking on NOTIFY, and surviving the loss of the database connection."""

from __future__ import annotations

import time
import urllib.request

from mailroom.dev.sink import Sink
from mailroom.net import free_port
from tests.conftest import connect
from tests.runnerkit import RunnerProcess, enqueue, settled, statuses, wait_for


def _listening(conn) -> bool:
    return conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name LIKE 'mailroom-run%%' AND query ILIKE 'LISTEN%%'").fetchone()["n"] > 0


def test_notify_wakes_an_idle_runner_before_its_poll(db_url, conn):
    """Polling every 30 s, the runner delivers a new mail long before its next
    poll: NOTIFY woke it. (How soon is a speed figure, printed by the pickup
    benchmark, not decided here on a machine others load.)"""
    port = free_port()
    with Sink(keep=True) as sink, RunnerProcess(
        db_url, sink.url(), "--poll-interval", "30", "--metrics-port", str(port)
    ) as r:
        wait_for(lambda: _listening(conn), timeout=15, what="the runner to LISTEN")
        time.sleep(0.5)  # let its first (empty) claim pass: it now waits up to 30 s
        t0 = time.monotonic()
        enqueue(conn, "wake@example.com", subject="wake up", body_text="b")
        wait_for(lambda: sink.stats()["received"] == 1, timeout=25, interval=0.01, what="delivery")
        elapsed = time.monotonic() - t0
        wait_for(lambda: settled(conn, 1), timeout=30, what="the outcome written")
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert r.stop() == 0, r.log()
    assert elapsed < 25, f"took {elapsed:.2f}s: it waited for its 30 s poll, no wake-up"
    assert 'mailroom_mails_total{outcome="sent",sender="default"} 1.0' in metrics
    assert "mailroom_claim_seconds_bucket" in metrics and "mailroom_send_seconds_bucket" in metrics
    assert "mailroom_in_flight 0.0" in metrics
    # all 8 (the default --concurrency) SMTP sessions wait for mail, none waits for a session
    assert "mailroom_sessions_idle 8.0" in metrics and "mailroom_sends_waiting 0.0" in metrics


def _kill_runner_backends(conn) -> int:
    return conn.execute(
        "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name LIKE 'mailroom-run%%'").fetchone()["n"]


def test_killed_database_connections_mid_drain_lose_nothing(db_url, conn):
    total = 600
    conn.execute(
        "SELECT count(mailroom.enqueue(p_to => format('u%%s@example.com', i), p_subject => 's',"
        " p_body_text => 'b', p_delivery_key => 'drain-' || i)) FROM generate_series(1, %s) AS i", [total])
    killer = connect(db_url)
    with Sink(delay=0.005) as sink, RunnerProcess(
        db_url, sink.url(), "--concurrency", "4", "--batch", "25", "--lease", "5", "--poll-interval", "0.5"
    ) as r:
        kills = 0
        for mark in (100, 250, 400):
            wait_for(lambda: sink.stats()["received"] >= mark, timeout=30, what=f"{mark} delivered")
            kills += _kill_runner_backends(killer)
        wait_for(lambda: settled(conn, total), timeout=60, interval=0.2, what="everything sent")
        assert r.proc.poll() is None, "the runner must survive"
        assert r.stop() == 0, r.log()
        log = r.log()
        stats = sink.stats()
    killer.close()
    assert kills >= 3
    assert statuses(conn) == {"sent": total}
    assert stats["unique_message_ids"] == total
    assert stats["duplicates"] == 0
    assert log.count("listen.down") == 3, log  # one line per kill, none per reconnect attempt
    assert log.count("db.down") == log.count("db.up"), log


def test_outcomes_wait_in_memory_while_the_database_is_unreachable(db_url, conn, server_url):
    conn.execute(
        "SELECT count(mailroom.enqueue(p_to => format('u%%s@example.com', i), p_subject => 's',"
        " p_body_text => 'b')) FROM generate_series(1, 8) AS i")
    database = conn.execute("SELECT current_database() AS d").fetchone()["d"]
    with Sink(delay=0.4) as sink, RunnerProcess(
        db_url, sink.url(), "--concurrency", "4", "--batch", "8", "--lease", "20", "--poll-interval", "0.5"
    ) as r, connect(server_url) as admin:
        wait_for(lambda: sink.stats()["attempts"] >= 1, what="sends in flight")
        admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        try:
            _kill_runner_backends(conn)
            # The claimed batch is sent while the database is away...
            wait_for(lambda: sink.stats()["received"] == 8, timeout=10, what="the batch delivered")
            time.sleep(2.5)  # ...and the runner notices it cannot write the outcomes
            assert statuses(conn) == {"sending": 8}
        finally:
            admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        wait_for(lambda: settled(conn, 8), timeout=20, what="outcomes written after reconnect")
        assert r.stop() == 0, r.log()
        log = r.log()
    assert statuses(conn) == {"sent": 8}
    ledger = conn.execute("SELECT attempt, outcome FROM mailroom.attempts").fetchall()
    assert ledger == [{"attempt": 1, "outcome": "sent"}] * 8  # written once, never resent
    assert log.count("db.down") == log.count("db.up") == 1, log
    assert "pending_outcomes=" in log, log  # the down line says how many outcomes wait


def test_smtp_server_down_then_up_is_one_state_change_and_nothing_is_lost(db_url, conn):
    conn.execute("SELECT mailroom.set_setting('retry_backoff_base', '100 milliseconds')")
    conn.execute(
        "SELECT count(mailroom.enqueue(p_to => format('u%%s@example.com', i), p_subject => 's',"
        " p_body_text => 'b')) FROM generate_series(1, 30) AS i")
    port = free_port()
    with RunnerProcess(db_url, f"smtp://127.0.0.1:{port}?timeout=2", "--concurrency", "4",
                       "--poll-interval", "0.2") as r:
        wait_for(lambda: "smtp.down" in r.log(), timeout=15, what="the runner to notice")
        time.sleep(1.5)  # it probes with backoff meanwhile, without claiming
        with Sink(port=port) as sink:
            wait_for(lambda: settled(conn, 30), timeout=30, interval=0.1, what="everything sent")
            assert r.stop() == 0, r.log()
            received = sink.stats()["received"]
        log = r.log()
    assert statuses(conn) == {"sent": 30} and received == 30
    assert log.count("smtp.down") == 1 and log.count("smtp.up") == 1, log
    retries = conn.execute("SELECT count(*) AS n FROM mailroom.attempts WHERE outcome = 'retry'").fetchone()["n"]
    assert retries <= 4  # at most the sends in flight when it went down; the rest were handed back


def test_a_slow_server_gets_its_lease_extended_not_reclaimed(db_url, conn):
    conn.execute(
        "SELECT count(mailroom.enqueue(p_to => format('slow%%s@example.com', i), p_subject => 's',"
        " p_body_text => 'b')) FROM generate_series(1, 4) AS i")
    with Sink(delay=1.0) as sink, RunnerProcess(
        db_url, sink.url(), "--concurrency", "1", "--batch", "4", "--lease", "3"
    ) as r:
        reclaimed = 0
        while not settled(conn, 4):  # another runner (or pg_cron) reclaiming all the while
            reclaimed += conn.execute("SELECT mailroom.reclaim() AS n").fetchone()["n"]
            time.sleep(0.1)
        assert r.stop() == 0, r.log()
        stats = sink.stats()
    assert reclaimed == 0
    assert statuses(conn) == {"sent": 4}
    assert stats["received"] == 4 and stats["duplicates"] == 0
    outcomes = [r["outcome"] for r in conn.execute("SELECT outcome FROM mailroom.attempts")]
    assert outcomes == ["sent"] * 4
