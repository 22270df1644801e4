"""The event feed (deploy/event_feed.sql): what each outcome writes, in order,
the cursor that skips nothing when transactions commit out of order, the
filters, bad input, retention and who may read it."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.conftest import connect
from tests.operatorkit import as_user
from tests.runnerkit import enqueue, wait_for


def read_all(conn, cursor=None, **filters):
    """Every event events_since hands out after `cursor`, page by page; (events, last cursor)."""
    out = []
    while True:
        rows = conn.execute(
            "SELECT * FROM mailroom.events_since(%(c)s, 2, %(stream)s, %(campaign)s, %(sender)s, %(kinds)s)",
            {"c": cursor, "stream": filters.get("stream"), "campaign": filters.get("campaign"),
             "sender": filters.get("sender"), "kinds": filters.get("kinds")}).fetchall()
        if not rows:
            return out, cursor
        out.extend(rows)
        cursor = rows[-1]["cursor"]


def read_until(conn, done, cursor=None, **filters):
    """Read the feed until done(events) holds: events_since hands out nothing
    newer than the oldest transaction open anywhere in the cluster, and other
    tests' transactions come and go meanwhile."""
    out = []

    def caught_up():
        nonlocal cursor
        more, cursor = read_all(conn, cursor, **filters)
        out.extend(more)
        return done(out)

    wait_for(caught_up, timeout=120, interval=0.2, what="the feed to hand out the events")
    return out, cursor


def claim(conn, n=10):
    return conn.execute("SELECT id, lease_token FROM mailroom.claim_batch('feed-test', %s, '5 minutes')",
                        (n,)).fetchall()


def report(conn, results):
    conn.execute("SELECT mailroom.mark_outcomes(%s::jsonb)", (json.dumps(results),))


def test_transactions_committing_out_of_order_are_not_skipped(db_url, conn):
    """A takes the first event id and commits last: a reader that took
    id > last seen would pass over A's event for good (checked once against
    a naive `id > cursor` body of events_since: this test failed)."""
    first, second = connect(db_url), connect(db_url)
    try:
        first.execute("BEGIN")
        first.execute("SELECT mailroom.suppress('early@example.com', 'manual', 'first')")
        second.execute("SELECT mailroom.suppress('late@example.com', 'manual', 'second')")  # commits now
        seen, cursor = read_all(conn)
        first.execute("COMMIT")
        more, cursor = read_until(conn, lambda events: len(events) >= 2, cursor)
    finally:
        first.close()
        second.close()
    addresses = [e["address"] for e in seen + more]
    assert sorted(addresses) == ["early@example.com", "late@example.com"]
    assert len(addresses) == 2  # each once
    # While the first was open, nothing after it was handed out.
    assert seen == []
    assert [e["address"] for e in more] == ["early@example.com", "late@example.com"]


def test_each_outcome_writes_its_event_in_order(conn):
    ids = {name: enqueue(conn, f"{name}@example.com", subject="s", body_text="b", max_attempts=3)
           for name in ("sent", "deferred", "bounced")}
    leases = {r["id"]: r["lease_token"] for r in claim(conn)}
    report(conn, [
        {"id": ids["sent"], "token": str(leases[ids["sent"]]), "outcome": "sent", "smtp_code": 250},
        {"id": ids["deferred"], "token": str(leases[ids["deferred"]]), "outcome": "retry", "smtp_code": 451,
         "smtp_enhanced": "4.7.1", "detail": "try later"},
        {"id": ids["bounced"], "token": str(leases[ids["bounced"]]), "outcome": "failed", "smtp_code": 550,
         "smtp_enhanced": "5.1.1", "detail": "no such user"},
    ])
    conn.execute("SELECT mailroom.record_feedback('complaint', %s, NULL, NULL, 'abuse', 'arf', 'c-1')", (ids["sent"],))
    cancelled = enqueue(conn, "cancelled@example.com", subject="s", body_text="b")
    conn.execute("SELECT mailroom.cancel(ARRAY[%s]::bigint[], 'changed my mind')", (cancelled,))
    events, _ = read_until(conn, lambda events: any(e["kind"] == "cancelled" for e in events))
    kinds = [(e["kind"], e["address"]) for e in events]
    assert ("sent", "sent@example.com") in kinds
    assert ("deferred", "deferred@example.com") in kinds
    assert ("bounced", "bounced@example.com") in kinds
    assert ("complained", "sent@example.com") in kinds
    assert ("cancelled", "cancelled@example.com") in kinds
    # The complaint suppresses the address for the mail's stream: its own event.
    assert ("suppressed", "sent@example.com") in kinds
    # Feed order follows the order of the transactions here.
    assert kinds.index(("sent", "sent@example.com")) < kinds.index(("complained", "sent@example.com"))
    assert kinds.index(("complained", "sent@example.com")) < kinds.index(("cancelled", "cancelled@example.com"))
    bounced = next(e for e in events if e["kind"] == "bounced")
    assert (bounced["smtp_code"], bounced["smtp_enhanced"], bounced["detail"]) == (550, "5.1.1", "no such user")
    assert bounced["message_id"] == ids["bounced"] and bounced["stream"] == "transactional"
    deferred = next(e for e in events if e["kind"] == "deferred")
    assert deferred["attempt"] == 1 and deferred["smtp_code"] == 451
    # Cursors strictly increase and are unique.
    assert len({e["cursor"] for e in events}) == len(events)


def test_unsubscribe_and_filters(conn):
    enqueue(conn, "one@example.com", subject="s", body_text="b", sender="default")
    conn.execute("SELECT mailroom.unsubscribe('u@example.com', 'broadcast', NULL, 'link')")
    conn.execute("SELECT mailroom.cancel(ARRAY(SELECT id FROM mailroom.contents), 'x')")
    events, _ = read_until(conn, lambda events: any(e["kind"] == "cancelled" for e in events))
    assert [(e["kind"], e["stream"]) for e in events if e["address"] == "u@example.com"] == [("unsubscribed", "broadcast")]
    only_cancelled, _ = read_all(conn, kinds=["cancelled"])
    assert [e["kind"] for e in only_cancelled] == ["cancelled"]
    broadcast, _ = read_all(conn, stream="broadcast")
    assert [e["address"] for e in broadcast] == ["u@example.com"]
    assert read_all(conn, sender="nobody")[0] == []
    assert read_all(conn, campaign=123456)[0] == []
    # events_head: from now on only.
    head = conn.execute("SELECT mailroom.events_head() AS h").fetchone()["h"]
    assert read_all(conn, head)[0] == []
    conn.execute("SELECT mailroom.suppress('after@example.com')")
    after, _ = read_until(conn, lambda events: len(events) >= 1, head)
    assert [e["address"] for e in after] == ["after@example.com"]


@pytest.mark.parametrize("call, message", [
    ("SELECT * FROM mailroom.events_since('12')", 'mailroom: cursor: must be a cursor events_since returned'),
    ("SELECT * FROM mailroom.events_since(NULL, 0)", 'mailroom: limit:'),
    ("SELECT * FROM mailroom.events_since(NULL, 10001)", 'mailroom: limit:'),
    ("SELECT * FROM mailroom.events_since(NULL, 10, p_kinds => ARRAY['delivered'])",
     'mailroom: kinds: unknown event kind "delivered"'),
])
def test_bad_input_is_refused(conn, call, message):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
        conn.execute(call)


def test_prune_events_retires_old_events_in_batches(conn):
    for i in range(7):
        conn.execute("SELECT mailroom.suppress(%s)", (f"p{i}@example.com",))
    kept = conn.execute("SELECT * FROM mailroom._prune_events(3, now())").fetchone()
    assert kept["events"] == 0
    later = conn.execute("SELECT * FROM mailroom._prune_events(3, now() + interval '31 days')").fetchone()
    assert later["events"] == 7 and later["batches"] == 3 and later["more"] is False
    assert conn.execute("SELECT count(*) AS n FROM mailroom.events").fetchone()["n"] == 0
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="event_retention: must be between 1 day"):
        conn.execute("SELECT mailroom.set_setting('event_retention', '1 hour')")


def test_applications_read_the_feed_not_the_table(db_url, conn):
    conn.execute("SELECT mailroom.suppress('g@example.com')")
    conn.execute("DROP ROLE IF EXISTS feed_app; CREATE ROLE feed_app LOGIN IN ROLE mailroom_app")
    try:
        with connect(as_user(db_url, "feed_app")) as app:
            assert [e["address"] for e in read_until(app, lambda events: len(events) >= 1)[0]] == ["g@example.com"]
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                app.execute("SELECT * FROM mailroom.events")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                app.execute("SELECT mailroom.prune_events()")
    finally:
        conn.execute("DROP OWNED BY feed_app; DROP ROLE feed_app")
