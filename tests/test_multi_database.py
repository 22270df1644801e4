"""One runner process serving several databases (mailroom run --dsn A --dsn B)."""

from __future__ import annotations

import re

import psycopg
import pytest
from psycopg import sql

from mailroom.dev.sink import Sink
from tests.conftest import cloned_database, connect
from tests.runnerkit import RunnerProcess, enqueue, enqueue_many, parse, settled, statuses, wait_for

FAST = ("--poll-interval", "0.2", "--concurrency", "2", "--batch", "20", "--heartbeat-interval", "1")


@pytest.fixture
def second_db_url(server_url, template_db):
    with cloned_database(server_url, template_db) as url:
        yield url


@pytest.fixture
def sink():
    with Sink(keep=True) as s:
        yield s


def _dbname(url: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(url)["dbname"]


def _label(url: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    return f"{info['host']}:{info['port']}/{info['dbname']}"


def test_one_runner_drains_two_databases_each_with_its_own_templates(db_url, second_db_url, sink):
    """Each mail is rendered from its own database's template of that name,
    and its outcome lands in the database it came from."""
    with connect(db_url) as a, connect(second_db_url) as b:
        for c, name in ((a, "A"), (b, "B")):
            c.execute("SELECT mailroom.upsert_template('welcome', %s, %s, NULL)",
                      (f"Welcome from {name}", f"Body of shard {name}, {{{{ who }}}}"))
            for i in range(30):
                enqueue(c, f"{name.lower()}{i}@example.com", template="welcome", vars={"who": f"{name}{i}"},
                        delivery_key=f"{name}-{i}")
        with RunnerProcess(db_url, sink.url(), "--dsn", second_db_url, "--exit-when-idle", *FAST) as r:
            assert r.wait(120) == 0, r.log()
            log = r.log()
        assert statuses(a) == {"sent": 30} and statuses(b) == {"sent": 30}
        for c in (a, b):
            assert c.execute("SELECT count(*) AS n FROM mailroom.attempts WHERE outcome = 'sent'"
                             ).fetchone()["n"] == 30
    by_rcpt = {m["rcpt_tos"][0]: parse(m["data"]) for m in sink.messages}
    assert len(sink.messages) == 60 == len(by_rcpt)
    for name in "AB":
        for i in range(30):
            mail = by_rcpt[f"{name.lower()}{i}@example.com"]
            assert mail["Subject"] == f"Welcome from {name}"
            assert mail.get_content().strip() == f"Body of shard {name}, {name}{i}"
    assert f"databases={_label(db_url)},{_label(second_db_url)}" in log


def test_claims_alternate_between_databases_that_both_have_mail(db_url, second_db_url):
    """Neither database waits for the other to drain: with room for one
    batch at a time (batch 20 > twice the concurrency), claims take turns."""
    with connect(db_url) as a, connect(second_db_url) as b:
        enqueue_many(a, "a", 100)
        enqueue_many(b, "b", 100)
        with RunnerProcess(db_url, "null://", "--dsn", second_db_url, "--exit-when-idle", *FAST) as r:
            assert r.wait(120) == 0, r.log()
        claims = []
        for c, name in ((a, "A"), (b, "B")):
            assert statuses(c) == {"sent": 100}
            rows = c.execute("SELECT claimed_at, count(*)::int AS n FROM mailroom.attempts"
                             " GROUP BY claimed_at ORDER BY claimed_at").fetchall()
            assert [row["n"] for row in rows] == [20] * 5
            claims += [(row["claimed_at"], name) for row in rows]
    order = "".join(name for _, name in sorted(claims))
    assert order in ("ABABABABAB", "BABABABABA"), order


def _set_read_only(admin, dbname: str, read_only: bool) -> None:
    admin.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = {}").format(
        sql.Identifier(dbname), sql.Literal("on" if read_only else "off")))
    # Sessions read the setting when they start: end the ones open now.
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                  " WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,))


def _settled(url: str, total: int) -> bool:
    with connect(url) as c:  # a new session: the test ends B's sessions to change its mode
        return settled(c, total)


def test_a_read_only_database_waits_while_the_other_flows(server_url, db_url, second_db_url, sink):
    """B is read-only (a failed-over replica, say): its claims are refused
    (25006) and retried with backoff; A's mail all goes meanwhile, and B's
    goes once it is writable again. Nothing lost, nothing sent twice."""
    with connect(db_url) as a, connect(second_db_url) as b:
        enqueue_many(a, "a", 40)
        enqueue_many(b, "b", 40)
    with connect(server_url) as admin:
        _set_read_only(admin, _dbname(second_db_url), True)
        try:
            with RunnerProcess(db_url, sink.url(), "--dsn", second_db_url, *FAST) as r:
                wait_for(lambda: _settled(db_url, 40), 120, what="database A drained")
                wait_for(lambda: re.search(rf"db\.down .*25006.*database={re.escape(_label(second_db_url))}",
                                           r.log()), 60, what="db.down for B in the log")
                # More mail for A while B still refuses: it flows too.
                with connect(db_url) as a:
                    enqueue_many(a, "a-more", 10)
                wait_for(lambda: _settled(db_url, 50), 120, what="A's later mail")
                with connect(second_db_url) as b:
                    assert statuses(b) == {"queued": 40}
                _set_read_only(admin, _dbname(second_db_url), False)
                wait_for(lambda: _settled(second_db_url, 40), 120, what="database B drained once writable")
                wait_for(lambda: re.search(rf"db\.up .*database={re.escape(_label(second_db_url))}", r.log()),
                         30, what="db.up for B")
                assert r.stop() == 0, r.log()
        finally:
            _set_read_only(admin, _dbname(second_db_url), False)
    with connect(db_url) as a, connect(second_db_url) as b:
        assert statuses(a) == {"sent": 50} and statuses(b) == {"sent": 40}
    assert sink.stats()["duplicates"] == 0
    assert len(sink.messages) == 90 == len({m["rcpt_tos"][0] for m in sink.messages})


def test_each_database_has_its_own_heartbeat_row(db_url, second_db_url):
    with connect(db_url) as a, connect(second_db_url) as b:
        enqueue_many(a, "a", 7)
        enqueue_many(b, "b", 3)
        with RunnerProcess(db_url, "null://", "--dsn", second_db_url, "--worker", "fleet-1", *FAST) as r:
            wait_for(lambda: settled(a, 7) and settled(b, 3), 60, what="both drained")
            for c, sent in ((a, 7), (b, 3)):
                wait_for(lambda c=c, sent=sent: c.execute(
                    "SELECT sent FROM mailroom.runners WHERE worker = 'fleet-1'").fetchone() == {"sent": sent},
                    30, what="the heartbeat counts that database's own mail")
            assert r.stop() == 0, r.log()


def test_the_same_database_twice_and_a_stray_listen_dsn_are_refused(db_url):
    with RunnerProcess(db_url, "null://", "--dsn", db_url) as r:
        assert r.wait() == 2
        assert "the same database twice" in r.log()
    with RunnerProcess(db_url, "null://", "--listen-dsn", db_url) as r:
        assert r.wait() == 2
        assert "--listen-dsn goes with --pooled" in r.log()
