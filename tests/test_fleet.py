"""Fleet operations through PL/Proxy (fleet/, docs/fleet.md), against the real
thing: two shards cloned from the test template (the main plan), a directory
database with the plproxy extension and the fleet plan deployed by Sqitch,
and the SQL/MED server mailroom_fleet mapping four partitions onto the two
shards over loopback (p0, p2 -> shard A; p1, p3 -> shard B). The directory
logs in to the shards as a login role holding mailroom_app and
mailroom_operator only; the tests call the fleet as a login holding
mailroom_fleet_operator and mailroom_fleet_app only."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections import Counter

import psycopg
import pytest
from psycopg import sql

from mailroom.dev.embedded import Cluster
from tests.conftest import connect
from tests.fleetkit import build_fleet, dbname_of
from tests.runnerkit import enqueue, wait_for


@pytest.fixture(scope="module")
def fleet(server_url, template_db):
    with build_fleet(server_url, template_db) as f:
        yield f


def test_shard_map_lists_the_partitions(fleet):
    with fleet.call() as c:
        rows = c.execute("SELECT partition, connstr FROM mailroom_fleet.shard_map").fetchall()
    assert [r["partition"] for r in rows] == [0, 1, 2, 3]
    assert [dbname_of(r["connstr"]) for r in rows] == [fleet.partitions()[i] for i in range(4)]


def test_address_key_is_the_shards_address_key(fleet):
    """The directory routes by the key the shards' gate and suppression list
    use: same function result on every spelling, so the same hash."""
    spellings = ["ann@example.com", "Ann@Example.COM", "ann@ｅｘａｍｐｌｅ.com", "ann@ÜNICODE.de",
                 "ann@xn--nicode-2ya.de", "Ann@Bücher.example", "ann@例え。テスト", "ann@ЯНДЕКС.рф",
                 "user+tag@Sub.Example.org", "ａｎｎ@example.com", "ann@straße.de", "ann@ǅ.example"]
    with connect(fleet.directory) as d, fleet.shard(fleet.names[0]) as s:
        for address in spellings:
            ours = d.execute("SELECT mailroom_fleet.address_key(%s) AS k, mailroom_fleet.shard_key(%s) AS h",
                             (address, address)).fetchone()
            theirs = s.execute("SELECT mailroom._address_key(%s) AS k, hashtext(mailroom._address_key(%s)) AS h",
                               (address, address)).fetchone()
            assert ours == theirs, address


def test_queue_stats_is_every_shards_rows_tagged_and_summaries_add_up(fleet):
    a, b = fleet.names
    with fleet.shard(a) as sa, fleet.shard(b) as sb:
        for i in range(3):
            enqueue(sa, f"stats{i}@example.com", subject="s", body_text="b", sender="alpha")
        enqueue(sa, "stats-later@example.com", subject="s", body_text="b", send_at="2100-01-01T00:00:00Z")
        for i in range(5):
            enqueue(sb, f"stats{i}@example.org", subject="s", body_text="b", sender="beta")
        sb.execute("SELECT mailroom.claim_batch('w', 2, p_sender => 'beta')").fetchall()

        def shard_rows(conn, name):
            return sorted((name, r["kind"], r["sender"], r["status"], r["messages"], r["due"], r["warning"])
                          for r in conn.execute("SELECT * FROM mailroom.queue_stats"))

        expected = sorted(shard_rows(sa, a) + shard_rows(sb, b))
        with fleet.call() as c:
            got = sorted((r["shard"], r["kind"], r["sender"], r["status"], r["messages"], r["due"], r["warning"])
                         for r in c.execute("SELECT * FROM mailroom_fleet.queue_stats()"))
            summary = {r["shard"]: r for r in c.execute("SELECT * FROM mailroom_fleet.queue_summary()")}
            total = c.execute("SELECT * FROM mailroom_fleet.fleet_summary()").fetchone()
    assert got == expected
    assert ("beta", "sending", 2) in {(r[2], r[3], r[4]) for r in got if r[0] == b}
    # Four partitions, two databases: each shard once.
    assert sorted(summary) == sorted([a, b])
    for name in (a, b):
        queue = [r for r in expected if r[0] == name and r[1] == "queue"]
        s = summary[name]
        assert s["messages"] == sum(r[4] for r in queue)
        assert s["due"] == sum(r[5] for r in queue)
        for status in ("queued", "sending", "paused", "review"):
            assert s[status] == sum(r[4] for r in queue if r[3] == status)
        assert s["warnings"] == len([r for r in expected if r[0] == name and r[1] == "warning"])
    assert total["shards"] == 2
    for col in ("messages", "due", "queued", "sending", "paused", "review", "warnings"):
        assert total[col] == sum(s[col] for s in summary.values()), col
    assert summary[a]["queued"] - summary[a]["due"] >= 1   # the mail for 2100


def _claimed_addresses(conn, limit: int = 10) -> set[str]:
    rows = conn.execute("SELECT c.to_address FROM mailroom.claim_batch('w', %s) b"
                        " JOIN mailroom.contents c ON c.id = b.id", (limit,)).fetchall()
    return {r["to_address"] for r in rows}


def _mail(conn, mail_id: int) -> dict:
    return conn.execute("SELECT status, status_reason, stream FROM mailroom.messages WHERE id = %s",
                        (mail_id,)).fetchone()


def test_fleet_suppress_stops_the_address_on_every_shard_at_claim_time_with_its_stream(fleet):
    """Mail to the address already sits on both shards (as if enqueued straight
    into each); one fleet call suppresses it for the broadcast stream: the
    gate of each shard cancels that mail and leaves its transactional mail
    and everybody else's alone; new broadcast mail is recorded cancelled."""
    addr = "Dora@Suppress.example"
    with fleet.shard(fleet.names[0]) as sa, fleet.shard(fleet.names[1]) as sb:
        ids = {}
        for name, s in zip(fleet.names, (sa, sb)):
            while _claimed_addresses(s, 1000):      # what other tests left due
                pass
            ids[name] = {
                "broadcast": enqueue(s, addr, subject="news", body_text="b", stream="broadcast"),
                "transactional": enqueue(s, addr, subject="reset", body_text="b"),
                "other": enqueue(s, f"other-{name.replace('_', '-')}@example.com", subject="news", body_text="b", stream="broadcast"),
            }
        with fleet.call() as c:
            done = c.execute("SELECT shard FROM mailroom_fleet.suppress(%s, 'unsubscribed', 'test', 'broadcast')",
                             ("Dora@SUPPRESS.EXAMPLE",)).fetchall()   # the domain's case does not matter
        assert sorted(r["shard"] for r in done) == sorted(fleet.names)
        for name, s in zip(fleet.names, (sa, sb)):
            assert _claimed_addresses(s) == {addr, f"other-{name.replace('_', '-')}@example.com"}, name
            m = ids[name]
            assert _mail(s, m["broadcast"]) == {"status": "cancelled", "status_reason": "suppressed",
                                                "stream": "broadcast"}
            assert _mail(s, m["transactional"])["status"] == "sending"
            later = enqueue(s, addr, subject="news 2", body_text="b", stream="broadcast")
            assert _mail(s, later)["status"] == "cancelled" and _mail(s, later)["status_reason"] == "suppressed"
            assert _claimed_addresses(s) == set()
        with fleet.call() as c:
            lifted = c.execute("SELECT shard, lifted FROM mailroom_fleet.unsuppress(%s, 'broadcast')",
                               (addr,)).fetchall()
            assert {r["shard"]: r["lifted"] for r in lifted} == {n: True for n in fleet.names}
            again = c.execute("SELECT shard, lifted FROM mailroom_fleet.unsuppress(%s)", (addr,)).fetchall()
            assert {r["shard"]: r["lifted"] for r in again} == {n: False for n in fleet.names}
        for s in (sa, sb):
            back = enqueue(s, addr, subject="news 3", body_text="b", stream="broadcast")
            assert _mail(s, back)["status"] == "queued"
            assert _claimed_addresses(s) == {addr}


def _suppressed_on(fleet, key: str) -> dict[str, int]:
    out = {}
    for name in fleet.names:
        with fleet.shard(name) as s:
            out[name] = s.execute("SELECT count(*) AS n FROM mailroom.suppressions WHERE address_key = %s",
                                  (key,)).fetchone()["n"]
    return out


def _refused(conn, call: str, *fragments: str, state: str = "22023") -> None:
    """The call fails with SQLSTATE `state` and a message holding each fragment."""
    with pytest.raises(psycopg.Error) as e:
        conn.execute(call)
    assert e.value.sqlstate == state and all(f in str(e.value) for f in fragments), str(e.value)


def test_fleet_suppress_refuses_bad_input_on_every_shard(fleet):
    with fleet.call() as c:
        _refused(c, "SELECT * FROM mailroom_fleet.suppress('eve@example.com', 'bored')",
                 "reason: must be unsubscribed, hard_bounce, complaint or manual")
        _refused(c, "SELECT * FROM mailroom_fleet.suppress('eve@example.com', 'manual', NULL, 'nosuchstream')",
                 "stream")
        _refused(c, "SELECT * FROM mailroom_fleet.unsuppress('eve@example.com', 'nosuchstream')", "stream")
        _refused(c, "SELECT * FROM mailroom_fleet.suppress('not an address')", "address")
    assert _suppressed_on(fleet, "eve@example.com") == {n: 0 for n in fleet.names}


def test_enqueue_sends_one_mailbox_to_one_shard_and_spreads_addresses(fleet):
    with fleet.call() as c:
        spellings = ["Finn@Route.example", "Finn@ROUTE.EXAMPLE", "Finn@ｒｏｕｔｅ.example"]
        landed = [c.execute("SELECT * FROM mailroom_fleet.enqueue(%s, 'hi', 'body')", (a,)).fetchone()
                  for a in spellings]
        part = c.execute("SELECT mailroom_fleet.partition_of(%s) AS p", (spellings[0],)).fetchone()["p"]
        assert {r["shard"] for r in landed} == {fleet.partitions()[part]}
        # Again and again: the same shard.
        again = c.execute("SELECT DISTINCT e.shard FROM generate_series(1, 20) i,"
                          " mailroom_fleet.enqueue(%s, 'hi', 'body') e", (spellings[0],)).fetchall()
        assert [r["shard"] for r in again] == [fleet.partitions()[part]]

        rows = c.execute(
            "SELECT 'spread' || i || '@example.net' AS addr, e.shard, e.id,"
            "       mailroom_fleet.partition_of('spread' || i || '@example.net') AS part"
            " FROM generate_series(1, 1000) i,"
            "      mailroom_fleet.enqueue('spread' || i || '@example.net', 'hi', 'body',"
            "                             p_delivery_key => 'spread-' || i) e").fetchall()
    assert len(rows) == 1000
    assert all(fleet.partitions()[r["part"]] == r["shard"] for r in rows)
    per_partition = Counter(r["part"] for r in rows)
    per_shard = Counter(r["shard"] for r in rows)
    # Binomial(1000, 1/4): mean 250, sd 14; (1000, 1/2): mean 500, sd 16.
    assert sorted(per_partition) == [0, 1, 2, 3] and min(per_partition.values()) > 180, per_partition
    assert sorted(per_shard) == sorted(fleet.names) and min(per_shard.values()) > 420, per_shard
    for name in fleet.names:
        with fleet.shard(name) as s:
            there = {r["to_address"] for r in s.execute(
                "SELECT to_address FROM mailroom.contents WHERE delivery_key LIKE 'spread-%'")}
        assert there == {r["addr"] for r in rows if r["shard"] == name}


def test_enqueue_refuses_bad_input_naming_the_field(fleet):
    with fleet.call() as c:
        _refused(c, "SELECT * FROM mailroom_fleet.enqueue(NULL, 'hi', 'body')", "mailroom_fleet: address:")
        _refused(c, "SELECT * FROM mailroom_fleet.enqueue('gus', 'hi', 'body')", "mailroom_fleet: address:")
        _refused(c, "SELECT * FROM mailroom_fleet.enqueue('gus@example.com', NULL, 'body')", "subject: required")
        _refused(c, "SELECT * FROM mailroom_fleet.enqueue('gus@example.com', 'hi', 'body', p_priority => 1000)",
                 "priority")


def test_inspect_finds_the_mail_on_whichever_shard_holds_it(fleet):
    with fleet.call() as c:
        placed = {}
        for i in range(8):
            r = c.execute("SELECT * FROM mailroom_fleet.enqueue(%s, 'hi', 'body', p_delivery_key => %s)",
                          (f"hana{i}@inspect.example", f"inspect-{i}")).fetchone()
            placed[f"inspect-{i}"] = r
        assert {r["shard"] for r in placed.values()} == set(fleet.names)
        for key, r in placed.items():
            found = c.execute("SELECT shard, mail FROM mailroom_fleet.inspect(%s)", (key,)).fetchall()
            assert [(f["shard"], f["mail"]["id"], f["mail"]["delivery_key"]) for f in found] == [
                (r["shard"], r["id"], key)]
        assert c.execute("SELECT * FROM mailroom_fleet.inspect('no-such-key')").fetchall() == []
        _refused(c, "SELECT * FROM mailroom_fleet.inspect('')", "ref:")


def test_a_partition_count_that_is_not_a_power_of_two_is_refused(fleet):
    """PL/Proxy's validator refuses the server definition itself, so a broken
    map never reaches a call; the map in force stays."""
    with connect(fleet.directory) as d:
        with pytest.raises(psycopg.Error) as e:
            d.execute("ALTER SERVER mailroom_fleet OPTIONS (DROP p3)")
        assert e.value.sqlstate == "42601" and "Pl/Proxy: invalid number of partitions" in str(e.value)
        assert "must be power of 2 (attempted 3)" in (e.value.diag.message_hint or "")
        with pytest.raises(psycopg.Error) as e:
            d.execute("CREATE SERVER mailroom_fleet_three FOREIGN DATA WRAPPER plproxy"
                      " OPTIONS (p0 'dbname=a', p1 'dbname=b', p2 'dbname=c')")
        assert "must be power of 2 (attempted 3)" in (e.value.diag.message_hint or "")
    with fleet.call() as c:
        assert c.execute("SELECT count(*) AS n FROM mailroom_fleet.shard_map").fetchone()["n"] == 4
        assert len(c.execute("SELECT * FROM mailroom_fleet.queue_summary()").fetchall()) == 2


def test_a_shard_that_refuses_connections_fails_fleet_wide_calls_and_rerun_completes(fleet):
    up, down = fleet.names
    addr = "ivo@down.example"
    # Routed calls to a live shard still answer: an address of each partition.
    by_part = {}
    with fleet.call() as c:
        i = 0
        while len(by_part) < 4:
            a = f"route{i}@down.example"
            by_part.setdefault(c.execute("SELECT mailroom_fleet.partition_of(%s) AS p", (a,)).fetchone()["p"], a)
            i += 1
    with fleet.shard_down(down) as port:
        for call in ("SELECT * FROM mailroom_fleet.queue_stats()", "SELECT * FROM mailroom_fleet.fleet_summary()",
                     "SELECT * FROM mailroom_fleet.inspect('x')",
                     f"SELECT * FROM mailroom_fleet.suppress('{addr}', 'hard_bounce')"):
            with fleet.call() as c, pytest.raises(psycopg.Error) as e:
                c.execute(call)
            assert f"[{down}]" in str(e.value) and f"port {port} failed" in str(e.value), (call, str(e.value))
            assert "Connection refused" in str(e.value) and e.value.sqlstate == "XX000"
        # PL/Proxy connects to every shard before it sends the call, so a
        # refused connection leaves nothing half-written on the others.
        assert _suppressed_on(fleet, addr) == {up: 0, down: 0}
        with fleet.call() as c:
            for part, a in by_part.items():
                if fleet.partitions()[part] == up:
                    assert c.execute("SELECT shard FROM mailroom_fleet.enqueue(%s, 'hi', 'b')",
                                     (a,)).fetchone()["shard"] == up
                else:
                    with pytest.raises(psycopg.Error) as e:
                        c.execute("SELECT * FROM mailroom_fleet.enqueue(%s, 'hi', 'b')", (a,))
                    assert f"[{down}]" in str(e.value)
    with fleet.call() as c:
        assert sorted(r["shard"] for r in c.execute(
            f"SELECT shard FROM mailroom_fleet.suppress('{addr}', 'hard_bounce')")) == sorted(fleet.names)
    assert _suppressed_on(fleet, addr) == {up: 1, down: 1}


def test_a_shard_that_fails_after_connecting_may_be_left_behind_and_rerun_completes(fleet):
    """No transaction spans the shards: PL/Proxy runs the call on each in its
    own connection, in autocommit. A shard that refuses the write (here: it
    went read-only) fails the call while the other shard may already have
    committed; the same call run again completes it, and adds nothing where
    it was done (the first reason stays)."""
    up, down = fleet.names
    addr = "jo@partial.example"
    with connect(fleet.directory) as d:
        d.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(sql.Identifier(down)))
    try:
        with fleet.call() as c, pytest.raises(psycopg.Error) as e:
            c.execute("SELECT * FROM mailroom_fleet.suppress(%s, 'complaint', 'first')", (addr,))
        assert e.value.sqlstate == "25006" and f"[{down}]" in str(e.value)
        # The call fails as soon as one shard does, and PL/Proxy drops its
        # connections; the other shard's backend may still be running its part
        # and commit after: read once no backend there runs it.
        with fleet.shard(up) as s:
            wait_for(lambda: s.execute(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND state = 'active' AND query ILIKE '%%mailroom.suppress(%%'"
            ).fetchone()["n"] == 0, timeout=60, what="the up shard's part of the call ended")
        first = _suppressed_on(fleet, addr)
        assert first[down] == 0 and first[up] in (0, 1)
    finally:
        with connect(fleet.directory) as d:
            d.execute(sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(sql.Identifier(down)))
    with fleet.call() as c:
        c.execute("SELECT * FROM mailroom_fleet.suppress(%s, 'manual', 'second')", (addr,)).fetchall()
    assert _suppressed_on(fleet, addr) == {up: 1, down: 1}
    with fleet.shard(up) as s:
        reason = s.execute("SELECT reason FROM mailroom.suppressions WHERE address_key = %s", (addr,)).fetchone()
    assert reason["reason"] == ("complaint" if first[up] else "manual")


def test_fleet_functions_are_granted_to_the_fleet_roles_only(fleet):
    stranger = f"fleet_stranger_{uuid.uuid4().hex[:8]}"
    with connect(fleet.directory) as d:
        d.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(stranger)))
    try:
        calls = ["SELECT * FROM mailroom_fleet.queue_stats()", "SELECT * FROM mailroom_fleet.fleet_summary()",
                 "SELECT * FROM mailroom_fleet.inspect('k')", "SELECT * FROM mailroom_fleet.suppress('a@b.example')",
                 "SELECT * FROM mailroom_fleet.unsuppress('a@b.example')",
                 "SELECT * FROM mailroom_fleet.enqueue('a@b.example', 's', 'b')",
                 "SELECT * FROM mailroom_fleet.shard_map"]
        for call in calls:
            with connect(fleet.directory, user=stranger) as c, pytest.raises(psycopg.Error) as e:
                c.execute(call)
            assert e.value.sqlstate == "42501", call
        with connect(fleet.directory) as d:
            acl = d.execute("SELECT p.oid::regprocedure::text AS f FROM pg_proc p"
                            " WHERE p.pronamespace = 'mailroom_fleet'::regnamespace"
                            "   AND has_function_privilege('public', p.oid, 'execute')").fetchall()
        assert acl == []
        with connect(fleet.directory) as d:
            unpinned = d.execute("SELECT p.oid::regprocedure::text AS f FROM pg_proc p"
                                 " WHERE p.pronamespace = 'mailroom_fleet'::regnamespace AND p.prosecdef"
                                 "   AND NOT coalesce(p.proconfig::text LIKE '%search_path=%', false)").fetchall()
        assert unpinned == []
    finally:
        with connect(fleet.directory) as d:
            d.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(stranger)))


def test_the_fleet_plan_reverts_and_redeploys_beside_a_configured_server(fleet):
    """A directory whose site already made its server: revert keeps the
    extension (the server uses its wrapper), and a redeploy works with the
    same map at once."""
    target = "db:pg:" + fleet.directory.split(":", 1)[1]
    root = Cluster.for_checkout().root
    for step in (["revert", "-y"], ["deploy"]):
        done = subprocess.run(["sqitch", *step, "--chdir", "fleet", "--target", target],
                              cwd=root, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        if step[0] == "revert":
            with connect(fleet.directory) as d:
                assert d.execute("SELECT to_regnamespace('mailroom_fleet') AS s").fetchone()["s"] is None
                assert d.execute("SELECT count(*) AS n FROM pg_extension WHERE extname = 'plproxy'"
                                 ).fetchone()["n"] == 1
    with fleet.call() as c:
        assert c.execute("SELECT shards FROM mailroom_fleet.fleet_summary()").fetchone()["shards"] == 2


def test_mailroom_status_fleet_shows_every_shard_and_marks_the_one_down(fleet):
    """`mailroom status --fleet --dsn DIRECTORY`: a row per shard and the fleet's
    total; a shard down is shown DOWN with its error, the others still
    answer, and the command exits 3."""
    from mailroom import exitcodes
    from tests.operatorkit import as_user, run

    a, b = fleet.names
    with fleet.shard(a) as sa, fleet.shard(b) as sb:
        before = {n: c.execute("SELECT count(*)::int AS n FROM mailroom.queue").fetchone()["n"]
                  for n, c in ((a, sa), (b, sb))}
        enqueue(sa, "status-a@example.com", subject="s", body_text="b")
        enqueue(sb, "status-b1@example.com", subject="s", body_text="b")
        enqueue(sb, "status-b2@example.com", subject="s", body_text="b")
    directory = as_user(fleet.directory, fleet.caller)
    code, out, err = run("status", "--fleet", "--dsn", directory, "--json")
    assert code == 0, err
    report = json.loads(out)
    by_shard = {r["shard"]: r["messages"] for r in report["shards"]}
    assert by_shard == {a: before[a] + 1, b: before[b] + 2}
    assert report["fleet"]["messages"] == sum(by_shard.values()) and report["down"] == []
    code, out, _ = run("status", "--fleet", "--dsn", directory)
    assert code == 0 and "SHARDS" in out and a in out and b in out and "all 2 shards" in out
    with fleet.shard_down(b):
        code, out, err = run("status", "--fleet", "--dsn", directory)
        jcode, jout, _ = run("status", "--fleet", "--dsn", directory, "--json")
    assert code == exitcodes.UNREACHABLE and "1 of 2 shards did not answer" in err, (code, out, err)
    assert "DOWN" in out and f"! {b}: shard_down: partition p1, p3 (dbname {b})" in out and "1 of 2 shards" in out
    down = json.loads(jout)
    assert jcode == exitcodes.UNREACHABLE and down["down"] == [b]
    assert {r["shard"]: r["answered"] for r in down["shards"]} == {a: True, b: False}
    assert down["fleet"]["messages"] == before[a] + 1
    code, _, err = run("status", "--fleet", "--dsn", fleet.shards[0])
    assert code == exitcodes.USAGE and "no fleet directory" in err, err
