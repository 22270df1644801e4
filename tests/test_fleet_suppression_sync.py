"""Suppression sync across the fleet (fleet/deploy/suppression_sync.sql,
docs/fleet.md "Suppression sync"), against the real thing: three shards
cloned from the test template under a PL/Proxy directory (tests/fleetkit.py).
A suppression a shard records itself (a bounce, a complaint, an unsubscribe,
an operator's suppress there) reaches every other shard with
mailroom_fleet.sync_suppressions(), and their gates refuse the address at
claim time, with the same stream scope."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from tests.conftest import connect
from tests.fleetkit import build_fleet, fleet_sqitch
from tests.runnerkit import enqueue, wait_for


@pytest.fixture(scope="module")
def fleet(server_url, template_db):
    with build_fleet(server_url, template_db, shards=3, partitions=4) as f:
        yield f


def _address(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}@sync.example"


def _sync(fleet) -> dict[str | None, dict]:
    with fleet.call() as c:
        return {r["shard"]: r for r in c.execute("SELECT * FROM mailroom_fleet.sync_suppressions()").fetchall()}


def _suppressions(fleet, address: str) -> dict[str, list[tuple]]:
    """Per shard: the (reason, stream, source) of its suppressions of the address."""
    out = {}
    for name in fleet.names:
        with fleet.shard(name) as s:
            out[name] = [(r["reason"], r["stream"], r["source"]) for r in s.execute(
                "SELECT reason, stream, source FROM mailroom.suppressions WHERE address_key = lower(%s)"
                " ORDER BY stream NULLS FIRST", (address,))]
    return out


def _sync_until(fleet, arrived, what: str) -> dict[str | None, dict]:
    """Sync until arrived() holds (a row is handed out once every transaction
    open anywhere in the cluster when it was written has ended: other
    tests' transactions can hold it back); the last run's rows."""
    def step():
        done = _sync(fleet)
        return done if arrived() else None
    return wait_for(step, timeout=60, what=what)


def _drain(conn) -> None:
    """Hand out what other tests left due, so a claim sees only this test's mail."""
    while conn.execute("SELECT count(*) AS n FROM mailroom.claim_batch('sync-test', 1000)").fetchone()["n"]:
        pass


def _claimed(conn) -> set[str]:
    return {r["to_address"] for r in conn.execute(
        "SELECT c.to_address FROM mailroom.claim_batch('sync-test', 100) b JOIN mailroom.contents c ON c.id = b.id")}


def _status(conn, mail_id: int) -> tuple[str, str | None]:
    r = conn.execute("SELECT status, status_reason FROM mailroom.messages WHERE id = %s", (mail_id,)).fetchone()
    return r["status"], r["status_reason"]


def _local_suppress(fleet, name: str, address: str, reason: str = "unsubscribed", stream: str | None = None) -> None:
    with fleet.shard(name) as s:
        s.execute("SELECT mailroom.suppress(%s, %s, 'local test', %s)", (address, reason, stream))


def test_a_bounce_on_one_shard_stops_the_address_on_the_others_at_claim_time(fleet):
    a, b, c = fleet.names
    addr = _address("bounce")
    with fleet.shard(a) as sa:
        mail = enqueue(sa, addr, subject="s", body_text="b")
        leases = {r["id"]: r["lease_token"] for r in sa.execute(
            "SELECT id, lease_token FROM mailroom.claim_batch('sync-test', 1000)")}
        sa.execute("SELECT mailroom.mark_outcomes(%s::jsonb)", (json.dumps([
            {"id": mail, "token": str(leases[mail]), "outcome": "failed", "smtp_code": 550,
             "smtp_enhanced": "5.1.1", "detail": "no such user"}]),))
    assert [r[0] for r in _suppressions(fleet, addr)[a]] == ["hard_bounce"]
    with fleet.shard(b) as sb:
        _drain(sb)
        waiting = enqueue(sb, addr, subject="news", body_text="b", stream="broadcast")
        other = _address("other")
        enqueue(sb, other, subject="news", body_text="b")
        # Before the sync shard B would hand the mail out; it is not claimed
        # here, so the claim after the sync decides.
        done = _sync_until(fleet, lambda: _suppressions(fleet, addr)[b], "the bounce copied to shard B")
        assert None not in done and all(r["reached"] for r in done.values()), done
        assert _claimed(sb) == {other}
        assert _status(sb, waiting) == ("cancelled", "suppressed")
    _sync_until(fleet, lambda: _suppressions(fleet, addr)[c], "the bounce copied to shard C")
    got = _suppressions(fleet, addr)
    for name in (b, c):
        assert got[name] == [("hard_bounce", None, f"fleet copy from {a}: smtp 550 5.1.1 no such user")], got


def test_the_stream_scope_is_kept(fleet):
    a, b, c = fleet.names
    addr = _address("stream")
    _local_suppress(fleet, b, addr, "unsubscribed", "broadcast")
    _sync_until(fleet, lambda: all(_suppressions(fleet, addr).values()), "the unsubscribe on every shard")
    assert [r[:2] for r in _suppressions(fleet, addr)[c]] == [("unsubscribed", "broadcast")]
    with fleet.shard(c) as sc:
        _drain(sc)
        news = enqueue(sc, addr, subject="news", body_text="b", stream="broadcast")
        reset = enqueue(sc, addr, subject="reset", body_text="b")
        assert _status(sc, news) == ("cancelled", "suppressed")
        assert _claimed(sc) == {addr}
        assert _status(sc, reset)[0] == "sending"


def test_a_rerun_changes_nothing_and_a_local_lift_is_not_copied(fleet):
    """sync_suppressions is idempotent; a lift on one shard (mailroom.unsuppress
    there) is not copied: mailroom_fleet.unsuppress lifts it on all, and no
    later sync brings it back."""
    a, b, c = fleet.names
    addr = _address("rerun")
    _local_suppress(fleet, a, addr, "complaint")
    _sync_until(fleet, lambda: all(_suppressions(fleet, addr).values()), "the complaint on every shard")
    before = _suppressions(fleet, addr)
    for _ in range(3):
        _sync(fleet)
        assert _suppressions(fleet, addr) == before
    with fleet.shard(a) as sa:
        assert sa.execute("SELECT mailroom.unsuppress(%s) AS lifted", (addr,)).fetchone()["lifted"] is True
    _sync(fleet)
    got = _suppressions(fleet, addr)
    assert got[a] == [] and got[b] == before[b] and got[c] == before[c], got
    with fleet.call() as d:
        d.execute("SELECT * FROM mailroom_fleet.unsuppress(%s)", (addr,)).fetchall()
    for _ in range(2):
        _sync(fleet)
        assert _suppressions(fleet, addr) == {n: [] for n in fleet.names}


def test_a_shard_down_during_a_sync_marks_the_run_partial_and_a_later_run_completes(fleet):
    a, b, c = fleet.names
    addr = _address("down")
    _local_suppress(fleet, a, addr, "manual")
    with fleet.shard_down(c):
        done = _sync_until(fleet, lambda: _suppressions(fleet, addr)[b], "the suppression copied to B while C is down")
        unreached = done[None]
        assert unreached["reached"] is False and unreached["partitions"] == [2] and unreached["error"], done
        assert c not in done and done[b]["reached"] is True
        with connect(fleet.directory) as d:
            run = d.execute("SELECT complete, unreached, errors FROM mailroom_fleet.suppression_sync_runs"
                            " ORDER BY id DESC LIMIT 1").fetchone()
        assert run["complete"] is False and run["unreached"] == [2] and "partitions {2} not reached" in run["errors"]
        assert _suppressions(fleet, addr)[c] == []
    done = _sync_until(fleet, lambda: _suppressions(fleet, addr)[c], "the suppression copied to C once it answers")
    assert None not in done and all(r["reached"] for r in done.values()), done
    with connect(fleet.directory) as d:
        assert d.execute("SELECT complete FROM mailroom_fleet.suppression_sync_runs"
                         " ORDER BY id DESC LIMIT 1").fetchone()["complete"] is True
    assert _suppressions(fleet, addr)[c] == [("manual", None, f"fleet copy from {a}: local test")]


@pytest.fixture
def own_fleet(server_url, template_db):
    """Three shards of its own: a test counting what the sync writes sees no other test's rows."""
    with build_fleet(server_url, template_db, shards=3, partitions=4) as f:
        yield f


def test_a_copy_is_not_written_on_while_its_origin_is_read(own_fleet):
    """The origin's own row reaches every shard; the copies the sync wrote
    are read back (they are suppressions of their shard) but not offered to
    every shard again, which cost (shards - 1)^2 no-op writes per
    suppression (checked: the v0.5.0 sync took 4 here)."""
    fleet = own_fleet
    a, b, c = fleet.names
    addr = _address("echo")
    _local_suppress(fleet, a, addr, "hard_bounce")
    _sync_until(fleet, lambda: all(_suppressions(fleet, addr).values()), "the bounce on every shard")
    runs = []

    def copies_read():
        runs.append(_sync(fleet))
        return sum(run[n]["pulled"] for run in runs for n in (b, c)) >= 2 or None
    wait_for(copies_read, timeout=60, what="the copies on B and C read back")
    assert sum(run[n]["copied"] for run in runs for n in fleet.names) == 0, runs
    assert _suppressions(fleet, addr)[c] == [("hard_bounce", None, f"fleet copy from {a}: local test")]


def test_copies_carry_a_suppression_whose_origin_went_away(own_fleet):
    """C is down when A's bounce is synced to B; then A goes away and C comes
    back: B's copy reaches C."""
    fleet = own_fleet
    a, b, c = fleet.names
    addr = _address("carried")
    _local_suppress(fleet, a, addr, "hard_bounce")
    with fleet.shard_down(c):
        _sync_until(fleet, lambda: _suppressions(fleet, addr)[b], "the bounce copied to B while C is down")
    with fleet.shard_down(a):
        _sync_until(fleet, lambda: _suppressions(fleet, addr)[c], "B's copy carried to C while A is down")
    assert _suppressions(fleet, addr)[c] == [("hard_bounce", None, f"fleet copy from {a}: local test")]

def test_one_run_pages_through_a_backlog(own_fleet):
    """p_page bounds a page, not a run: 25 suppressions pending with pages of
    10 all reach the other shards in one call."""
    fleet = own_fleet
    a, b, c = fleet.names
    addresses = [_address(f"backlog{i}") for i in range(25)]
    with fleet.shard(a) as s:
        for addr in addresses:
            s.execute("SELECT mailroom.suppress(%s, 'hard_bounce', 'local test')", (addr,))

        # Handed out once every transaction open when they were written has
        # ended (other tests' transactions in the cluster can hold them back).
        def handed_out():
            return s.execute("SELECT count(*) AS n FROM mailroom.suppressions_written(NULL, NULL, NULL, 100000)"
                             " WHERE address_key = ANY (%s)", (addresses,)).fetchone()["n"] == 25
        wait_for(handed_out, timeout=60, what="the 25 suppressions below the snapshot's xmin")
    with fleet.call() as d:
        run = {r["shard"]: r for r in d.execute("SELECT * FROM mailroom_fleet.sync_suppressions(10)")}
    assert run[a]["pulled"] == 25 and run[b]["copied"] == 25 and run[c]["copied"] == 25, run
    assert all(_suppressions(fleet, addr)[c] for addr in addresses)

def test_transactions_committing_out_of_order_are_not_skipped(fleet):
    """The first writer takes the lower xid and commits last: a sync that
    moved its cursor past the second writer's row (written_xid > cursor)
    would never copy the first one (checked once against a naive
    suppressions_written without the snapshot-xmin bound: this test failed)."""
    a, b, c = fleet.names
    first_addr, second_addr = _address("first"), _address("second")
    first = psycopg.connect(fleet.shards[fleet.names.index(a)], row_factory=dict_row)   # a transaction
    try:
        first.execute("SELECT mailroom.suppress(%s, 'manual', 'local test')", (first_addr,))
        _local_suppress(fleet, a, second_addr, "manual")
        _sync(fleet)
        # While the first writer is open, nothing written after it is handed out.
        assert _suppressions(fleet, second_addr)[b] == []
        first.commit()
    finally:
        first.close()
    _sync_until(fleet, lambda: all(_suppressions(fleet, first_addr).values())
                and all(_suppressions(fleet, second_addr).values()), "both suppressions on every shard")


def test_a_row_another_shard_refuses_is_reported_without_its_address_and_the_rest_is_copied(fleet):
    """A stream only shard A defines: B and C refuse that row (counted in the
    run's errors, no address there) and take the other rows of the run."""
    a, b, c = fleet.names
    only_a, kept = _address("only-a"), _address("kept")
    stream = f"only-a-{uuid.uuid4().hex[:6]}"
    with fleet.shard(a) as sa:
        sa.execute("SELECT mailroom.define_stream(%s, true, 'only on shard A')", (stream,))
    _local_suppress(fleet, a, only_a, "unsubscribed", stream)
    _local_suppress(fleet, a, kept, "manual")
    done = _sync_until(fleet, lambda: all(_suppressions(fleet, kept).values()), "the other row on every shard")
    # The refusal may come in an earlier run than the other row (each waits
    # for the transactions open before it): the run that recorded it.
    with connect(fleet.directory) as d:
        run = d.execute("SELECT complete, errors FROM mailroom_fleet.suppression_sync_runs"
                        " WHERE errors LIKE '%refused%' ORDER BY id DESC LIMIT 1").fetchone()
    assert run is not None and run["complete"] is False, done
    assert f"{b}: refused 1 row(s)" in run["errors"] and f"{c}: refused 1 row(s)" in run["errors"], run
    assert only_a not in run["errors"] and not any(only_a in (r["error"] or "") for r in done.values())
    got = _suppressions(fleet, only_a)
    assert got[b] == [] and got[c] == [] and [r[:2] for r in got[a]] == [("unsubscribed", stream)]


def test_bad_input_is_refused(fleet):
    with fleet.call() as c:
        for page in (0, 100001):
            with pytest.raises(Exception) as e:
                c.execute("SELECT * FROM mailroom_fleet.sync_suppressions(%s)", (page,))
            assert e.value.sqlstate == "22023" and "page: must be between 1 and 100000" in str(e.value)
    with fleet.shard(fleet.names[0]) as s:
        with pytest.raises(Exception) as e:
            s.execute("SELECT * FROM mailroom.suppress_copies('{x}', '{}', '{}', '{}', '{}')")
        assert e.value.sqlstate == "22023" and "arrays of one length" in str(e.value)



def test_only_the_fleet_operator_runs_the_sync_or_reads_its_tables(fleet):
    app, stranger = (f"sync_{kind}_{uuid.uuid4().hex[:8]}" for kind in ("app", "stranger"))
    with connect(fleet.directory) as d:
        d.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE mailroom_fleet_app").format(sql.Identifier(app)))
        d.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(stranger)))
    try:
        for role in (app, stranger):
            for call in ("SELECT * FROM mailroom_fleet.sync_suppressions()",
                         "SELECT * FROM mailroom_fleet.suppression_sync_runs",
                         "SELECT * FROM mailroom_fleet.suppression_cursors"):
                with connect(fleet.directory, user=role) as c, pytest.raises(psycopg.Error) as e:
                    c.execute(call)
                assert e.value.sqlstate == "42501", (role, call)
    finally:
        with connect(fleet.directory) as d:
            for role in (app, stranger):
                d.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_the_sync_is_a_pg_cron_job_where_the_directory_runs_pg_cron(throwaway):
    """Deployed into the database pg_cron runs in, the fleet plan schedules
    mailroom-fleet-suppression-sync every minute; its command runs there (no
    shards: nothing to copy); revert removes the job."""
    throwaway.up(deploy=False, log=lambda m: None)
    target = throwaway.sqitch_target()
    fleet_sqitch(target, "deploy")
    with connect(throwaway.url()) as d:
        jobs = d.execute("SELECT schedule, command FROM cron.job"
                         " WHERE jobname = 'mailroom-fleet-suppression-sync'").fetchall()
        # One job, though the release's change and its rework both schedule it.
        assert jobs == [{"schedule": "* * * * *", "command": "SELECT count(*) FROM mailroom_fleet.sync_suppressions()"}]
        job = jobs[0]
        assert d.execute(job["command"]).fetchone()["count"] == 0
    fleet_sqitch(target, "revert", "-y")
    with connect(throwaway.url()) as d:
        assert d.execute("SELECT count(*) AS n FROM cron.job"
                         " WHERE jobname = 'mailroom-fleet-suppression-sync'").fetchone()["n"] == 0
