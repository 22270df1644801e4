"""Issue 13, hole 2, from the write side: a retried campaign or schedule mail
must not escape a pause, a cancel or a deactivation decided while the retry
was in flight.

Each test has two sessions: the runner (A) reports `retry` for a mail it
claimed and has not committed yet; the application (B) pauses or cancels the
campaign, or deactivates the schedule, and commits; then A commits. On v0.3.0
the mail came back as 'queued' (the requeue trigger read the campaign with
A's snapshot) and the next claim handed it out. From v0.4 claim_batch's gate
reads the campaign and schedule for every mail it is about to hand out, so:

- paused: no claim returns the mail while the campaign is paused; after
  resume_campaign the next claim does;
- cancelled: no claim ever returns it, and it finishes as cancelled
  (campaign_cancelled);
- schedule deactivated: no claim returns it, and it finishes as cancelled
  (schedule_inactive).

The calls are the same on v0.3.0 and v0.4 (public signatures without
p_now); only `due_now` (the test's superuser stand-in for "the retry backoff
has passed") knows which table holds run_at. Checked once against a scratch
database deployed with `sqitch deploy --to @v0.3.0`: every test fails there
at the claim that must come back empty.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import connect


def due_now(conn, message_id: int) -> None:
    """Superuser: skip the retry's backoff (run_at now), wherever run_at lives."""
    kind = conn.execute("SELECT relkind FROM pg_class WHERE oid = 'mailroom.messages'::regclass").fetchone()["relkind"]
    table = "mailroom.messages" if kind == "r" else "mailroom.queue"
    conn.execute(f"UPDATE {table} SET run_at = now() - interval '1 second' WHERE id = %s", (message_id,))


def claim(conn, worker: str) -> list[dict]:
    conn.execute("SET ROLE mailroom_runner")
    try:
        return conn.execute("SELECT id, lease_token FROM mailroom.claim_batch(%s, 10)", (worker,)).fetchall()
    finally:
        conn.execute("RESET ROLE")


def status_of(conn, message_id: int) -> tuple[str, str | None]:
    row = conn.execute("SELECT status, status_reason FROM mailroom.messages WHERE id = %s", (message_id,)).fetchone()
    return row["status"], row["status_reason"]


@pytest.fixture
def campaign(conn) -> int:
    """One campaign with one recipient, due now."""
    conn.execute("SELECT mailroom.upsert_template('news', 'News', 'Hello')")
    conn.execute("SET ROLE mailroom_app")
    try:
        return conn.execute(
            "SELECT mailroom.enqueue_campaign('spring', 'news',"
            " 'SELECT 1 AS recipient_id, ''ann@example.org'' AS email', p_send_at => now() - interval '1 minute') AS id"
        ).fetchone()["id"]
    finally:
        conn.execute("RESET ROLE")


def retry_racing(db_url: str, conn, decide_sql: str, params: tuple) -> int:
    """A claims the one due mail and reports retry without committing; B runs
    decide_sql and commits; then A commits. Returns the mail's id."""
    [leased] = claim(conn, "runner-a")
    with connect(db_url) as a, connect(db_url) as b:
        a.execute("BEGIN")
        a.execute("SET LOCAL ROLE mailroom_runner")
        a.execute("SELECT mailroom.mark_outcomes(%s::jsonb)", (json.dumps(
            [{"id": leased["id"], "token": str(leased["lease_token"]), "outcome": "retry"}]),))
        b.execute(decide_sql, params)           # autocommit: committed here, while A is open
        a.execute("COMMIT")
    due_now(conn, leased["id"])
    return leased["id"]


def test_retry_in_flight_does_not_escape_a_pause(db_url, conn, campaign):
    mid = retry_racing(db_url, conn, "SELECT mailroom.pause_campaign(%s)", (campaign,))
    assert claim(conn, "runner-b") == [], "a claim after the pause committed must not hand out the paused campaign's mail"
    assert status_of(conn, mid)[0] in ("queued", "paused")   # parked or still queued: never claimed
    conn.execute("SELECT mailroom.resume_campaign(%s)", (campaign,))
    due_now(conn, mid)
    assert [r["id"] for r in claim(conn, "runner-b")] == [mid], "after resume the mail is claimed"


def test_retry_in_flight_does_not_escape_a_cancel(db_url, conn, campaign):
    mid = retry_racing(db_url, conn, "SELECT mailroom.cancel_campaign(%s)", (campaign,))
    assert claim(conn, "runner-b") == [], "a cancelled campaign's mail is never claimed"
    assert claim(conn, "runner-c") == []
    assert status_of(conn, mid) == ("cancelled", "campaign_cancelled")


def test_retry_in_flight_does_not_escape_a_deactivated_schedule(db_url, conn):
    conn.execute("SELECT mailroom.upsert_template('news', 'News', 'Hello')")
    conn.execute("SET ROLE mailroom_app")
    conn.execute("SELECT mailroom.schedule_upsert('tick:1', 'bob@example.org', '* * * * *', 'UTC', 'news')")
    conn.execute("RESET ROLE")
    assert conn.execute("SELECT mailroom.materialize_schedules() AS n").fetchone()["n"] >= 1
    [first] = conn.execute("SELECT id FROM mailroom.messages WHERE schedule_id IS NOT NULL ORDER BY id LIMIT 1").fetchall()
    # only that one mail is due; later occurrences (if any were materialized) stay in the future
    due_now(conn, first["id"])
    mid = retry_racing(db_url, conn, "SELECT mailroom.schedule_set_active(%s, false)", ("tick:1",))
    assert mid == first["id"]
    assert claim(conn, "runner-b") == [], "an inactive schedule's mail is never claimed"
    assert status_of(conn, mid) == ("cancelled", "schedule_inactive")
