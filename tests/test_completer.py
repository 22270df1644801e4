"""The completer against the real database (in-process, no SMTP): what it
writes, what it drops (only a report the database refuses for its own
input), and that a refused report or release never wedges it."""

from __future__ import annotations

import psycopg_pool
import pytest
from psycopg.rows import dict_row

from mailroom.send.completer import Completer, Report
from mailroom.send.transport import Outcome
from tests.runnerkit import enqueue


@pytest.fixture
def pool(db_url):
    p = psycopg_pool.ConnectionPool(db_url, min_size=1, max_size=2, open=False,
                                    kwargs={"autocommit": True, "row_factory": dict_row})
    p.open(wait=True, timeout=10)
    yield p
    p.close()


def _claim(conn, n: int) -> list[dict]:
    return conn.execute("SELECT * FROM mailroom.claim_batch('w', %s, '5 minutes')", (n,)).fetchall()


def _report(row, outcome="sent", **kw) -> Report:
    return Report(row["id"], row["lease_token"], Outcome(outcome, **kw).as_json())


def test_same_message_twice_in_the_buffer_is_written_in_two_calls(conn, pool):
    """Claimed, lease lost during an outage, claimed again: both reports reach the ledger."""
    mid = enqueue(conn, "twice@example.com", subject="s", body_text="b")
    first = conn.execute("SELECT * FROM mailroom.claim_batch('w', 1, '1 second')").fetchone()
    conn.execute("SELECT pg_sleep(1.1)")
    assert conn.execute("SELECT mailroom.reclaim() AS n").fetchone()["n"] == 1
    second = conn.execute("SELECT * FROM mailroom.claim_batch('w', 1, '5 minutes')").fetchone()
    assert first["id"] == second["id"] == mid and first["lease_token"] != second["lease_token"]

    completer = Completer(pool)
    for row in (first, second):
        completer.report(_report(row, smtp_code=250, smtp_enhanced="2.0.0", detail="data: 250 ok"))
    assert completer.flush() and completer.pending == 0
    ledger = conn.execute(
        "SELECT attempt, outcome, reported, duplicate FROM mailroom.attempts ORDER BY id").fetchall()
    # The late report of the lost lease is kept (stale), and the second send is
    # flagged as a duplicate: visible, not silent.
    assert [(a["attempt"], a["outcome"], a["reported"], a["duplicate"]) for a in ledger] == [
        (1, "stale", "sent", False), (2, "sent", "sent", True)]
    assert conn.execute("SELECT status FROM mailroom.messages").fetchone()["status"] == "sent"


def test_reports_as_the_runner_writes_them_reach_the_ledger_verbatim(conn, pool):
    """The runner's reports are JSON text written around each Outcome's own
    JSON text (Report.json_text, Outcome.as_json_text) with the token as
    text: a reply with quotes, a backslash, a line break and non-ASCII
    arrives in the ledger exactly as the Outcome has it, next to a report
    made from the payload dict alone."""
    for i in range(3):
        enqueue(conn, f"t{i}@example.com", subject="s", body_text="b")
    a, b, c = _claim(conn, 3)
    failed = Outcome("failed", 550, "5.1.1", 'rcpt: "no" such\\user \u00fcn\u00ef \u2709\nnext')
    sent = Outcome("sent", 250, "2.0.0", "data: 250 queued as X1", "X1")
    completer = Completer(pool)
    for row, outcome in ((a, failed), (b, sent)):
        completer.report(Report(row["id"], str(row["lease_token"]), outcome.as_json(),
                                payload_json=outcome.as_json_text()))
    completer.report(_report(c, "retry", detail="data: 451 later"))
    assert completer.flush() and completer.pending == 0
    assert completer.written == {"failed": 1, "sent": 1, "retry": 1}
    ledger = {r["message_id"]: r for r in conn.execute(
        "SELECT message_id, lease_token, outcome, smtp_code, smtp_enhanced, smtp_text, provider_id FROM mailroom.attempts")}
    assert {k: {f: v[f] for f in ("lease_token", "outcome", "smtp_code", "smtp_enhanced", "smtp_text", "provider_id")}
            for k, v in ledger.items()} == {
        a["id"]: {"lease_token": a["lease_token"], "outcome": "failed", "smtp_code": 550, "smtp_enhanced": "5.1.1",
                  "smtp_text": failed.detail, "provider_id": None},
        b["id"]: {"lease_token": b["lease_token"], "outcome": "sent", "smtp_code": 250, "smtp_enhanced": "2.0.0",
                  "smtp_text": "data: 250 queued as X1", "provider_id": "X1"},
        c["id"]: {"lease_token": c["lease_token"], "outcome": "retry", "smtp_code": None, "smtp_enhanced": None,
                  "smtp_text": "data: 451 later", "provider_id": None}}


def test_a_refused_report_is_dropped_alone_and_the_rest_written(conn, pool):
    """One report mark_outcomes refuses (22023: an outcome it does not know)
    among 7: the call is split until it is alone; the other 6 are written."""
    for i in range(7):
        enqueue(conn, f"r{i}@example.com", subject="s", body_text="b")
    rows = _claim(conn, 7)
    completer = Completer(pool)
    for i, row in enumerate(rows):
        completer.report(_report(row, "bogus" if i == 4 else "sent"))
    assert completer.flush() and completer.writable and completer.pending == 0
    assert completer.written == {"sent": 6, "dropped": 1}
    status = {r["id"]: r["status"] for r in conn.execute("SELECT id, status FROM mailroom.messages")}
    assert sorted(status.values()) == ["sending"] + ["sent"] * 6 and status[rows[4]["id"]] == "sending"


def test_a_release_refused_for_good_does_not_wedge_the_completer(conn, pool):
    """A release the database refuses for its input (here a lease token that
    is not a UUID: 22P02) is dropped after it is alone; the releases and
    reports around it are written and the completer can write again (v0.3.0
    put the ids back for ever, and claiming, reclaiming and lease extension
    stopped with it)."""
    for i in range(3):
        enqueue(conn, f"x{i}@example.com", subject="s", body_text="b")
    a, b, c = _claim(conn, 3)
    completer = Completer(pool)
    completer.release("not-a-lease-token", [a["id"]])
    completer.release(b["lease_token"], [b["id"]])
    completer.report(_report(c))
    assert completer.flush() and completer.writable and completer.pending == 0
    assert completer.written == {"sent": 1, "released": 1, "dropped": 1}
    status = {r["id"]: r["status"] for r in conn.execute("SELECT id, status FROM mailroom.messages")}
    # a: its lease expires and reclaim decides; b: back in the queue; c: sent.
    assert (status[a["id"]], status[b["id"]], status[c["id"]]) == ("sending", "queued", "sent")


def test_a_refusal_not_about_the_input_keeps_everything(conn, pool):
    """42883 (the function is missing: runner and schema out of step) is not
    the reports' fault: all are kept, nothing is dropped, and they are written
    once the function is back."""
    for i in range(3):
        enqueue(conn, f"k{i}@example.com", subject="s", body_text="b")
    rows = _claim(conn, 3)
    (sig,) = [r["sig"] for r in conn.execute(
        "SELECT oid::regprocedure::text AS sig FROM pg_proc WHERE proname = 'mark_outcomes'"
        " AND pronamespace = 'mailroom'::regnamespace")]
    completer = Completer(pool, on_flush=lambda c: flushes.append(c.execute("SELECT 1 AS one").fetchone()))
    flushes: list = []
    conn.execute(f"ALTER FUNCTION {sig} RENAME TO mark_outcomes_away")
    try:
        for row in rows:
            completer.report(_report(row))
        assert not completer.flush() and not completer.writable
        assert completer.pending == 3 and "42883" in completer.last_error and not flushes
    finally:
        conn.execute(f"ALTER FUNCTION {sig.replace('mark_outcomes', 'mark_outcomes_away', 1)} RENAME TO mark_outcomes")
    assert completer.flush() and completer.writable and completer.pending == 0
    assert completer.written == {"sent": 3}
    assert flushes == [{"one": 1}]  # on_flush ran once, on the flush that wrote, on its connection
    assert {r["status"] for r in conn.execute("SELECT status FROM mailroom.messages")} == {"sent"}


def test_on_flush_rides_on_writes_and_runs_alone_when_idle(conn, pool):
    """on_flush runs on the flush's own connection after a flush that wrote,
    and, with on_flush_every, by itself while there is nothing to write."""
    import time

    enqueue(conn, "hb@example.com", subject="s", body_text="b")
    (row,) = _claim(conn, 1)
    seen: list = []
    completer = Completer(pool, on_flush=lambda c: seen.append(c.execute("SELECT 1 AS one").fetchone()),
                          on_flush_every=0.3, flush_interval=0.05)
    completer.start()
    try:
        completer.report(_report(row))
        completer.flush_soon()
        deadline = time.monotonic() + 10
        while len(seen) < 3 and time.monotonic() < deadline:  # 1 with the write, then idle ones
            time.sleep(0.05)
    finally:
        completer.stop()
    assert len(seen) >= 3 and completer.written == {"sent": 1}
    assert conn.execute("SELECT status FROM mailroom.messages").fetchone()["status"] == "sent"
