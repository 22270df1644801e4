"""The runner's outcome writer against the real database (in-process, no SMTP)."""

from __future__ import annotations

from mailroom.runner import Batch, Job, Runner, Settings
from mailroom.transport import Outcome
from tests.runnerkit import enqueue


def test_same_message_twice_in_the_buffer_is_written_in_two_calls(db_url, conn):
    """Claimed, lease lost during an outage, claimed again: both reports reach the ledger."""
    mid = enqueue(conn, "twice@example.com", subject="s", body_text="b")
    first = conn.execute("SELECT * FROM mailroom.claim_batch('w', 1, '1 second')").fetchone()
    assert conn.execute("SELECT mailroom.reclaim(now() + interval '1 minute') AS n").fetchone()["n"] == 1
    second = conn.execute("SELECT * FROM mailroom.claim_batch('w', 1, '5 minutes', NULL,"
                          " now() + interval '1 minute')").fetchone()
    assert first["id"] == second["id"] == mid and first["lease_token"] != second["lease_token"]

    runner = Runner(Settings(dsn=db_url, smtp="null://"))
    runner.open()
    try:
        items = []
        for row in (first, second):
            batch = Batch(row["lease_token"], 300, {mid}, set(), {mid})
            items.append((Job(dict(row), batch), Outcome("sent", 250, "2.0.0", "data: 250 ok")))
        written, ok, error = runner._write_outcomes(items)
    finally:
        runner.close()
    assert ok and error is None and len(written) == 2
    ledger = conn.execute(
        "SELECT attempt, outcome, reported, duplicate FROM mailroom.attempts ORDER BY id").fetchall()
    # The late report of the lost lease is kept (stale), and the second send is
    # flagged as a duplicate: visible, not silent.
    assert [(a["attempt"], a["outcome"], a["reported"], a["duplicate"]) for a in ledger] == [
        (1, "stale", "sent", False), (2, "sent", "sent", True)]
    assert conn.execute("SELECT status FROM mailroom.messages").fetchone()["status"] == "sent"


def test_an_outcome_the_database_rejects_is_dropped_not_retried_for_ever(db_url, conn):
    mid = enqueue(conn, "x@example.com", subject="s", body_text="b")
    row = conn.execute("SELECT * FROM mailroom.claim_batch('w', 1, '5 minutes')").fetchone()
    runner = Runner(Settings(dsn=db_url, smtp="null://"))
    runner.open()
    try:
        batch = Batch(row["lease_token"], 300, {mid}, set(), {mid})
        good = (Job(dict(row), batch), Outcome("sent", 250))
        bad_row = {**dict(row), "id": mid + 1000}
        bad = (Job(bad_row, batch), Outcome("bogus"))  # an outcome the SQL refuses (22023)
        written, ok, _ = runner._write_outcomes([bad, good])
    finally:
        runner.close()
    assert ok and len(written) == 2  # the bad one logged and dropped, the good one written
    assert conn.execute("SELECT status FROM mailroom.messages").fetchone()["status"] == "sent"
