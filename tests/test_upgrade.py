"""The upgrade from the last release with mail in flight (issue 13, "An upgrade,
not a rewrite"): deploy @v0.3.0, queue mail and lease part of it, deploy HEAD
while the leases are held, finish with the v0.3.0 runner and then a v0.4 one,
and revert to @v0.3.0 with everything still there. Streams (issue 15): the
upgrade gives v0.3 campaign mail the broadcast stream and all other mail
transactional, and keeps every existing suppression for all streams."""

from __future__ import annotations

import hashlib
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from mailroom.dev.embedded import project_root
from mailroom.send.render import message_id
from mailroom.dev.sink import Sink
from tests.conftest import with_database
from tests.runnerkit import MID_DOMAIN, RunnerProcess

RELEASE = "v0.3.0"
MAILS = 1000
LEASED = 300
REPORTED_AFTER_DEPLOY = 100  # of the leased: the old runner reports them once HEAD is deployed
CAMPAIGN_MAILS = 1  # besides MAILS: a v0.3 campaign's mail, broadcast after the upgrade
TOTAL = MAILS + CAMPAIGN_MAILS


def v03_message_id(delivery_key: str) -> str:
    """The Message-ID a v0.3.0 runner gives a mail: the key's digest without the mail's id."""
    return f"<{hashlib.sha256(delivery_key.encode()).hexdigest()[:40]}@{MID_DOMAIN}>"


def sqitch(target: str, *args: str) -> None:
    done = subprocess.run(["sqitch", *args, "--target", target], cwd=project_root(),
                          capture_output=True, text=True)
    assert done.returncode == 0, f"sqitch {' '.join(args)} failed:\n{done.stdout}{done.stderr}"


@pytest.fixture
def empty_db(server_url):
    name = "upgrade_" + uuid.uuid4().hex[:10]
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = with_database(server_url, name)
    try:
        yield url, "db:pg:" + url.split(":", 1)[1]
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def released_runner(release: str, into: Path) -> Path:
    """The runner package exactly as released, to run against the new schema."""
    # The release is the commit that added its tag to the plan (git tags do not
    # always travel with a clone; the plan's history does).
    released = subprocess.run(["git", "log", "-S", f"@{release} ", "--format=%H", "--reverse", "--", "sqitch.plan"],
                              cwd=project_root(), capture_output=True, text=True).stdout.split()
    if not released:
        pytest.fail(f"no commit adds @{release} to sqitch.plan (a shallow clone?)")
    archive = subprocess.run(["git", "archive", "--format=tar", released[0], "runner/mailroom"],
                             cwd=project_root(), capture_output=True)
    if archive.returncode != 0:
        pytest.fail(f"git archive of the {release} commit failed: {archive.stderr.decode()}")
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "runner"


def report_sent(conn: psycopg.Connection, leased: list[dict]) -> None:
    """An old runner reporting its batch after the deploy, with the tokens of its old leases."""
    results = [{"id": r["id"], "token": str(r["lease_token"]), "outcome": "sent", "smtp_code": 250}
               for r in leased]
    assert conn.execute("SELECT mailroom.mark_outcomes(%s::jsonb) AS n",
                        [Jsonb(results)]).fetchone()["n"] == len(results)


def expire_leases(conn: psycopg.Connection) -> None:
    """The rest of an old batch given up for lost: its leases end now, so reclaim hands it out."""
    conn.execute("UPDATE mailroom.queue SET leased_until = now() - interval '1 second' WHERE status = 'sending'")


@pytest.fixture
def release_runner(tmp_path: Path) -> Path:
    return released_runner(RELEASE, tmp_path)


def test_upgrade_from_last_release_with_mail_in_flight(empty_db, release_runner):
    url, target = empty_db
    sqitch(target, "deploy", "--to", f"@{RELEASE}")
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("SELECT mailroom.enqueue('u' || i || '@example.com', 'Upgrade', 'body',"
                     " p_delivery_key => 'upgrade-' || i) FROM generate_series(1, %s) AS i", [MAILS])
        conn.execute("SELECT mailroom.suppress('Gone@Example.com', 'hard_bounce', 'smtp 550 5.1.1')")
        conn.execute("SELECT mailroom.upsert_template('news', 'News', 'Hello')")
        conn.execute("SELECT mailroom.enqueue_campaign('v03', 'news', $$SELECT 1 AS recipient_id,"
                     " 'reader@example.com' AS email$$, p_priority => -1)")  # after the leased batch
        leased = conn.execute("SELECT id, lease_token FROM mailroom.claim_batch('old-runner', %s, '10 minutes')",
                              [LEASED]).fetchall()
        assert len(leased) == LEASED

        sqitch(target, "deploy")

        streams = {(r["campaign"], r["stream"]): r["n"] for r in conn.execute(
            "SELECT campaign_id IS NOT NULL AS campaign, stream, count(*) AS n FROM mailroom.contents GROUP BY 1, 2")}
        assert streams == {(False, "transactional"): MAILS, (True, "broadcast"): CAMPAIGN_MAILS}
        assert conn.execute("SELECT address, stream, reason FROM mailroom.suppressions").fetchall() == \
            [{"address": "Gone@Example.com", "stream": None, "reason": "hard_bounce"}], "kept for all streams"
        assert conn.execute("SELECT stream FROM mailroom.campaigns").fetchall() == [{"stream": "broadcast"}]

        # The old runner finishes a third of its batch after the deploy, with its old tokens.
        reported = leased[:REPORTED_AFTER_DEPLOY]
        report_sent(conn, reported)

        # The v0.3.0 runner, unchanged, sends the queued mail against the new schema ...
        with Sink(keep=True) as sink:
            env = {"PYTHONPATH": str(release_runner)}
            with RunnerProcess(url, sink.url(), "--exit-when-idle", "--poll-interval", "0.2",
                               "--batch", "50", env=env, without_unsubscribe=False) as old:
                assert old.wait(120) == 0, old.log()
            assert sink.received == TOTAL - LEASED, "the v0.3.0 runner did not send the queued mail"

            # ... then the rest of the old batch is given up for lost: its leases end and a
            # v0.4 runner reclaims and sends it.
            expire_leases(conn)
            with RunnerProcess(url, sink.url(), "--exit-when-idle", "--poll-interval", "0.2",
                               "--batch", "50") as new:
                assert new.wait(120) == 0, new.log()
            sent_ids = set(sink.accepted_ids())

        counts = {r["status"]: r["n"] for r in
                  conn.execute("SELECT status, count(*) AS n FROM mailroom.messages GROUP BY 1")}
        assert counts == {"sent": TOTAL}, counts
        assert conn.execute("SELECT count(*) AS n FROM mailroom.queue").fetchone()["n"] == 0
        # Every mail reached the sink once, except those the old runner reported itself.
        # The v0.3.0 runner wrote <digest@domain>, a v0.4 one <digest.id@domain>.
        leased_ids = {r["id"] for r in leased}
        rest = conn.execute("SELECT id, delivery_key FROM mailroom.messages WHERE id <> ALL (%s)",
                            [[r["id"] for r in reported]]).fetchall()
        assert sent_ids == {message_id(r["delivery_key"], r["id"], MID_DOMAIN) if r["id"] in leased_ids
                            else v03_message_id(r["delivery_key"]) for r in rest}
        # The ledger is complete: one finishing row per mail; the given-up leases show as expired.
        ledger = conn.execute(
            "SELECT count(*) FILTER (WHERE finished_as = 'sent') AS finished,"
            "       count(*) FILTER (WHERE outcome = 'expired') AS expired,"
            "       count(*) FILTER (WHERE reported = 'sent') AS reported_sent,"
            "       count(DISTINCT message_id) FILTER (WHERE finished_as IS NOT NULL) AS mails"
            " FROM mailroom.attempts").fetchone()
        assert ledger == {"finished": TOTAL, "expired": LEASED - REPORTED_AFTER_DEPLOY,
                          "reported_sent": TOTAL, "mails": TOTAL}
        assert conn.execute("SELECT count(*) AS n FROM mailroom.integrity_problems()").fetchone()["n"] == 0

    sqitch(target, "revert", "-y", "--to", f"@{RELEASE}")
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        back = conn.execute("SELECT status, count(*) AS n, count(sent_at) AS with_sent_at"
                            " FROM mailroom.messages GROUP BY status").fetchall()
        assert back == [{"status": "sent", "n": TOTAL, "with_sent_at": TOTAL}]
        assert conn.execute("SELECT address FROM mailroom.suppressions").fetchall() == [{"address": "Gone@Example.com"}]
        assert conn.execute("SELECT count(*) AS n FROM mailroom.attempts WHERE delivery_key IS NULL"
                            ).fetchone()["n"] == 0
    sqitch(target, "deploy")
