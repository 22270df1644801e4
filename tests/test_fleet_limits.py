"""A domain send limit that holds across the fleet (fleet/deploy/domain_limits.sql,
docs/fleet.md "Fleet domain limits"), against the real thing: two shards cloned
from the test template under a directory with PL/Proxy (tests/fleetkit.py),
each shard enforcing its share in mailroom.domain_limits at claim time.

What is guaranteed and checked here: the shares set on the shards and the
ceilings that bound them add up to no more than the fleet limit after every
call, whatever the shards answer; shares follow each shard's due mail; a
shard without demand keeps the floor; a raise never lands before a window
after the last lower."""

from __future__ import annotations

import uuid
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from tests.conftest import connect
from tests.fleetkit import build_fleet, fleet_sqitch
from tests.runnerkit import enqueue, wait_for


@pytest.fixture(scope="module")
def fleet(server_url, template_db):
    with build_fleet(server_url, template_db) as f:
        yield f


def _domain() -> str:
    return f"d{uuid.uuid4().hex[:10]}.example"


def _enqueue_to(fleet, name: str, domain: str, n: int) -> None:
    with fleet.shard(name) as s:
        for i in range(n):
            enqueue(s, f"u{i}-{uuid.uuid4().hex[:6]}@{domain}", subject="s", body_text="b")


def _shard_limits(fleet, domain: str) -> dict[str, tuple]:
    """What each shard enforces for the domain now (None: no row of its own)."""
    out = {}
    for name in fleet.names:
        with fleet.shard(name) as s:
            row = s.execute("SELECT max_per_second, max_per_minute FROM mailroom.domain_limits WHERE domain = %s",
                            (domain,)).fetchone()
        out[name] = (row["max_per_second"], row["max_per_minute"]) if row else None
    return out


def _ceilings(fleet, domain: str) -> dict[str, tuple]:
    with connect(fleet.directory) as d:
        return {r["shard"]: (r["ceiling_second"], r["ceiling_minute"]) for r in d.execute(
            "SELECT shard, ceiling_second, ceiling_minute FROM mailroom_fleet.domain_shares WHERE domain = %s",
            (domain,))}


def _assert_within(fleet, domain: str, per_second: int | None, per_minute: int | None = None) -> None:
    """The invariant: every shard's limit is set, at most its committed
    ceiling, and the ceilings (so the limits) add up to at most the limit."""
    limits, ceilings = _shard_limits(fleet, domain), _ceilings(fleet, domain)
    assert set(ceilings) == set(fleet.names), ceilings
    for w, bound in ((0, per_second), (1, per_minute)):
        if bound is None:
            continue
        assert all(limits[n] is not None and limits[n][w] <= ceilings[n][w] for n in fleet.names), (limits, ceilings)
        assert sum(c[w] for c in ceilings.values()) <= bound, ceilings


def _rebalance(fleet, domain: str) -> dict[str, dict]:
    with fleet.call() as c:
        return {r["shard"]: r for r in c.execute(
            "SELECT * FROM mailroom_fleet.rebalance_domain_limits(%s)", (domain,))}


def _drain(fleet, name: str, domain: str) -> None:
    """Claim all the shard's due mail, as runners would: leased, it is no demand."""
    with fleet.shard(name) as s:
        while s.execute("SELECT count(*) AS n FROM mailroom.claim_batch('w', 1000)").fetchone()["n"]:
            pass
        left = s.execute("SELECT due FROM mailroom.domain_demand(ARRAY[%s])", (domain,)).fetchone()["due"]
    assert left == 0


def _limited(fleet, due: dict[str, int], per_second: int | None, per_minute: int | None = None) -> str:
    """A new domain with `due` mails waiting on each named shard, and a fleet limit on it."""
    domain = _domain()
    for name, n in due.items():
        _enqueue_to(fleet, name, domain, n)
    with fleet.call() as c:
        c.execute("SELECT * FROM mailroom_fleet.set_domain_limit(%s, %s, %s)", (domain, per_second, per_minute)).fetchall()
    return domain


def test_set_shares_the_limit_out_by_demand_and_the_shares_add_up_to_it(fleet):
    a, b = fleet.names
    domain = _domain()
    _enqueue_to(fleet, a, domain, 30)
    _enqueue_to(fleet, b, domain, 10)
    with fleet.call() as c:
        rows = {r["shard"]: r for r in c.execute(
            "SELECT * FROM mailroom_fleet.set_domain_limit(%s, 200, 6000)", (domain.upper(),))}
        listed = c.execute("SELECT * FROM mailroom_fleet.list_domain_limits() WHERE domain = %s",
                           (domain,)).fetchall()
    # Floor: a tenth of the limit over 2 shards, 10/s and 300/min each; the
    # rest 3:1 after the due mail (30 and 10).
    assert {n: (r["per_second"], r["per_minute"], r["demand"], r["note"]) for n, r in rows.items()} == {
        a: (145, 4350, 30, "set"), b: (55, 1650, 10, "set")}
    assert _shard_limits(fleet, domain) == {a: (145, 4350), b: (55, 1650)}
    assert {r["shard"]: r["share_per_second"] for r in listed} == {a: 145, b: 55}
    assert {r["per_second"] for r in listed} == {200}
    _assert_within(fleet, domain, 200, 6000)


def test_shares_follow_demand_lowering_at_once_and_raising_a_window_later(fleet):
    a, b = fleet.names
    domain = _limited(fleet, {a: 30, b: 10}, 200)
    assert _shard_limits(fleet, domain) == {a: (145, None), b: (55, None)}
    # The demand moves: a drains, b gets more mail.
    _drain(fleet, a, domain)
    _enqueue_to(fleet, b, domain, 50)
    first = _rebalance(fleet, domain)
    # a falls to the floor at once; b rises only to its old ceiling until a
    # window has passed since a was lowered, so the two never add up to more.
    assert first[a]["per_second"] == 10 and first[a]["note"] == "set"
    assert first[b]["per_second"] == 55 and first[b]["note"].startswith("raise to 190/s")
    assert _shard_limits(fleet, domain) == {a: (10, None), b: (55, None)}
    _assert_within(fleet, domain, 200)

    def raised():
        got = _rebalance(fleet, domain)
        _assert_within(fleet, domain, 200)
        return got[b]["per_second"] == 190 and got
    last = wait_for(raised, timeout=30)
    assert last[a]["per_second"] == 10 and last[b]["note"] == "set"
    assert _shard_limits(fleet, domain) == {a: (10, None), b: (190, None)}
    with connect(fleet.directory) as d:
        lim = d.execute("SELECT second_lowered_at, rebalanced_at FROM mailroom_fleet.domain_limits WHERE domain = %s",
                        (domain,)).fetchone()
    assert lim["rebalanced_at"] >= lim["second_lowered_at"]


def test_a_raise_waits_a_window_after_the_last_lower(fleet):
    """A shard lowered now still holds, in its window, what it claimed under
    its old limit: another shard raised at once would let one span hold both.
    Per minute, so the window (60 s) is far longer than the calls: the second
    rebalance, right after the one that lowered, raises nobody (checked
    against the database's clock, not assumed)."""
    a, b = fleet.names
    domain = _limited(fleet, {a: 30, b: 10}, None, 600)
    assert _shard_limits(fleet, domain) == {a: (None, 435), b: (None, 165)}   # floor 30 each, the rest 3:1
    _drain(fleet, a, domain)
    _enqueue_to(fleet, b, domain, 50)
    first = _rebalance(fleet, domain)
    assert (first[a]["per_minute"], first[b]["per_minute"]) == (30, 165)
    assert _ceilings(fleet, domain) == {a: (None, 30), b: (None, 570)}
    with fleet.call() as c:
        rows = c.execute("SELECT r.*, clock_timestamp() AS after FROM mailroom_fleet.rebalance_domain_limits(%s) r",
                         (domain,)).fetchall()
    with connect(fleet.directory) as d:
        lowered = d.execute("SELECT minute_lowered_at FROM mailroom_fleet.domain_limits WHERE domain = %s",
                            (domain,)).fetchone()["minute_lowered_at"]
    second = {r["shard"]: r for r in rows}
    assert lowered is not None
    if rows[0]["after"] < lowered + timedelta(minutes=1):
        assert second[b]["per_minute"] == 165 and second[b]["note"] == "raise to 570/min waits a window after the last lower"
    assert _shard_limits(fleet, domain)[b][1] in (165, 570)
    _assert_within(fleet, domain, None, 600)


def test_a_shard_with_no_demand_keeps_only_the_floor_and_an_idle_fleet_splits_evenly(fleet):
    a, b = fleet.names
    busy, idle = _limited(fleet, {a: 5}, 100), _limited(fleet, {}, 101, 60)
    assert _shard_limits(fleet, busy) == {a: (95, None), b: (5, None)}   # floor 100 / (10 x 2)
    # Nobody has mail for it: even, the odd one to the first shard by name.
    first, second = sorted(fleet.names)
    assert _shard_limits(fleet, idle) == {first: (51, 30), second: (50, 30)}
    _assert_within(fleet, busy, 100)
    _assert_within(fleet, idle, 101, 60)


def test_the_floor_is_at_least_one_and_the_limit_at_least_one_per_shard(fleet):
    a, b = fleet.names
    domain = _limited(fleet, {b: 3}, 2)
    assert _shard_limits(fleet, domain) == {a: (1, None), b: (1, None)}


def _refused(conn, call: str, params, *fragments: str, state: str = "22023") -> None:
    with pytest.raises(psycopg.Error) as e:
        conn.execute(call, params)
    assert e.value.sqlstate == state and all(f in str(e.value) for f in fragments), str(e.value)


def test_bad_input_is_refused_naming_the_field_and_writes_nothing(fleet):
    domain = _domain()
    with fleet.call() as c:
        set_ = "SELECT * FROM mailroom_fleet.set_domain_limit(%s, %s, %s)"
        _refused(c, set_, (domain, -5, None), "mailroom_fleet: per_second: must be between 2 (1 for each of 2 shards)",
                 "got -5")
        _refused(c, set_, (domain, 1, None), "per_second: must be between 2")
        _refused(c, set_, (domain, None, 0), "mailroom_fleet: per_minute: must be between 2")
        _refused(c, set_, (domain, 10, 60000001), "per_minute:")
        _refused(c, set_, (domain, None, None), "mailroom_fleet: per_second: a fleet limit needs per_second or per_minute")
        _refused(c, set_, ("*", 10, None), "mailroom_fleet: domain: a fleet limit names one domain")
        _refused(c, set_, ("ann@" + domain, 10, None), "mailroom_fleet: domain: must be a domain name")
        _refused(c, set_, ("", 10, None), "mailroom_fleet: domain: must be a domain name")
        _refused(c, set_, ("a..example", 10, None), "mailroom_fleet: domain: must be a domain name")
        _refused(c, set_, (None, 10, None), "mailroom_fleet: domain: must be a domain name, got NULL")
        _refused(c, "SELECT * FROM mailroom_fleet.clear_domain_limit(%s)", ("*",), "domain:")
        _refused(c, "SELECT * FROM mailroom_fleet.rebalance_domain_limits(%s)", ("a/b",), "domain:")
        # A limit that is no number never reaches the function: PostgreSQL's
        # integer input refuses it (22P02, the value quoted), nothing written.
        _refused(c, "SELECT * FROM mailroom_fleet.set_domain_limit(%s, %s::text::integer)", (domain, "fifty"),
                 'invalid input syntax for type integer: "fifty"', state="22P02")
        assert c.execute("SELECT count(*) AS n FROM mailroom_fleet.list_domain_limits() WHERE domain = %s",
                         (domain,)).fetchone()["n"] == 0
    assert _shard_limits(fleet, domain) == {n: None for n in fleet.names}


def test_a_domain_outside_ascii_is_keyed_as_the_shards_key_it(fleet):
    """The shards count mail to ÜNICODE.de, ünicode.de and xn--nicode-2ya.de
    as one domain (to_domain in wire form): the fleet limit lands on that key
    whichever spelling the operator gives."""
    a, b = fleet.names
    with fleet.shard(a) as s:
        enqueue(s, "x@üｎｉｃｏｄｅ.de", subject="s", body_text="b")
    with fleet.call() as c:
        rows = c.execute("SELECT * FROM mailroom_fleet.set_domain_limit('ÜNICODE.de', 40)").fetchall()
        assert {r["domain"] for r in rows} == {"xn--nicode-2ya.de"}
        assert {r["shard"]: r["demand"] for r in rows} == {a: 1, b: 0}
        assert {r["domain"] for r in c.execute("SELECT * FROM mailroom_fleet.domain_demand()")} >= {"xn--nicode-2ya.de"}
    assert _shard_limits(fleet, "xn--nicode-2ya.de") == {a: (38, None), b: (2, None)}
    with fleet.call() as c:
        cleared = c.execute("SELECT * FROM mailroom_fleet.clear_domain_limit('ünicode.DE')").fetchall()
        assert {r["shard"]: r["cleared"] for r in cleared} == {a: True, b: True}
        assert c.execute("SELECT count(*) AS n FROM mailroom_fleet.list_domain_limits()"
                         " WHERE domain = 'xn--nicode-2ya.de'").fetchone()["n"] == 0
    assert _shard_limits(fleet, "xn--nicode-2ya.de") == {a: None, b: None}


def test_a_shard_down_fails_set_and_clear_with_nothing_changed(fleet):
    up, down = fleet.names
    domain = _domain()
    with fleet.shard_down(down) as port:
        with fleet.call() as c, pytest.raises(psycopg.Error) as e:
            c.execute("SELECT * FROM mailroom_fleet.set_domain_limit(%s, 100)", (domain,))
        assert "did not answer, nothing was changed" in str(e.value) and f"port {port} failed" in str(e.value)
        assert e.value.sqlstate == "XX000"
    assert _shard_limits(fleet, domain) == {up: None, down: None}
    with fleet.call() as c:
        assert c.execute("SELECT count(*) AS n FROM mailroom_fleet.list_domain_limits() WHERE domain = %s",
                         (domain,)).fetchone()["n"] == 0
        c.execute("SELECT * FROM mailroom_fleet.set_domain_limit(%s, 100)", (domain,)).fetchall()
    before = _shard_limits(fleet, domain)
    with fleet.shard_down(down):
        with fleet.call() as c, pytest.raises(psycopg.Error) as e:
            c.execute("SELECT * FROM mailroom_fleet.clear_domain_limit(%s)", (domain,))
        assert f"[{down}]" in str(e.value) and "Connection refused" in str(e.value)
    assert _shard_limits(fleet, domain) == before
    _assert_within(fleet, domain, 100)


def test_a_shard_down_during_rebalance_keeps_its_share_and_the_others_stay_within_what_it_leaves(fleet):
    """The down shard may still be sending under its last share (runners may
    reach it when the directory cannot): its ceiling stays counted, so the
    shard that answers gets at most the limit less that ceiling, however much
    mail it has. The call reports the shard and warns; it does not fail (the
    pg_cron job keeps rebalancing the others)."""
    up, down = fleet.names
    domain = _limited(fleet, {down: 30, up: 10}, 200)
    assert _shard_limits(fleet, domain) == {down: (145, None), up: (55, None)}
    _enqueue_to(fleet, up, domain, 500)
    with fleet.shard_down(down):
        def rebalanced():
            with fleet.call() as c:
                c.execute("SET client_min_messages = warning")
                warnings = []
                c.add_notice_handler(lambda d: warnings.append(d.message_primary))
                rows = {r["shard"]: r for r in c.execute(
                    "SELECT * FROM mailroom_fleet.rebalance_domain_limits(%s)", (domain,))}
            _assert_within(fleet, domain, 200)
            assert rows[down]["note"].startswith("did not answer") and rows[down]["per_second"] == 145
            assert any("1 shard(s) did not answer" in w for w in warnings), warnings
            return rows[up]["per_second"] == 55 and rows
        rows = wait_for(rebalanced, timeout=30)
    assert rows[up]["per_second"] == 200 - 145 and _shard_limits(fleet, domain)[down] == (145, None)
    # Back: the shares follow the demand again (up has 510 due, down 30).
    back = wait_for(lambda: (r := _rebalance(fleet, domain)) and r[up]["per_second"] > 55
                    and r[down]["per_second"] < 145 and r, timeout=30)
    _assert_within(fleet, domain, 200)
    assert back[up]["demand"] == 510 and back[down]["demand"] == 30


def test_a_shard_that_fails_the_write_leaves_every_shard_within_the_committed_ceilings(fleet):
    """A shard read-only after answering the read: the one SPLIT write fails
    with its SQLSTATE and the directory rolls back, while the other shard may
    have taken its new value: that value is within both the old and the new
    ceilings, so the committed ceilings still bound every shard."""
    up, down = fleet.names
    domain = _limited(fleet, {up: 30}, 200)
    _drain(fleet, up, domain)
    _enqueue_to(fleet, down, domain, 40)
    with connect(fleet.directory) as d:
        d.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(sql.Identifier(down)))
    try:
        with fleet.call() as c, pytest.raises(psycopg.Error) as e:
            c.execute("SELECT * FROM mailroom_fleet.rebalance_domain_limits(%s)", (domain,))
        assert e.value.sqlstate == "25006" and f"[{down}]" in str(e.value)
        _assert_within(fleet, domain, 200)
    finally:
        with connect(fleet.directory) as d:
            d.execute(sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(sql.Identifier(down)))
    wait_for(lambda: (r := _rebalance(fleet, domain)) and r[down]["per_second"] == 190, timeout=30)
    _assert_within(fleet, domain, 200)


def test_fleet_limits_are_for_fleet_operators_only(fleet):
    tag = uuid.uuid4().hex[:8]
    app, stranger = f"fleet_app_{tag}", f"fleet_stranger_{tag}"
    with connect(fleet.directory) as d:
        d.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE mailroom_fleet_app").format(sql.Identifier(app)))
        d.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(stranger)))
    try:
        calls = ["SELECT * FROM mailroom_fleet.set_domain_limit('g.example', 10)",
                 "SELECT * FROM mailroom_fleet.clear_domain_limit('g.example')",
                 "SELECT * FROM mailroom_fleet.rebalance_domain_limits()",
                 "SELECT * FROM mailroom_fleet.list_domain_limits()",
                 "SELECT * FROM mailroom_fleet.domain_demand()",
                 "SELECT * FROM mailroom_fleet._rebalance(NULL, false)",
                 "SELECT * FROM mailroom_fleet._shards_set_domain_limits('{0}', '{g.example}', '{1000}', '{NULL}')",
                 "SELECT * FROM mailroom_fleet.domain_shares"]
        for user in (app, stranger):
            for call in calls:
                with connect(fleet.directory, user=user) as c, pytest.raises(psycopg.Error) as e:
                    c.execute(call)
                assert e.value.sqlstate == "42501", (user, call)
        with fleet.call() as c:
            c.execute("SELECT * FROM mailroom_fleet.list_domain_limits()").fetchall()
            for internal in calls[-3:]:
                with pytest.raises(psycopg.Error) as e:
                    c.execute(internal)
                assert e.value.sqlstate == "42501", internal
    finally:
        with connect(fleet.directory) as d:
            for role in (app, stranger):
                d.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_the_rebalance_is_a_pg_cron_job_where_the_directory_runs_pg_cron(throwaway):
    """Deployed into the database pg_cron runs in (cron.database_name), the
    fleet plan schedules mailroom-fleet-rebalance every minute; its command
    runs there (no limits: nothing to do); revert removes the job."""
    throwaway.up(deploy=False, log=lambda m: None)
    target = throwaway.sqitch_target()
    fleet_sqitch(target, "deploy")
    with connect(throwaway.url()) as d:
        job = d.execute("SELECT schedule, command FROM cron.job WHERE jobname = 'mailroom-fleet-rebalance'").fetchone()
        assert job == {"schedule": "* * * * *",
                       "command": "SELECT count(*) FROM mailroom_fleet.rebalance_domain_limits()"}
        assert d.execute(job["command"]).fetchone()["count"] == 0
    fleet_sqitch(target, "revert", "-y")
    with connect(throwaway.url()) as d:
        assert d.execute("SELECT count(*) AS n FROM cron.job WHERE jobname LIKE 'mailroom-fleet%'").fetchone()["n"] == 0
