"""Runners the database can see: heartbeat rows written by real `mailroom run`
processes against a real SMTP sink, `mailroom status` reading them, and the
runner's one-a-minute summary line (shortened here with the hidden
--heartbeat-interval and --summary-interval)."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from importlib.metadata import version

import pytest

from mailroom.send.heartbeat import safe_relay_error
from mailroom.dev.sink import Rule, Sink
from mailroom.net import free_port
from tests.operatorkit import run as mailroom
from tests.runnerkit import RunnerProcess, enqueue_many, settled, wait_for

FAST = ("--poll-interval", "0.2", "--concurrency", "4", "--batch", "20", "--heartbeat-interval", "1")


def runner_row(conn, worker: str) -> dict | None:
    return conn.execute("SELECT * FROM mailroom.runner_status WHERE worker = %s", (worker,)).fetchone()


def status_text(db_url: str) -> str:
    code, out, err = mailroom("status", "--dsn", db_url)
    assert code == 0, err
    return out


def test_a_working_runner_reports_what_the_sink_received_and_stops_as_stopped(db_url, conn):
    rules = [Rule(550, "5.1.1 No such user", stage="rcpt", rcpt_contains="nobody")]
    with Sink(rules=rules) as sink:
        enqueue_many(conn, "hb", 25)
        conn.execute("SELECT mailroom.enqueue('nobody@example.com', 'S', 'B', p_delivery_key => 'hb-nobody')")
        with RunnerProcess(db_url, sink.url(), *FAST, "--worker", "hb-1") as r:
            wait_for(lambda: settled(conn, 26), timeout=30, what="all mail settled")
            row = wait_for(lambda: (x := runner_row(conn, "hb-1")) and x["sent"] + x["failed"] == 26 and x,
                           timeout=10, what="the heartbeat to catch up")
            assert sink.received == 25 and sink.rejected[550] == 1
            assert (row["sent"], row["failed"], row["retried"], row["ambiguous"]) == (sink.received, 1, 0, 0)
            assert row["version"] == version("mailroom")
            assert (row["host"], row["pid"], row["concurrency"]) == (socket.gethostname(), r.proc.pid, 4)
            assert row["state"] == "running" and row["alive"] and row["relay_up"]
            assert row["in_flight"] == 0 and row["stopped_at"] is None
            assert row["heartbeat_interval"].total_seconds() == 1

            out = status_text(db_url)
            assert "RUNNERS  1 alive" in out
            line = next(l for l in out.splitlines() if l.startswith("hb-1 "))
            assert version("mailroom") in line and line.rstrip().endswith("up")
            assert "no_live_runner" not in out and "relay_down" not in out
            code, out, err = mailroom("status", "--dsn", db_url, "--json")
            assert code == 0, err
            (live,) = json.loads(out)["runners"]
            assert (live["worker"], live["alive"], live["sent"], live["heartbeat_interval"]) == ("hb-1", True, 25, 1.0)

            assert r.stop() == 0, r.log()
        row = runner_row(conn, "hb-1")
        assert row["state"] == "stopped" and not row["alive"] and row["stopped_at"] is not None
        assert row["sent"] == 25  # the last heartbeat before goodbye
        assert "RUNNERS  0 alive, 1 stopped or lost" in status_text(db_url)


def test_heartbeats_ride_on_flushes_not_on_mails(db_url, conn, server_url):
    """Hundreds of mails and dozens of outcome flushes cost a heartbeat about once a second."""
    db = db_url.rsplit("/", 1)[1]
    conn.execute(f'ALTER DATABASE "{db}" SET track_functions = \'pl\'')
    with Sink() as sink:
        enqueue_many(conn, "rt", 600)
        t0 = time.monotonic()
        with RunnerProcess(db_url, sink.url(), "--poll-interval", "0.2", "--concurrency", "4", "--batch", "20",
                           "--worker", "rt-1") as r:
            wait_for(lambda: settled(conn, 600), timeout=120, what="600 mails sent")
            assert r.stop() == 0, r.log()
        lifetime = time.monotonic() - t0  # the runner's whole life lies within it
    time.sleep(0.7)  # function statistics reach the collector when a backend is idle or gone
    calls = {x["funcname"]: x["calls"] for x in conn.execute(
        "SELECT funcname, calls FROM pg_stat_user_functions WHERE schemaname = 'mailroom'"
        " AND funcname IN ('mark_outcomes', 'runner_heartbeat')")}
    assert sink.received == 600
    assert calls["mark_outcomes"] >= 10, calls
    # one at start, at most one a second while working, one at stop
    assert calls["runner_heartbeat"] <= lifetime + 3, (calls, lifetime)
    assert calls["runner_heartbeat"] < calls["mark_outcomes"] / 2, calls


def test_relay_down_is_in_the_row_and_status_warns(db_url, conn):
    sink = Sink().start()
    try:
        enqueue_many(conn, "up", 2)
        with RunnerProcess(db_url, sink.url(), *FAST, "--worker", "hb-relay") as r:
            wait_for(lambda: settled(conn, 2), timeout=20, what="the first mails")
            wait_for(lambda: (x := runner_row(conn, "hb-relay")) and x["sent"] == 2, timeout=10, what="a heartbeat")
            sink.stop()
            enqueue_many(conn, "down", 3)  # a send is what finds the relay gone
            row = wait_for(lambda: (x := runner_row(conn, "hb-relay")) and not x["relay_up"] and x,
                           timeout=20, what="relay_up false")
            assert row["alive"] and row["relay_down_since"] is not None
            assert "Connection refused" in row["relay_error"], row["relay_error"]

            out = status_text(db_url)
            assert re.search(r"^! relay_down: runner hb-relay on \S+ cannot reach its SMTP relay", out, re.M), out
            assert re.search(r"^hb-relay .* DOWN for \S+$", out, re.M), out
            assert r.stop() == 0, r.log()
    finally:
        if sink.controller.loop.is_running():
            sink.stop()


def test_a_relay_error_never_carries_the_password(db_url, conn):
    port = free_port()  # nothing listens: the relay is down from the start
    secret = "Sup3r-S3cret-pw"
    enqueue_many(conn, "pw", 1)
    with RunnerProcess(db_url, f"smtp://apikey:{secret}@127.0.0.1:{port}", *FAST, "--worker", "hb-pw") as r:
        row = wait_for(lambda: (x := runner_row(conn, "hb-pw")) and not x["relay_up"] and x,
                       timeout=20, what="relay_up false")
        assert row["relay_error"].startswith("connect:"), row
        text = conn.execute("SELECT to_jsonb(r)::text AS t FROM mailroom.runners r").fetchone()["t"]
        assert secret not in text
        assert secret not in status_text(db_url)
        assert r.stop() == 0
        assert secret not in r.log()
    # An error text that quotes a URL is stored with the password masked.
    assert safe_relay_error(f"535 auth failed for smtp://apikey:{secret}@relay:587\r\nmore") == \
        "535 auth failed for smtp://apikey:***@relay:587 more"


def test_no_live_runner_while_mail_is_due_is_a_warning(db_url, conn):
    out = status_text(db_url)
    assert "no_live_runner" not in out  # nothing due: nothing to warn about
    conn.execute("SELECT mailroom.enqueue('later@example.com', 'S', 'B', p_send_at => now() + interval '1 hour')")
    assert "no_live_runner" not in status_text(db_url)

    with Sink() as sink:
        with RunnerProcess(db_url, sink.url(), *FAST, "--worker", "hb-doomed") as r:
            wait_for(lambda: (x := runner_row(conn, "hb-doomed")) and x["alive"], timeout=15, what="a live runner")
            enqueue_many(conn, "due", 2, due_ago="1 minute")
            wait_for(lambda: settled(conn, 2, final=("sent",)), timeout=20, what="the live runner sends")
            r.signal(signal.SIGKILL)  # no goodbye: it turns lost after three intervals
            r.wait()
        enqueue_many(conn, "stranded", 3, due_ago="1 minute")
        row = wait_for(lambda: (x := runner_row(conn, "hb-doomed")) and x["state"] == "lost" and x,
                       timeout=10, what="the killed runner lost")
        assert not row["alive"] and row["stopped_at"] is None
    out = status_text(db_url)
    assert re.search(r"^! no_live_runner: 3 mail\(s\) of sender default are due and no live runner serves it, "
                     r"the oldest waiting for 00:01:\d\d", out, re.M), out


def test_summary_line_while_working_silent_when_idle(db_url, conn):
    with Sink() as sink:
        enqueue_many(conn, "sum", 40)
        with RunnerProcess(db_url, sink.url(), *FAST, "--summary-interval", "1", "--worker", "hb-sum") as r:
            wait_for(lambda: settled(conn, 40), timeout=30, what="40 mails sent")
            lines = wait_for(lambda: [l for l in r.log().splitlines() if "runner.summary" in l]
                             and sum(int(re.search(r" sent=(\d+)", l).group(1))
                                     for l in r.log().splitlines() if "runner.summary" in l) == 40
                             and [l for l in r.log().splitlines() if "runner.summary" in l],
                             timeout=10, what="summary lines adding up to 40 sent")
            assert all(re.search(r"INFO  runner.summary seconds=[\d.]+ sent=\d+ retried=0 failed=0 ambiguous=0 "
                                 r"per_second=[\d.]+ in_flight=\d+ total_sent=\d+ relay=up$", l) for l in lines), lines
            time.sleep(3.5)  # three more summary periods with nothing done
            assert [l for l in r.log().splitlines() if "runner.summary" in l] == lines, "an idle runner logged a summary"
            assert r.stop() == 0
        assert sink.received == 40


def test_default_summary_is_one_a_minute(db_url, conn):
    """Without the hidden option a short burst of work logs no summary line
    until the minute is up (the clean stop logs the last one)."""
    with Sink() as sink:
        enqueue_many(conn, "min", 10)
        with RunnerProcess(db_url, sink.url(), "--poll-interval", "0.2", "--worker", "hb-min") as r:
            wait_for(lambda: settled(conn, 10), timeout=20, what="10 mails sent")
            time.sleep(1.5)
            assert "runner.summary" not in r.log()
            assert r.stop() == 0
            summary = [l for l in r.log().splitlines() if "runner.summary" in l]
            assert len(summary) == 1 and " sent=10 " in summary[0], r.log()
