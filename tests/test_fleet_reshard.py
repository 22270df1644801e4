"""Adding a shard and retiring one with mail in flight (docs/fleet.md), against
the real thing: a directory over cloned shards (tests/fleetkit.py), real
PL/Proxy, real runners (`mailroom run` with several --dsn, restarted one at
a time as the procedure says) draining into a real SMTP sink, while the
application keeps calling mailroom_fleet.enqueue. Every delivery key the
application enqueued reaches the sink exactly once (by its Message-ID,
which carries the key's digest), suppressions hold where the addresses
move, the retired shard ends empty, and a call against a stale map fails
naming the shard and why."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from mailroom.dev.sink import Sink
from tests.conftest import cloned_database, connect
from tests.fleetkit import build_fleet, connstr_of
from tests.operatorkit import as_user, run
from tests.runnerkit import RunnerProcess, wait_for

FAST = ("--poll-interval", "0.2", "--concurrency", "2", "--batch", "20", "--heartbeat-interval", "1")
CORE_STATE = Path(__file__).resolve().parent / "pgtap" / "include" / "core_state.psql"
ENQUEUE = "SELECT * FROM mailroom_fleet.enqueue(%(to)s, 'hi', 'body', p_delivery_key => %(key)s, p_stream => %(stream)s)"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:40]


def _sent_by_key(sink: Sink, keys) -> dict[str, int]:
    """How many times the sink accepted the mail of each delivery key (its
    Message-ID is <digest(key).id@domain>, whatever shard sent it)."""
    by_digest = Counter()
    for mid, n in sink.accepted_ids().items():
        by_digest[mid.strip("<>").split(".", 1)[0]] += n
    return {k: by_digest.get(_digest(k), 0) for k in keys}


def _address_in(fleet, partition: int, name: str) -> str:
    with fleet.call() as c:
        for i in range(1000):
            address = f"{name}{i}@reshard.example"
            if c.execute("SELECT mailroom_fleet.partition_of(%s) AS p", (address,)).fetchone()["p"] == partition:
                return address
    raise AssertionError(f"no address of partition {partition}")


class Application:
    """The sender's application: one fleet enqueue after another (autocommit,
    a new delivery key each), recording where each landed, until stopped."""

    def __init__(self, fleet, prefix: str, pace: float = 0.03):
        self.fleet, self.prefix, self.pace = fleet, prefix, pace
        self.landed: dict[str, str] = {}        # delivery key -> shard
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.fleet.call() as c:
            i = 0
            while not self._stop.wait(self.pace):
                i += 1
                key = f"{self.prefix}-{i}"
                try:
                    row = c.execute(ENQUEUE, {"to": f"{self.prefix}{i}@app.example", "key": key,
                                              "stream": "transactional"}).fetchone()
                    self.landed[key] = row["shard"]
                except psycopg.Error as e:
                    self.errors.append(f"{key}: {e}")

    def __enter__(self) -> "Application":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def count(self) -> int:
        return len(self.landed)


class Runners:
    """A fleet of runner processes over a list of shard DSNs, restarted one at
    a time with another list (SIGTERM: in-flight sends finish and are
    recorded, the rest is released)."""

    def __init__(self, sink: Sink, dsns: list[str], n: int = 2):
        self.sink = sink
        self.procs = [self._start(dsns, i) for i in range(n)]

    def _start(self, dsns: list[str], i: int) -> RunnerProcess:
        extra = [arg for dsn in dsns[1:] for arg in ("--dsn", dsn)]
        return RunnerProcess(dsns[0], self.sink.url(), *extra, "--worker", f"reshard-{i}", *FAST)

    def restart_with(self, dsns: list[str]) -> None:
        for i, proc in enumerate(self.procs):
            assert proc.stop(60) == 0, proc.log()
            proc.close()
            self.procs[i] = self._start(dsns, i)

    def close(self) -> None:
        for proc in self.procs:
            code = proc.stop(60)
            assert code == 0, proc.log()
            proc.close()


def _live(url: str) -> int:
    """Mail the shard still has to send: its hot queue and campaign mail not queued yet."""
    with connect(url) as c:
        return c.execute("SELECT (SELECT count(*) FROM mailroom.queue)"
                         " + (SELECT coalesce(sum(unqueued), 0) FROM mailroom.campaign_backlog) AS n").fetchone()["n"]


def _mail(url: str, key: str) -> dict | None:
    with connect(url) as c:
        return c.execute("SELECT status, status_reason FROM mailroom.messages WHERE delivery_key = %s",
                         (key,)).fetchone()


def _cli(*args: str) -> tuple[int, dict]:
    code, out, err = run("fleet", *args, "--json")
    try:
        return code, json.loads(out)
    except json.JSONDecodeError:
        raise AssertionError(f"mailroom fleet {args}: exit {code}, {out!r} {err!r}") from None


@contextmanager
def _running(sink: Sink, dsns: list[str]):
    runners = Runners(sink, dsns)
    try:
        yield runners
    finally:
        runners.close()


def test_adding_a_shard_with_mail_in_flight_loses_nothing_and_sends_nothing_twice(server_url, template_db):
    """Two shards under four partitions (p0, p2 on A; p1, p3 on B); C joins and
    takes p2, as docs/fleet.md "Adding a shard" says: copy the suppressions
    to C, move p2, settle, copy again (what was suppressed in between), then
    the runners get C's DSN, one restart at a time. The application enqueues
    all along; mail of p2 enqueued before the move is sent from A, after it
    from C."""
    with ExitStack() as stack:
        fleet = stack.enter_context(build_fleet(server_url, template_db))
        a_url, b_url = fleet.shards
        a, b = fleet.names
        c_url = stack.enter_context(cloned_database(server_url, template_db))
        c = psycopg.conninfo.conninfo_to_dict(c_url)["dbname"]
        sink = stack.enter_context(Sink(keep=True))

        # What must stay stopped once p2's addresses live on C: a fleet-wide
        # suppression, and two that only A knows (a bounce, an unsubscribe
        # from the broadcast stream), as A's inbound and unsubscribe service
        # record them.
        fleetwide = _address_in(fleet, 2, "fleetwide")
        bounced = _address_in(fleet, 2, "bounced")
        unsubscribed = _address_in(fleet, 2, "unsubscribed")
        late = _address_in(fleet, 2, "late")
        with fleet.call() as d:
            d.execute("SELECT * FROM mailroom_fleet.suppress(%s, 'complaint', 'fbl')", (fleetwide,)).fetchall()
        with fleet.shard(a) as sa:
            sa.execute("SELECT mailroom.suppress(%s, 'hard_bounce', 'smtp 5.1.1')", (bounced,))
            sa.execute("SELECT mailroom.suppress(%s, 'unsubscribed', 'one-click', 'broadcast')", (unsubscribed,))

        runners = stack.enter_context(_running(sink, [a_url, b_url]))
        app = stack.enter_context(Application(fleet, "add"))
        wait_for(lambda: sink.received >= 20, timeout=60, what="mail flowing before the change")
        # Enough keys that each partition has some before the change (0.75 ** 80 < 1e-9).
        wait_for(lambda: app.count() >= 80, timeout=90, what="the application enqueueing before the change")

        # 1. C gets the fleet's suppressions before it takes a partition.
        code, copied = _cli("copy-suppressions", "--from", a_url, "--from", b_url, "--to", c_url)
        assert code == 0 and copied["targets"][0]["database"] == c
        # A suppression made through the fleet now reaches A and B only.
        with fleet.call() as d:
            assert sorted(r["shard"] for r in d.execute(
                "SELECT shard FROM mailroom_fleet.suppress(%s, 'manual', 'late')", (late,))) == sorted([a, b])

        # 2. p2 moves to C; nothing serves C yet, so its new mail waits there.
        before_move = app.count()
        fleet.set_partitions({"p2": connstr_of(c_url)})
        code, settled = _cli("settle", "--dsn", as_user(fleet.directory, fleet.caller), "--timeout", "60")
        assert code == 0 and settled["settled"], settled
        keys = {}
        with fleet.call() as d:
            for name, address, stream in (("fleetwide", fleetwide, "transactional"),
                                          ("bounced", bounced, "transactional"),
                                          ("unsubscribed-broadcast", unsubscribed, "broadcast"),
                                          ("unsubscribed-transactional", unsubscribed, "transactional"),
                                          ("late", late, "transactional")):
                keys[name] = f"moved-{name}"
                row = d.execute(ENQUEUE, {"to": address, "key": keys[name], "stream": stream}).fetchone()
                assert row["shard"] == c, name
        # The fleet suppression made between the copy and the move is not on C yet.
        assert _mail(c_url, keys["late"])["status"] == "queued"

        # 3. The same copy again, after the settle: it brings what was
        # suppressed in between; then the runners may serve C.
        code, again = _cli("copy-suppressions", "--from", a_url, "--from", b_url, "--to", c_url)
        assert code == 0 and again["targets"][0]["new"] == 1, again
        runners.restart_with([a_url, b_url, c_url])
        wait_for(lambda: app.count() > before_move + 60, timeout=90, what="the application enqueueing after the move")
        app.stop()
        for url in (a_url, b_url, c_url):
            wait_for(lambda: _live(url) == 0, timeout=120, what=f"{url} drained")

        assert app.errors == []
        landed = app.landed
        assert {a, b, c} <= set(landed.values()), Counter(landed.values())
        sent = _sent_by_key(sink, [*landed, *keys.values()])
        assert {k: n for k, n in sent.items() if k in landed and n != 1} == {}, "lost or sent twice"
        assert sink.stats()["duplicates"] == 0
        # Stopped on C: the copied fleet-wide, bounce and scoped suppressions
        # (at enqueue), and the late one (at claim time, after the second copy).
        for name in ("fleetwide", "bounced", "unsubscribed-broadcast", "late"):
            assert sent[keys[name]] == 0 and _mail(c_url, keys[name]) == {
                "status": "cancelled", "status_reason": "suppressed"}, name
        assert sent[keys["unsubscribed-transactional"]] == 1   # the scope came along: broadcast only
        with connect(c_url) as sc:
            scopes = {(r["address"], r["stream"]): r["reason"] for r in sc.execute(
                "SELECT address, stream, reason FROM mailroom.suppressions")}
        assert scopes == {(fleetwide, None): "complaint", (bounced, None): "hard_bounce",
                          (unsubscribed, "broadcast"): "unsubscribed", (late, None): "manual"}
        # p2's addresses: before the move on A, after it on C.
        with fleet.call() as d:
            moved = [k for k in landed if d.execute("SELECT mailroom_fleet.partition_of(%s) AS p",
                                                    (k.replace("-", "") + "@app.example",)).fetchone()["p"] == 2]
        assert {landed[k] for k in moved} == {a, c}


def test_retiring_a_shard_with_mail_in_flight_drains_it_and_it_ends_empty(server_url, template_db):
    """Three shards under four partitions (p0, p3 on A; p1 on B; p2 on C); C
    retires as docs/fleet.md "Retiring a shard" says, with a campaign of its
    own still sending and an application transaction open across the move
    (PL/Proxy keeps routing it by the old map: `settle` waits for it). C
    ends drained, the runners drop it, it is made read-only, and a stale map
    that points at it again is refused naming it."""
    with ExitStack() as stack:
        fleet = stack.enter_context(build_fleet(server_url, template_db, shards=3))
        a_url, b_url, c_url = fleet.shards
        a, b, c = fleet.names
        directory = as_user(fleet.directory, fleet.caller)
        sink = stack.enter_context(Sink(keep=True))

        with connect(c_url) as sc:
            sc.execute("SELECT mailroom.upsert_template('retire-news', 'News', 'Hello {{ name }}')")
            campaign = sc.execute(
                "SELECT mailroom.enqueue_campaign('retire', 'retire-news', %s, p_stream => 'transactional',"
                " p_send_at => now() - interval '1 second') AS id",
                ("SELECT g::text AS recipient_id, 'camp' || g || '@c.example' AS email,"
                 " jsonb_build_object('name', 'User ' || g) AS vars FROM generate_series(1, 300) g",)).fetchone()["id"]
            campaign_keys = [r["delivery_key"] for r in sc.execute(
                "SELECT delivery_key FROM mailroom.contents WHERE campaign_id = %s", (campaign,))]
            bounced = _address_in(fleet, 2, "bounced")
            sc.execute("SELECT mailroom.suppress(%s, 'hard_bounce', 'smtp 5.1.1')", (bounced,))
        assert len(campaign_keys) == 300

        runners = stack.enter_context(_running(sink, [a_url, b_url, c_url]))
        app = stack.enter_context(Application(fleet, "retire"))
        wait_for(lambda: sink.received >= 20, timeout=60, what="mail flowing before the change")
        # Enough keys that each partition has some before the change (0.75 ** 80 < 1e-9).
        wait_for(lambda: app.count() >= 80, timeout=90, what="the application enqueueing before the change")

        # 1. C's suppressions onto the shards that stay.
        code, copied = _cli("copy-suppressions", "--from", c_url, "--to", a_url, "--to", b_url)
        assert code == 0 and [t["database"] for t in copied["targets"]] == [a, b]
        code, report = _cli("drained", "--dsn", c_url, "--directory", directory)
        assert code == 1 and report["left"][0] == {
            "what": "routed", "count": 1, "detail": "partition p2 of the map still names it: new mail lands here"}

        # An application transaction open across the move.
        old_map_address = _address_in(fleet, 2, "oldmap")
        held = stack.enter_context(fleet.call())
        held.autocommit = False
        assert held.execute(ENQUEUE, {"to": old_map_address, "key": "old-map-1",
                                      "stream": "transactional"}).fetchone()["shard"] == c

        # 2. p2 moves to B: new mail of its addresses lands on B.
        fleet.set_partitions({"p2": connstr_of(b_url)})
        with fleet.call() as d:
            assert d.execute(ENQUEUE, {"to": old_map_address, "key": "new-map-1",
                                       "stream": "transactional"}).fetchone()["shard"] == b
            assert d.execute(ENQUEUE, {"to": bounced, "key": "moved-bounced",
                                       "stream": "transactional"}).fetchone()["shard"] == b
        # ... but the transaction that began before keeps the old map.
        assert held.execute(ENQUEUE, {"to": old_map_address, "key": "old-map-2",
                                      "stream": "transactional"}).fetchone()["shard"] == c
        held_pid = held.info.backend_pid
        code, report = _cli("settle", "--dsn", directory, "--timeout", "1")
        assert code == 1 and not report["settled"] and held_pid in [r["pid"] for r in report["open"]], report
        held.commit()
        code, report = _cli("settle", "--dsn", directory, "--timeout", "60")
        assert code == 0 and report["settled"], report

        # 3. Again the suppressions (what C recorded meanwhile), then wait
        # until C has sent everything: its campaign, the old map's mail.
        code, _ = _cli("copy-suppressions", "--from", c_url, "--to", a_url, "--to", b_url)
        assert code == 0
        code, report = _cli("drained", "--dsn", c_url, "--directory", directory, "--wait", "180")
        assert code == 0 and report == {"shard": c, "drained": True, "left": []}, report

        # 4. The runners drop C, one restart at a time; C refuses new mail.
        runners.restart_with([a_url, b_url])
        with connect(fleet.directory) as d:
            d.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(sql.Identifier(c)))
            d.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (c,))
        after_move = app.count()
        wait_for(lambda: app.count() > after_move + 60, timeout=90, what="the application enqueueing after the move")
        app.stop()
        for url in (a_url, b_url):
            wait_for(lambda: _live(url) == 0, timeout=120, what=f"{url} drained")

        assert app.errors == []
        assert set(app.landed.values()) == {a, b, c}
        keys = [*app.landed, *campaign_keys, "old-map-1", "old-map-2", "new-map-1"]
        sent = _sent_by_key(sink, keys)
        assert {k: n for k, n in sent.items() if n != 1} == {}, "lost or sent twice"
        assert sink.stats()["duplicates"] == 0
        assert sent.get("moved-bounced", 0) == 0 and _mail(b_url, "moved-bounced") == {
            "status": "cancelled", "status_reason": "suppressed"}
        assert _live(c_url) == 0
        code, report = _cli("drained", "--dsn", c_url, "--directory", directory)
        assert code == 0 and report["drained"]
        with fleet.call() as d:
            assert sorted(r["shard"] for r in d.execute("SELECT shard FROM mailroom_fleet.shard_status()")) == \
                sorted([a, b])

        # 5. A stale map naming C again (a map restored from before the
        # change): the call fails naming C and why; nothing is written there;
        # `mailroom fleet check` names the partition.
        fleet.set_partitions({"p2": connstr_of(c_url)})
        try:
            with fleet.call() as d, pytest.raises(psycopg.Error) as refused:
                d.execute(ENQUEUE, {"to": old_map_address, "key": "stale-1", "stream": "transactional"})
            assert refused.value.sqlstate == "25006" and f"[{c}]" in str(refused.value), str(refused.value)
            assert "read-only transaction" in str(refused.value)
            assert _mail(c_url, "stale-1") is None
            code, report = _cli("check", "--dsn", directory)
            assert code == 1 and [(p["problem"], p["shard"], p["partitions"]) for p in report["problems"]] == [
                ("read_only", c, [2])]
        finally:
            fleet.set_partitions({"p2": connstr_of(b_url)})
        code, report = _cli("check", "--dsn", directory)
        assert code == 0 and report["problems"] == []


def test_a_fleet_call_against_a_stale_map_is_answered_clearly(server_url, template_db):
    """A partition at a database that is gone, at one with no mailroom schema,
    at a retired (read-only) shard: the routed call fails at once naming the
    database and why, nothing is written, and `mailroom fleet check` names
    the partition and the problem (shard_status marks the first two). One
    database behind two connect strings is named too."""
    with ExitStack() as stack:
        fleet = stack.enter_context(build_fleet(server_url, template_db))
        a_url, b_url = fleet.shards
        a, b = fleet.names
        empty = stack.enter_context(cloned_database(server_url, "template0"))
        empty_name = psycopg.conninfo.conninfo_to_dict(empty)["dbname"]
        directory = as_user(fleet.directory, fleet.caller)
        address = _address_in(fleet, 1, "stale")
        code, report = _cli("check", "--dsn", directory)
        assert code == 0 and report["problems"] == [] and len(report["map"]) == 4

        def refused(key: str) -> psycopg.Error:
            with fleet.call() as d, pytest.raises(psycopg.Error) as e:
                d.execute(ENQUEUE, {"to": address, "key": key, "stream": "transactional"})
            return e.value

        gone = f"{b}_gone"
        for target, name, state, says, problem in (
                (connstr_of(b_url).replace(b, gone), gone, "XX000", f'database "{gone}" does not exist', "unreachable"),
                (connstr_of(empty), empty_name, "3F000", 'schema "mailroom" does not exist', "no_mailroom_shard")):
            with fleet.shard_down(b, connstr=target):
                error = refused(f"stale-{problem}")
                code, report = _cli("check", "--dsn", directory)
                with fleet.call() as d:
                    status = {r["shard"]: r for r in d.execute("SELECT * FROM mailroom_fleet.shard_status()")}
            assert error.sqlstate == state and f"[{name}]" in str(error) and says in str(error), str(error)
            assert code == 1 and [(p["problem"], p["shard"], p["partitions"]) for p in report["problems"]] == [
                (problem, name, [1, 3])], report
            assert report["problems"][0]["detail"].startswith(f"partition p1, p3 (dbname {name}): ")
            assert status[name]["answered"] is False and status[a]["answered"] is True

        with connect(fleet.directory) as d:
            d.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(sql.Identifier(b)))
            d.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (b,))
        try:
            error = refused("stale-read-only")   # a new directory session: a new, read-only, connection to B
            code, report = _cli("check", "--dsn", directory)
        finally:
            with connect(fleet.directory) as d:
                d.execute(sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(sql.Identifier(b)))
                d.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (b,))
        assert error.sqlstate == "25006" and f"[{b}]" in str(error) and "read-only transaction" in str(error)
        assert code == 1 and [(p["problem"], p["shard"], p["partitions"]) for p in report["problems"]] == [
            ("read_only", b, [1, 3])]
        with fleet.shard(b) as sb:
            assert sb.execute("SELECT count(*) AS n FROM mailroom.contents WHERE delivery_key LIKE 'stale-%'"
                              ).fetchone()["n"] == 0

        with fleet.call() as d, pytest.raises(psycopg.Error) as bad:
            d.execute("SELECT * FROM mailroom_fleet.calls_begun_before(NULL)")
        assert bad.value.sqlstate == "22023" and "moment: required" in str(bad.value)

        fleet.set_partitions({"p3": connstr_of(b_url, application_name="alias")})
        try:
            code, report = _cli("check", "--dsn", directory)
        finally:
            fleet.set_partitions({"p3": connstr_of(b_url)})
        assert code == 1 and [(p["problem"], p["shard"], p["partitions"]) for p in report["problems"]] == [
            ("same_name_twice", b, [1, 3])]
        code, report = _cli("check", "--dsn", directory)
        assert code == 0 and report["problems"] == []


def test_drained_names_everything_a_shard_still_has_to_do(db_url, conn):
    """`mailroom fleet drained` as an operator login: each kind of work left
    is named with what to do about it; once it is done, exit 0."""
    role = f"t_drained_{hashlib.sha256(db_url.encode()).hexdigest()[:8]}"
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE mailroom_operator").format(sql.Identifier(role)))
    try:
        operator = as_user(db_url, role)
        code, report = _cli("drained", "--dsn", operator)
        assert code == 0 and report["drained"] and report["left"] == []

        conn.execute(CORE_STATE.read_text())  # pg_temp.t_mail, t_claim, t_end: mail in any state
        conn.execute("SELECT pg_temp.t_mail('due-1', 'default', now() - interval '1 minute')")
        conn.execute("SELECT pg_temp.t_mail('later-1', 'default', now(), p_run_at => now() + interval '1 hour')")
        conn.execute("SELECT pg_temp.t_mail('leased-1', 'default', now() - interval '1 minute')")
        conn.execute("SELECT pg_temp.t_claim('leased-1', 'w1', now(), '1 hour')")
        conn.execute("SELECT pg_temp.t_mail('rv-1', 'default', now() - interval '5 minutes', p_on_ambiguous => 'review')")
        conn.execute("SELECT pg_temp.t_claim('rv-1', 'w1', now() - interval '4 minutes')")
        conn.execute("SELECT pg_temp.t_end('rv-1', 'ambiguous', now() - interval '3 minutes', 'ambiguous')")
        conn.execute("SELECT mailroom.upsert_template('drain-news', 'News', 'Hello')")
        campaign = conn.execute(
            "SELECT mailroom.enqueue_campaign('drain', 'drain-news',"
            " 'SELECT g::text AS recipient_id, ''d'' || g || ''@example.org'' AS email FROM generate_series(1, 5) g',"
            " p_send_at => now() - interval '1 second') AS id").fetchone()["id"]
        conn.execute("SELECT mailroom.pause_campaign(%s)", (campaign,))
        conn.execute("SELECT mailroom.schedule_upsert('drain-weekly', 'sam@example.com', '0 8 * * 1', 'UTC',"
                     " 'drain-news')")
        conn.execute("SELECT mailroom.webhook_endpoint_set('drain-hook', 'https://hooks.example/x', 'k1',"
                     " p_from_start => true)")
        conn.execute("SELECT mailroom.suppress('event@example.com', 'manual')")  # an event for the hook

        code, report = _cli("drained", "--dsn", operator)
        left = {i["what"]: i for i in report["left"]}
        assert code == 1 and not report["drained"]
        assert sorted(left) == ["paused", "queued", "review", "schedules", "sending", "webhook drain-hook"], left
        assert left["queued"]["count"] == 2 and left["queued"]["detail"].startswith("1 due, 1 due later")
        assert left["sending"]["count"] == 1 and left["review"]["count"] == 1 and left["paused"]["count"] == 5
        assert "mailroom review" in left["review"]["detail"] and "resume" in left["paused"]["detail"]
        assert left["schedules"]["count"] == 1 and left["webhook drain-hook"]["count"] >= 1
        code, out, err = run("fleet", "drained", "--dsn", operator)
        assert code == 1 and "NOT DRAINED" in out and "! review 1: waiting for an operator decision" in out
        assert "is not drained: " in err

        ids = [r["id"] for r in conn.execute("SELECT id FROM mailroom.contents WHERE delivery_key IN"
                                             " ('due-1', 'later-1') OR campaign_id = %s", (campaign,))]
        conn.execute("SELECT * FROM mailroom.cancel(%s::bigint[], 'retired')", (ids,))
        conn.execute("SELECT pg_temp.t_end('leased-1', 'sent', now(), 'sent')")
        conn.execute("SELECT mailroom.resolve_review(pg_temp.t_id('rv-1'), 'cancel')")
        conn.execute("SELECT mailroom.schedule_set_active('drain-weekly', false)")
        conn.execute("SELECT mailroom.webhook_endpoint_delete('drain-hook')")
        code, report = _cli("drained", "--dsn", operator)
        assert code == 0 and report["left"] == [], report
    finally:
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_copying_suppressions_needs_a_source_that_can_read_them_all(db_url, conn, server_url, template_db):
    """The source's login must read mailroom.suppressions (no operator function
    lists them all): an operator login is refused with exit 4, saying so;
    the copy is idempotent and keeps every scope."""
    conn.execute("SELECT mailroom.suppress('one@example.com', 'hard_bounce', 'smtp 5.1.1')")
    conn.execute("SELECT mailroom.suppress('two@Example.COM', 'unsubscribed', 'one-click', 'broadcast')")
    role = f"t_copy_{hashlib.sha256(db_url.encode()).hexdigest()[:8]}"
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE mailroom_operator").format(sql.Identifier(role)))
    try:
        with cloned_database(server_url, template_db) as target:
            code, out, err = run("fleet", "copy-suppressions", "--from", as_user(db_url, role), "--to", target)
            assert code == 4 and "needs the table's owner (mailroom_owner) or a superuser" in err, (out, err)
            for expected_new in (2, 0):
                code, report = _cli("copy-suppressions", "--from", db_url, "--to", as_user(target, role))
                assert code == 0 and report["targets"][0]["new"] == expected_new, report
            with connect(target) as t:
                rows = t.execute("SELECT address, reason, source, stream FROM mailroom.suppressions"
                                 " ORDER BY address").fetchall()
        assert rows == [{"address": "one@example.com", "reason": "hard_bounce", "source": "smtp 5.1.1", "stream": None},
                        {"address": "two@Example.COM", "reason": "unsubscribed", "source": "one-click",
                         "stream": "broadcast"}]
    finally:
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
