"""Issue 32, item 3: a claim never waits for a lock an application (or an
operator) can hold.

Mail of a paused campaign that came back to 'queued' (here: a runner
released it after the pause) sits at the head of the claim index. An
application transaction that holds the campaign's row (pause_campaign on
the already paused campaign, or resume_campaign, not committed yet) made
every claim wait in the gate's re-check of the pause (_claim_refused's FOR
SHARE) while it held the leases of the rest of its batch; under the
runner's lock_timeout every claim failed, and the next one met the same
mail first. An operator's uncommitted resume_sender did the same for a
paused sender's mail.

Each test holds the row in connection A and claims from connection B with
a lock_timeout, so a wait shows up as an error (LockNotAvailable), never as
elapsed time. On the v0.4.0 claim_batch (checked once by reverting the
change to @v0.4.0 and running this file) each claim raised
LockNotAvailable; now it returns the unrelated due mail at once, and the
held mail is gated by a claim once the row is free.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.conftest import connect

UNRELATED = ["tx1@example.net", "tx2@example.net", "tx3@example.net"]


def as_role(conn, role: str, query: str, params: tuple = ()) -> list[dict]:
    conn.execute(f"SET ROLE {role}")
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.execute("RESET ROLE")


def claim_now(conn, worker: str, limit: int = 10) -> list[dict]:
    return as_role(conn, "mailroom_runner",
                   "SELECT id, lease_token, to_address FROM mailroom.claim_batch(%s, %s)", (worker, limit))


def claim_later(conn, worker: str, seconds: int) -> list[dict]:
    """A claim at a later clock (owner-only twin): past the re-check delay."""
    return conn.execute(
        "SELECT id, to_address FROM mailroom._claim_batch(%s, 10, interval '5 minutes', NULL,"
        " now() + make_interval(secs => %s))", (worker, seconds)).fetchall()


def queue_of(conn, ids: list[int]) -> dict[int, str]:
    return {r["id"]: r["status"] for r in conn.execute(
        "SELECT id, status FROM mailroom.queue WHERE id = ANY(%s)", (ids,)).fetchall()}


def release(conn, leased_ids: list[int], token) -> None:
    as_role(conn, "mailroom_runner", "SELECT mailroom.release(%s, %s)", (leased_ids, token))
    # Oldest of all due mail: the head of the claim index.
    conn.execute("UPDATE mailroom.queue SET run_at = now() - interval '2 hours' WHERE id = ANY(%s)", (leased_ids,))


def enqueue_unrelated(conn) -> None:
    for to in UNRELATED:
        as_role(conn, "mailroom_app", "SELECT mailroom.enqueue(%s, 'Hi', 'Body')", (to,))


@pytest.fixture
def paused_campaign_mail_queued(conn):
    """The campaign paused (committed), its mail back in 'queued' at the head of the index."""
    conn.execute("SELECT mailroom.upsert_template('news', 'News', 'Hello')")
    [campaign] = as_role(conn, "mailroom_app",
                         "SELECT mailroom.enqueue_campaign('spring', 'news',"
                         " 'SELECT g AS recipient_id, ''c'' || g || ''@example.org'' AS email FROM generate_series(1, 3) g',"
                         " p_send_at => now() - interval '1 hour') AS id")
    leased = claim_now(conn, "runner-x")
    assert len(leased) == 3
    as_role(conn, "mailroom_app", "SELECT mailroom.pause_campaign(%s)", (campaign["id"],))
    ids = [r["id"] for r in leased]
    release(conn, ids, leased[0]["lease_token"])
    assert set(queue_of(conn, ids).values()) == {"queued"}
    enqueue_unrelated(conn)
    return campaign["id"], ids


@pytest.mark.parametrize("holder", ["pause_campaign", "resume_campaign"])
def test_a_claim_does_not_wait_for_an_open_transaction_on_a_paused_campaign(
        db_url, conn, paused_campaign_mail_queued, holder):
    campaign, campaign_mail = paused_campaign_mail_queued
    with connect(db_url) as a, connect(db_url) as b:
        a.execute("BEGIN")
        a.execute("SET LOCAL ROLE mailroom_app")
        a.execute(f"SELECT mailroom.{holder}(%s)", (campaign,))   # holds the campaign's row, not committed
        b.execute("SET lock_timeout = '200ms'")
        try:
            first = claim_now(b, "runner-b")
        except psycopg.errors.LockNotAvailable as e:
            pytest.fail(f"the claim waited for the application's open {holder} (lock_timeout): {e}")
        assert sorted(r["to_address"] for r in first) == UNRELATED, \
            "the unrelated due mail goes out; the paused campaign's mail does not"
        # A second claim meanwhile neither waits nor meets the held mail first.
        assert claim_now(b, "runner-c") == []
        assert set(queue_of(conn, campaign_mail).values()) == {"queued"}, \
            "mail whose pause could not be confirmed stays queued, for a later claim to gate"
        a.execute("COMMIT")
    later = claim_later(conn, "runner-d", 60)
    if holder == "pause_campaign":
        assert later == []
        assert set(queue_of(conn, campaign_mail).values()) == {"paused"}, "gated once the row was free"
    else:
        assert sorted(r["id"] for r in later) == sorted(campaign_mail), "resumed: claimed once the row was free"
    assert conn.execute("SELECT count(*) AS n FROM mailroom.integrity_problems()").fetchone()["n"] == 0


def test_a_claim_does_not_wait_for_an_open_resume_sender(db_url, conn):
    conn.execute("SELECT mailroom.upsert_template('news', 'News', 'Hello')")
    for to in ("s1@example.org", "s2@example.org"):
        as_role(conn, "mailroom_app", "SELECT mailroom.enqueue(%s, 'Hi', 'Body', p_sender => 'bulk')", (to,))
    conn.execute("UPDATE mailroom.queue SET run_at = now() - interval '2 hours'")
    conn.execute("INSERT INTO mailroom.sender_pauses (sender, reason) VALUES ('bulk', 'test')")
    enqueue_unrelated(conn)
    with connect(db_url) as a, connect(db_url) as b:
        a.execute("BEGIN")
        a.execute("SET LOCAL ROLE mailroom_operator")
        a.execute("SELECT mailroom.resume_sender('bulk')")       # deletes the pause row, not committed
        b.execute("SET lock_timeout = '200ms'")
        try:
            first = claim_now(b, "runner-b")
        except psycopg.errors.LockNotAvailable as e:
            pytest.fail(f"the claim waited for the operator's open resume_sender (lock_timeout): {e}")
        assert sorted(r["to_address"] for r in first) == UNRELATED
        a.execute("COMMIT")
    later = claim_later(conn, "runner-d", 60)
    assert sorted(r["to_address"] for r in later) == ["s1@example.org", "s2@example.org"], \
        "resumed: the sender's mail was left queued, not parked behind the resume"
    assert conn.execute("SELECT count(*) AS n FROM mailroom.integrity_problems()").fetchone()["n"] == 0
