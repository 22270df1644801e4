"""The upgrade from v0.4.0, the last release, with mail in flight: deploy
@v0.4.0, queue mail (transactional mail, a campaign bigger than one lazy chunk
so part of it is still backlog, a paused campaign, mail to a mailbox whose
suppression v0.4.0 keyed under another spelling of its domain), lease part of
it, deploy HEAD while the leases are held, report part of the old batch with
the old tokens, drain with the v0.4.0 runner unchanged against the new schema,
then with the current one (the rest of the old batch reclaimed, the paused
campaign resumed), and revert to @v0.4.0 with everything still there.

Every mail reaches the sink once (those the old runner reported itself not at
all), the mailbox suppressed under the fullwidth spelling of its domain is
never mailed (HEAD's address_wire_form re-keys the suppression while the mail
waits), and integrity_problems() finds nothing."""

from __future__ import annotations

import base64
import os
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from mailroom.dev.sink import Sink
from mailroom.send.render import message_id
from tests.runnerkit import MID_DOMAIN, RunnerProcess
from tests.test_upgrade import empty_db, expire_leases, released_runner, report_sent, sqitch  # noqa: F401 (empty_db is a fixture)

RELEASE = "v0.4.0"
TRANSACTIONAL = 400
LEASED = 200              # of the transactional mail, by a v0.4.0 runner before the deploy
REPORTED_AFTER_DEPLOY = 100
CAMPAIGN = 5_100          # one lazy chunk is 5,000: 100 wait in the backlog through the upgrade
PAUSED = 50
SUPPRESSED_TO = "ann@example.com"
SUPPRESSED_AS = "ann@ｅｘａｍｐｌｅ.com"   # fullwidth: v0.4.0's key lower-cases it, HEAD maps it (UTS 46)
DELIVERED = TRANSACTIONAL + CAMPAIGN + PAUSED


@pytest.fixture
def v04_runner(tmp_path: Path) -> Path:
    return released_runner(RELEASE, tmp_path / "release")


@pytest.fixture
def unsubscribe_args(tmp_path: Path) -> tuple[str, ...]:
    """Campaign mail is broadcast mail, which carries one-click unsubscribe headers."""
    keys = tmp_path / "signing-keys"
    keys.write_text("k1=" + base64.urlsafe_b64encode(os.urandom(32)).decode() + "\n")
    return ("--unsubscribe-url", "https://u.example.org", "--signing-keys", str(keys))


def drain(url: str, sink: Sink, *args: str, env: dict | None = None) -> None:
    with RunnerProcess(url, sink.url(), "--exit-when-idle", "--poll-interval", "0.2", "--batch", "200",
                       *args, env=env) as runner:
        assert runner.wait(300) == 0, runner.log()


def test_upgrade_from_v040_with_mail_in_flight(empty_db, v04_runner, unsubscribe_args):
    url, target = empty_db
    sqitch(target, "deploy", "--to", f"@{RELEASE}")
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("SELECT mailroom.enqueue('u' || i || '@example.com', 'Upgrade', 'body',"
                     " p_delivery_key => 'upgrade-' || i) FROM generate_series(1, %s) AS i", [TRANSACTIONAL])
        conn.execute("SELECT mailroom.enqueue(%s, 'Upgrade', 'body', p_delivery_key => 'to-ann')", [SUPPRESSED_TO])
        conn.execute("SELECT mailroom.suppress(%s, 'hard_bounce', 'smtp 550 5.1.1')", [SUPPRESSED_AS])
        conn.execute("SELECT mailroom.upsert_template('news', 'News', 'Hello {{ name }}')")
        conn.execute("CREATE TABLE public.readers AS SELECT g AS id, 'reader' || g || '@example.org' AS email"
                     " FROM generate_series(1, %s) g", [CAMPAIGN + PAUSED])
        # Below the transactional mail, so the old runner's lease takes transactional mail only.
        spring = conn.execute("SELECT mailroom.enqueue_campaign('spring', 'news', $$SELECT id AS recipient_id,"
                              " email, jsonb_build_object('name', 'R' || id) AS vars FROM public.readers"
                              " WHERE id <= %s$$, p_priority => -1) AS id" % CAMPAIGN).fetchone()["id"]
        held = conn.execute("SELECT mailroom.enqueue_campaign('held', 'news', $$SELECT id AS recipient_id,"
                            " email, jsonb_build_object('name', 'R' || id) AS vars FROM public.readers WHERE id > %s$$, p_priority => -1) AS id"
                            % CAMPAIGN).fetchone()["id"]
        conn.execute("SELECT mailroom.pause_campaign(%s)", [held])
        backlog = conn.execute("SELECT count(*) AS n FROM mailroom.contents c WHERE c.campaign_id = %s"
                               " AND NOT EXISTS (SELECT FROM mailroom.queue q WHERE q.id = c.id)",
                               [spring]).fetchone()["n"]
        assert backlog == CAMPAIGN - 5_000, "part of the campaign waits in its backlog through the upgrade"
        leased = conn.execute("SELECT id, lease_token FROM mailroom.claim_batch('old-runner', %s, '10 minutes')",
                              [LEASED]).fetchall()
        assert len(leased) == LEASED

        sqitch(target, "deploy")

        assert conn.execute("SELECT address_key, stream, reason FROM mailroom.suppressions").fetchall() == \
            [{"address_key": SUPPRESSED_TO, "stream": None, "reason": "hard_bounce"}], "re-keyed, kept"
        assert conn.execute("SELECT status FROM mailroom.campaigns WHERE id = %s", [held]).fetchone() == \
            {"status": "paused"}
        assert conn.execute("SELECT count(*) AS n FROM mailroom.integrity_problems()").fetchone()["n"] == 0

        # The old runner finishes half of its batch after the deploy, with its old tokens.
        reported = leased[:REPORTED_AFTER_DEPLOY]
        report_sent(conn, reported)

        with Sink(keep=True) as sink:
            # The v0.4.0 runner, unchanged, sends what is queued against the new schema,
            # the campaign's backlog too; the paused campaign waits.
            drain(url, sink, *unsubscribe_args, env={"PYTHONPATH": str(v04_runner)})
            assert sink.received == TRANSACTIONAL - LEASED + CAMPAIGN, "the v0.4.0 runner did not drain"
            # The rest of the old batch is given up for lost, the paused campaign resumed:
            # the current runner reclaims and sends both.
            expire_leases(conn)
            conn.execute("SELECT mailroom.resume_campaign(%s)", [held])
            drain(url, sink, *unsubscribe_args)
            accepted = sink.accepted_ids()
            recipients = {rcpt for m in sink.messages for rcpt in m["rcpt_tos"]}

        counts = {r["status"]: r["n"] for r in
                  conn.execute("SELECT status, count(*) AS n FROM mailroom.messages GROUP BY 1")}
        assert counts == {"sent": DELIVERED, "cancelled": 1}, counts
        assert conn.execute("SELECT to_address, status_reason FROM mailroom.messages WHERE status = 'cancelled'"
                            ).fetchall() == [{"to_address": SUPPRESSED_TO, "status_reason": "suppressed"}]
        assert SUPPRESSED_TO not in recipients and len(recipients) == DELIVERED - REPORTED_AFTER_DEPLOY
        assert conn.execute("SELECT count(*) AS n FROM mailroom.queue").fetchone()["n"] == 0
        # Every mail reached the sink once, except those the old runner reported itself.
        reported_ids = [r["id"] for r in reported]
        expected = conn.execute("SELECT id, delivery_key FROM mailroom.messages"
                                " WHERE status = 'sent' AND id <> ALL (%s)", [reported_ids]).fetchall()
        assert accepted == Counter(message_id(r["delivery_key"], r["id"], MID_DOMAIN) for r in expected)
        ledger = conn.execute(
            "SELECT count(*) FILTER (WHERE finished_as = 'sent') AS finished,"
            "       count(*) FILTER (WHERE outcome = 'expired') AS expired,"
            "       count(DISTINCT message_id) FILTER (WHERE finished_as IS NOT NULL) AS mails"
            " FROM mailroom.attempts").fetchone()
        assert ledger == {"finished": DELIVERED, "expired": LEASED - REPORTED_AFTER_DEPLOY, "mails": DELIVERED + 1}
        assert conn.execute("SELECT count(*) AS n FROM mailroom.integrity_problems()").fetchone()["n"] == 0

    sqitch(target, "revert", "-y", "--to", f"@{RELEASE}")
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        back = {r["status"]: r["n"] for r in
                conn.execute("SELECT status, count(*) AS n FROM mailroom.messages GROUP BY 1")}
        assert back == {"sent": DELIVERED, "cancelled": 1}, back
        assert conn.execute("SELECT count(*) AS n FROM mailroom.suppressions").fetchone()["n"] == 1
        assert conn.execute("SELECT count(*) AS n FROM mailroom.integrity_problems()").fetchone()["n"] == 0
    sqitch(target, "deploy")
