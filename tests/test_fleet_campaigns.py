"""Fleet campaigns through PL/Proxy (fleet/deploy/campaigns.sql, docs/fleet.md):
one campaign name on every shard, recipients routed to the shard that owns
their address (the routing of mailroom_fleet.enqueue), progress per shard and
in total, pause/resume/cancel on every shard, and re-runs that complete a
call that failed on one shard without mailing anybody twice. Against a real
directory over two cloned shards (tests/fleetkit.py)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from tests.conftest import connect
from tests.fleetkit import build_fleet


@pytest.fixture(scope="module")
def fleet(server_url, template_db):
    with build_fleet(server_url, template_db) as f:
        with f.call() as c:
            shards = c.execute("SELECT shard FROM mailroom_fleet.upsert_template('fleet-news', 'News for {{ name }}',"
                               " 'Hello {{ name }}')").fetchall()
        assert sorted(r["shard"] for r in shards) == sorted(f.names)
        yield f


def _recipients(prefix: str, n: int) -> tuple[list[str], list[str]]:
    return [f"{prefix}-{i}" for i in range(n)], [f"{prefix}{i}@camp.example" for i in range(n)]


def _campaign_mail(fleet, name: str) -> dict[str, list[tuple[str, str]]]:
    """Per shard: (recipient_id, to_address) of every mail of campaign `name`."""
    out = {}
    for shard in fleet.names:
        with fleet.shard(shard) as s:
            out[shard] = sorted((r["recipient_id"], r["to_address"]) for r in s.execute(
                "SELECT c.recipient_id, c.to_address FROM mailroom.contents c"
                " JOIN mailroom.campaigns k ON k.id = c.campaign_id WHERE k.name = %s", (name,)))
    return out


def _enqueue(c, name: str, ids: list[str], emails: list[str], **kw):
    extra = "".join(f", {k} => %({k})s" for k in kw)
    return c.execute(f"SELECT * FROM mailroom_fleet.enqueue_campaign(%(name)s, 'fleet-news', %(ids)s, %(emails)s,"
                     f" p_recipient_vars => %(vars)s{extra})",
                     {"name": name, "ids": ids, "emails": emails,
                      "vars": [psycopg.types.json.Jsonb({"name": i}) for i in ids], **kw}).fetchall()


def test_a_campaign_is_created_on_every_shard_and_each_recipient_lands_where_enqueue_routes_it(fleet):
    name = "fleet spring news"
    with fleet.call() as c:
        created = c.execute("SELECT * FROM mailroom_fleet.create_campaign(%s, 'fleet-news')", (name,)).fetchall()
        assert sorted(r["shard"] for r in created) == sorted(fleet.names)
        assert all(r["campaign_id"] is not None for r in created)
        ids, emails = _recipients("spring", 60)
        landed = _enqueue(c, name, ids, emails)
        assert sum(r["recipients"] for r in landed) == 60
        assert {r["shard"] for r in landed} == set(fleet.names)
        assert {r["shard"]: r["campaign_id"] for r in landed} == {r["shard"]: r["campaign_id"] for r in created}
        # Where mailroom_fleet.enqueue sends each address's other mail.
        routed = {e: c.execute("SELECT shard FROM mailroom_fleet.enqueue(%s, 'hi', 'b')", (e,)).fetchone()["shard"]
                  for e in emails}
    mail = _campaign_mail(fleet, name)
    for shard in fleet.names:
        assert mail[shard] == sorted((i, e) for i, e in zip(ids, emails) if routed[e] == shard), shard

    with fleet.call() as c:
        per_shard = {r["shard"]: r for r in c.execute("SELECT * FROM mailroom_fleet.campaign_progress(%s)", (name,))}
        total = c.execute("SELECT * FROM mailroom_fleet.campaign_total(%s)", (name,)).fetchone()
    assert sorted(per_shard) == sorted(fleet.names)
    for shard in fleet.names:
        assert per_shard[shard]["total"] == len(mail[shard])
        assert per_shard[shard]["queued"] == len(mail[shard]) and per_shard[shard]["status"] == "active"
    assert total["shards"] == 2 and total["shards_with_campaign"] == 2
    assert total["total"] == 60 and total["queued"] == 60 and total["statuses"] == {"active": 2}

    # The same call again adds nobody.
    with fleet.call() as c:
        _enqueue(c, name, ids, emails)
        assert c.execute("SELECT total FROM mailroom_fleet.campaign_total(%s)", (name,)).fetchone()["total"] == 60
    assert _campaign_mail(fleet, name) == mail


def test_a_shard_without_the_campaign_answers_progress_with_nulls(fleet):
    a, b = fleet.names
    with fleet.shard(a) as s:
        s.execute("SELECT mailroom.enqueue_campaign('only on a', 'fleet-news',"
                  " 'SELECT ''x1'' AS recipient_id, ''x1@only.example'' AS email')")
    with fleet.call() as c:
        rows = {r["shard"]: r for r in c.execute("SELECT * FROM mailroom_fleet.campaign_progress('only on a')")}
        total = c.execute("SELECT * FROM mailroom_fleet.campaign_total('only on a')").fetchone()
    assert rows[a]["total"] == 1 and rows[b]["campaign_id"] is None and rows[b]["total"] is None
    assert (total["shards"], total["shards_with_campaign"], total["total"]) == (2, 1, 1)


def _claimable(fleet, shard: str, name: str) -> int:
    with fleet.shard(shard) as s:
        return s.execute("SELECT count(*) AS n FROM mailroom.queue q JOIN mailroom.campaigns k ON k.id = q.campaign_id"
                         " WHERE k.name = %s AND q.status = 'queued'", (name,)).fetchone()["n"]


def test_pause_resume_and_cancel_act_on_every_shard_and_repeat_harmlessly(fleet):
    name = "fleet pause drill"
    ids, emails = _recipients("pause", 30)
    with fleet.call() as c:
        c.execute("SELECT * FROM mailroom_fleet.create_campaign(%s, 'fleet-news')", (name,)).fetchall()
        _enqueue(c, name, ids, emails)
        paused = c.execute("SELECT * FROM mailroom_fleet.pause_campaign(%s)", (name,)).fetchall()
        assert {r["shard"]: r["was"] for r in paused} == {n: "active" for n in fleet.names}
        assert sum(r["moved"] for r in paused) == 30
        assert all(_claimable(fleet, n, name) == 0 for n in fleet.names)
        again = c.execute("SELECT * FROM mailroom_fleet.pause_campaign(%s)", (name,)).fetchall()
        assert {r["shard"]: (r["was"], r["moved"]) for r in again} == {n: ("paused", 0) for n in fleet.names}
        assert c.execute("SELECT statuses FROM mailroom_fleet.campaign_total(%s)", (name,)
                         ).fetchone()["statuses"] == {"paused": 2}

        resumed = c.execute("SELECT * FROM mailroom_fleet.resume_campaign(%s)", (name,)).fetchall()
        assert sum(r["moved"] for r in resumed) == 30
        assert sum(_claimable(fleet, n, name) for n in fleet.names) == 30
        assert all(r["moved"] == 0 for r in c.execute("SELECT * FROM mailroom_fleet.resume_campaign(%s)", (name,)))

        cancelled = c.execute("SELECT * FROM mailroom_fleet.cancel_campaign(%s)", (name,)).fetchall()
        assert {r["was"] for r in cancelled} == {"active"}
        assert all(_claimable(fleet, n, name) == 0 for n in fleet.names)
        assert {r["was"] for r in c.execute("SELECT * FROM mailroom_fleet.cancel_campaign(%s)", (name,))} == {"cancelled"}
        total = c.execute("SELECT * FROM mailroom_fleet.campaign_total(%s)", (name,)).fetchone()
        assert total["statuses"] == {"cancelled": 2} and total["cancelled"] == 30 and total["queued"] == 0

        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT * FROM mailroom_fleet.pause_campaign('no such fleet campaign')")
        assert e.value.sqlstate == "22023" and "no shard has a campaign named" in str(e.value)


def test_an_enqueue_that_failed_on_one_shard_is_completed_by_running_it_again(fleet):
    """No transaction spans the shards: a shard that refuses the write (it went
    read-only) fails the call while the other may have committed its part.
    The same call again queues the missing part and nobody twice."""
    up, down = fleet.names
    name = "fleet rerun"
    ids, emails = _recipients("rerun", 40)
    with fleet.call() as c:
        c.execute("SELECT * FROM mailroom_fleet.create_campaign(%s, 'fleet-news')", (name,)).fetchall()
    with connect(fleet.directory) as d:
        d.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(sql.Identifier(down)))
    try:
        with fleet.call() as c, pytest.raises(psycopg.Error) as e:
            _enqueue(c, name, ids, emails)
        assert e.value.sqlstate == "25006" and f"[{down}]" in str(e.value), str(e.value)
        first = _campaign_mail(fleet, name)
        assert first[down] == []
    finally:
        with connect(fleet.directory) as d:
            d.execute(sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(sql.Identifier(down)))
    with fleet.call() as c:
        _enqueue(c, name, ids, emails)
        _enqueue(c, name, ids, emails)
        total = c.execute("SELECT * FROM mailroom_fleet.campaign_total(%s)", (name,)).fetchone()
    mail = _campaign_mail(fleet, name)
    assert total["total"] == 40
    assert sorted(i for shard in fleet.names for i, _ in mail[shard]) == sorted(ids)   # each once, fleet-wide
    assert first[up] in ([], mail[up])


def test_bad_input_is_refused_naming_the_field_and_writes_nothing(fleet):
    name = "fleet bad input"
    with fleet.call() as c:
        for args, fragment in (
            ((["a", "b"], ["a@bad.example"]), "one element per recipient id"),
            ((None, ["a@bad.example"]), "p_recipient_ids and p_emails are required"),
            ((["a"], ["not an address"]), "mailroom_fleet: address:"),
            ((["a"], [None]), "mailroom_fleet: address:"),
        ):
            with pytest.raises(psycopg.Error) as e:
                c.execute("SELECT * FROM mailroom_fleet.enqueue_campaign(%s, 'fleet-news', %s, %s)", (name, *args))
            assert e.value.sqlstate == "22023" and fragment in str(e.value), (args, str(e.value))
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT * FROM mailroom_fleet.create_campaign(%s, 'no-such-template')", (name,))
        assert e.value.sqlstate == "22023" and "template" in str(e.value)
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT * FROM mailroom_fleet.enqueue_campaign(%s, 'fleet-news', ARRAY['a'], ARRAY['a@bad.example'],"
                      " p_time_zones => ARRAY['Mars/Olympus'])", (name,))
        assert e.value.sqlstate == "22023" and "time_zone" in str(e.value)
    assert _campaign_mail(fleet, name) == {n: [] for n in fleet.names}


def test_campaign_functions_are_for_the_fleet_roles_only(fleet):
    with connect(fleet.directory) as d:
        d.execute("CREATE ROLE fleet_campaign_stranger LOGIN")
    try:
        for call in ("SELECT * FROM mailroom_fleet.create_campaign('x', 'fleet-news')",
                     "SELECT * FROM mailroom_fleet.enqueue_campaign('x', 'fleet-news', ARRAY['a'], ARRAY['a@b.example'])",
                     "SELECT * FROM mailroom_fleet.campaign_total('x')", "SELECT * FROM mailroom_fleet.pause_campaign('x')",
                     "SELECT * FROM mailroom_fleet._campaign_control('x', 'cancel')"):
            with connect(fleet.directory, user="fleet_campaign_stranger") as c, pytest.raises(psycopg.Error) as e:
                c.execute(call)
            assert e.value.sqlstate == "42501", call
    finally:
        with connect(fleet.directory) as d:
            d.execute("DROP ROLE fleet_campaign_stranger")
