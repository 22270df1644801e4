"""prune_events and the webhook endpoints' cursors (docs/events.md,
Retention): events an active endpoint has not had yet outlive
event_retention up to event_retention_max; a paused endpoint holds nothing,
and what an endpoint has had goes at event_retention as before."""

from __future__ import annotations

import psycopg
import pytest

from tests.runnerkit import wait_for

LATER = "now() + interval '31 days'"      # past event_retention (30 days)
MUCH_LATER = "now() + interval '61 days'"  # past event_retention_max (60 days)


def suppress(conn, *addresses: str) -> None:
    for a in addresses:
        conn.execute("SELECT mailroom.suppress(%s)", (a,))


def prune(conn, at: str) -> int:
    return conn.execute(f"SELECT * FROM mailroom._prune_events(100, {at})").fetchone()["events"]


def kept(conn) -> list[str]:
    return [r["address"] for r in conn.execute("SELECT address FROM mailroom.events ORDER BY xid, id")]


def endpoint(conn, name: str = "behind") -> None:
    conn.execute("SELECT mailroom.webhook_endpoint_set(%s, 'https://127.0.0.1:9/hook', 'hooks', p_from_start => true)",
                 (name,))


def test_an_active_endpoint_behind_keeps_its_events_through_a_prune(conn):
    suppress(conn, "a@example.com", "b@example.com")
    endpoint(conn)
    assert prune(conn, LATER) == 0
    assert kept(conn) == ["a@example.com", "b@example.com"]
    # Not forever: at event_retention_max they go, the endpoint still behind.
    assert prune(conn, MUCH_LATER) == 2
    assert kept(conn) == []


def test_a_paused_endpoint_does_not_hold_the_feed(conn):
    suppress(conn, "c@example.com")
    endpoint(conn)
    conn.execute("SELECT mailroom.webhook_endpoint_pause('behind')")
    assert prune(conn, LATER) == 1
    assert kept(conn) == []


def test_what_an_endpoint_has_had_goes_at_event_retention(conn):
    suppress(conn, "d@example.com", "e@example.com")
    endpoint(conn)

    def claimed():
        return conn.execute("SELECT * FROM mailroom.webhook_claim('w1', ARRAY['hooks'], 1, 1)").fetchone()

    # The feed hands an event out once no older transaction is open
    # anywhere in the cluster: claim until it does.
    batch = wait_for(claimed, timeout=60, what="the first event handed out")
    assert [e["address"] for e in batch["events"]] == ["d@example.com"]
    assert conn.execute("SELECT mailroom.webhook_report('behind', %s, %s, 1) AS s",
                        (batch["lease_token"], batch["batch_end"])).fetchone()["s"] == "active"
    assert prune(conn, LATER) == 1
    assert kept(conn) == ["e@example.com"]


def test_event_retention_max_is_a_checked_setting(conn):
    conn.execute("SELECT mailroom.set_setting('event_retention_max', '90 days')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="event_retention_max: must be between 1 day"):
        conn.execute("SELECT mailroom.set_setting('event_retention_max', '2 hours')")
