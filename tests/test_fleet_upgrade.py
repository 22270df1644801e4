"""The fleet directory's upgrade from v0.5.0, the last release, with state in
it and mail queued through it: deploy the fleet plan to @v0.5.0 over two
shards, set a fleet domain limit, run a campaign by name, enqueue routed
mail and sync a suppression, then deploy HEAD: every call answers as before,
the sync goes on from its cursors (only the new suppression is copied), and
reverting to @v0.5.0 keeps it all."""

from __future__ import annotations

import pytest

from tests.fleetkit import build_fleet, fleet_sqitch
from tests.runnerkit import wait_for

RELEASE = "@v0.5.0"
DOMAIN = "upgrade.example"


@pytest.fixture
def fleet(server_url, template_db):
    with build_fleet(server_url, template_db, deploy_to=RELEASE) as f:
        yield f


def target_of(fleet) -> str:
    return "db:pg:" + fleet.directory.split(":", 1)[1]


def state(fleet) -> dict:
    """What the directory answers about the fleet, in a comparable form."""
    with fleet.call() as c:
        return {
            "limits": sorted((r["domain"], r["shard"], r["per_second"], r["per_minute"]) for r in
                             c.execute("SELECT * FROM mailroom_fleet.list_domain_limits()")),
            "campaign": c.execute("SELECT shards, shards_with_campaign, statuses, total, queued, sent"
                                  " FROM mailroom_fleet.campaign_total('upgrade news')").fetchone(),
            "routed": c.execute("SELECT count(*) AS n FROM mailroom_fleet.inspect('routed-1')").fetchone()["n"],
            "stats": sorted((r["shard"], r["answered"]) for r in
                            c.execute("SELECT * FROM mailroom_fleet.shard_status()")),
            "cursors": c.execute("SELECT source, target, after_xid::text, after_key, copied"
                                 " FROM mailroom_fleet.suppression_cursors ORDER BY 1, 2").fetchall(),
        }


def sync(fleet) -> None:
    with fleet.call() as c:
        assert all(r["reached"] and r["error"] is None
                   for r in c.execute("SELECT * FROM mailroom_fleet.sync_suppressions()"))


def sync_until_everywhere(fleet, address: str) -> None:
    """Sync until the address is suppressed on every shard (a row is handed
    out once every transaction open in its cluster when it was written has
    ended: other tests' transactions can hold it back)."""
    def arrived():
        sync(fleet)
        return suppressed_everywhere(fleet, address)
    wait_for(arrived, timeout=60, interval=0.5, what=f"{address} suppressed on every shard")


def copies_written(fleet) -> list[tuple[str, str]]:
    """(shard, address) of every suppression a sync wrote, over all shards."""
    rows = []
    for name in fleet.names:
        with fleet.shard(name) as s:
            rows += [(name, r["address_key"]) for r in s.execute(
                "SELECT address_key FROM mailroom.suppressions WHERE source LIKE 'fleet copy from %'")]
    return sorted(rows)


def suppressed_everywhere(fleet, address: str) -> bool:
    counts = []
    for name in fleet.names:
        with fleet.shard(name) as s:
            counts.append(s.execute("SELECT count(*) AS n FROM mailroom.suppressions WHERE address_key = %s",
                                    (address,)).fetchone()["n"])
    return counts == [1] * len(fleet.names)


def test_the_directory_upgrades_from_v050_and_reverts_with_its_state(fleet):
    a, b = fleet.names
    with fleet.call() as c:
        c.execute("SELECT * FROM mailroom_fleet.set_domain_limit(%s, 100, NULL)", (DOMAIN,)).fetchall()
        c.execute("SELECT * FROM mailroom_fleet.upsert_template('upgrade-news', 'News', 'Hello')").fetchall()
        c.execute("SELECT * FROM mailroom_fleet.create_campaign('upgrade news', 'upgrade-news')").fetchall()
        emails = [f"r{i}@{DOMAIN}" for i in range(40)]
        c.execute("SELECT * FROM mailroom_fleet.enqueue_campaign('upgrade news', 'upgrade-news', %s, %s)",
                  ([f"r{i}" for i in range(40)], emails)).fetchall()
        c.execute("SELECT * FROM mailroom_fleet.enqueue('someone@upgrade.example', 'hi', 'body',"
                  " p_delivery_key => 'routed-1')").fetchall()
    with fleet.shard(a) as s:
        s.execute("SELECT mailroom.suppress('bounced@upgrade.example', 'hard_bounce', 'smtp 550')")
    sync_until_everywhere(fleet, "bounced@upgrade.example")
    before = state(fleet)
    assert before["campaign"]["total"] == 40 and before["routed"] == 1
    assert before["stats"] == sorted([(a, True), (b, True)])
    assert len(before["limits"]) == 2 and before["cursors"]

    fleet_sqitch(target_of(fleet), "deploy")

    assert state(fleet) == before
    with fleet.shard(b) as s:
        s.execute("SELECT mailroom.suppress('complained@upgrade.example', 'complaint', 'arf')")
    sync_until_everywhere(fleet, "complained@upgrade.example")
    # From the cursors the release left: each suppression copied once, to the other shard.
    assert copies_written(fleet) == sorted([(b, "bounced@upgrade.example"), (a, "complained@upgrade.example")])
    assert suppressed_everywhere(fleet, "bounced@upgrade.example")
    assert suppressed_everywhere(fleet, "complained@upgrade.example")
    with fleet.call() as c:
        c.execute("SELECT * FROM mailroom_fleet.pause_campaign('upgrade news')").fetchall()
        assert c.execute("SELECT statuses FROM mailroom_fleet.campaign_total('upgrade news')"
                         ).fetchone()["statuses"] == {"paused": 2}

    fleet_sqitch(target_of(fleet), "revert", "-y", "--to", RELEASE)
    after_revert = state(fleet)
    assert after_revert["limits"] == before["limits"] and after_revert["routed"] == 1
    assert after_revert["campaign"]["statuses"] == {"paused": 2}
    sync(fleet)
    assert len(copies_written(fleet)) == 2
    fleet_sqitch(target_of(fleet), "deploy")
