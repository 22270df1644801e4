"""The upgrade from v0.5.0, the last release, with mail in flight: deploy
@v0.5.0, queue transactional and campaign mail, forget one address and
suppress another, read the event feed to its head, lease part of the mail,
deploy HEAD while the leases are held, report part of the old batch with the
old tokens, drain with the v0.5.0 runner unchanged against the new schema,
then with the current one (the rest of the old batch reclaimed), and revert
to @v0.5.0 with everything still there.

Every mail reaches the sink once (those the old runner reported itself not at
all), the forgotten and the suppressed address are never mailed (also mail
enqueued to them after the upgrade), the feed read from the cursor taken
before the upgrade has exactly one sent event per mail sent, and
integrity_problems() finds nothing."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from mailroom.dev.sink import Sink
from mailroom.send.render import message_id
from tests.runnerkit import MID_DOMAIN, wait_for
from tests.test_upgrade import empty_db, expire_leases, released_runner, report_sent, sqitch  # noqa: F401 (empty_db is a fixture)
from tests.test_upgrade_v04 import drain, unsubscribe_args  # noqa: F401 (unsubscribe_args is a fixture)

RELEASE = "v0.5.0"
TRANSACTIONAL = 300
LEASED = 150              # of the transactional mail, by a v0.5.0 runner before the deploy
REPORTED_AFTER_DEPLOY = 50
CAMPAIGN = 200
FORGOTTEN = "gone@example.com"
SUPPRESSED = "ann@example.com"
DELIVERED = TRANSACTIONAL + CAMPAIGN


@pytest.fixture
def v05_runner(tmp_path: Path) -> Path:
    return released_runner(RELEASE, tmp_path / "release")


def sent_events_since(conn: psycopg.Connection, cursor: str | None) -> tuple[Counter, str | None]:
    """Every event after cursor, page by page: (kinds counted, the last cursor)."""
    kinds: Counter = Counter()
    while True:
        page = conn.execute("SELECT cursor, kind FROM mailroom.events_since(%s, 1000)", [cursor]).fetchall()
        if not page:
            return kinds, cursor
        kinds.update(r["kind"] for r in page)
        cursor = page[-1]["cursor"]


def test_upgrade_from_v050_with_mail_in_flight(empty_db, v05_runner, unsubscribe_args):
    url, target = empty_db
    sqitch(target, "deploy", "--to", f"@{RELEASE}")
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("SELECT mailroom.enqueue('u' || i || '@example.com', 'Upgrade', 'body',"
                     " p_delivery_key => 'upgrade-' || i) FROM generate_series(1, %s) AS i", [TRANSACTIONAL])
        conn.execute("SELECT mailroom.enqueue(%s, 'Upgrade', 'body', p_delivery_key => 'to-gone')", [FORGOTTEN])
        conn.execute("SELECT * FROM mailroom.forget(%s)", [FORGOTTEN])
        conn.execute("SELECT mailroom.suppress(%s, 'hard_bounce', 'smtp 550 5.1.1')", [SUPPRESSED])
        conn.execute("SELECT mailroom.upsert_template('news', 'News', 'Hello {{ name }}')")
        conn.execute("CREATE TABLE public.readers AS SELECT g AS id, 'reader' || g || '@example.org' AS email"
                     " FROM generate_series(1, %s) g", [CAMPAIGN])
        # Below the transactional mail, so the old runner's lease takes transactional mail only.
        conn.execute("SELECT mailroom.enqueue_campaign('autumn', 'news', $$SELECT id AS recipient_id, email,"
                     " jsonb_build_object('name', 'R' || id) AS vars FROM public.readers$$, p_priority => -1)")
        conn.execute("SELECT mailroom.webhook_endpoint_set('shop', 'https://shop.example/hooks', 'shopkey')")
        _, before = sent_events_since(conn, None)
        leased = conn.execute("SELECT id, lease_token FROM mailroom.claim_batch('old-runner', %s, '10 minutes')",
                              [LEASED]).fetchall()
        assert len(leased) == LEASED

        sqitch(target, "deploy")

        assert conn.execute("SELECT mailroom.is_forgotten(%s) AS f", [FORGOTTEN]).fetchone() == {"f": True}
        assert conn.execute("SELECT count(*) AS n FROM mailroom.integrity_problems()").fetchone()["n"] == 0
        # The endpoint kept its cursor; no runner holds its key, which the status now says.
        shop = conn.execute("SELECT cursor, warning FROM mailroom.webhook_status WHERE name = 'shop'").fetchone()
        assert shop["warning"].startswith("no runner has offered the key shopkey")
        # Mail to either address after the upgrade is recorded, never sent.
        for to in (FORGOTTEN, SUPPRESSED):
            conn.execute("SELECT mailroom.enqueue(%s, 'After', 'body', p_delivery_key => 'after-' || %s)", [to, to])

        # The old runner finishes part of its batch after the deploy, with its old tokens.
        reported = leased[:REPORTED_AFTER_DEPLOY]
        report_sent(conn, reported)

        with Sink(keep=True) as sink:
            # The v0.5.0 runner, unchanged, sends what is queued against the new schema.
            drain(url, sink, *unsubscribe_args, env={"PYTHONPATH": str(v05_runner)})
            assert sink.received == TRANSACTIONAL - LEASED + CAMPAIGN, "the v0.5.0 runner did not drain"
            # The rest of the old batch is given up for lost: the current runner reclaims and sends it.
            expire_leases(conn)
            drain(url, sink, *unsubscribe_args)
            accepted = sink.accepted_ids()
            recipients = {rcpt for m in sink.messages for rcpt in m["rcpt_tos"]}

        counts = {r["status"]: r["n"] for r in
                  conn.execute("SELECT status, count(*) AS n FROM mailroom.messages GROUP BY 1")}
        assert counts == {"sent": DELIVERED, "cancelled": 3}, counts
        assert not recipients & {FORGOTTEN, SUPPRESSED, "erased@erased.invalid"}
        assert len(recipients) == DELIVERED - REPORTED_AFTER_DEPLOY
        assert conn.execute("SELECT count(*) AS n FROM mailroom.queue").fetchone()["n"] == 0
        reported_ids = [r["id"] for r in reported]
        expected = conn.execute("SELECT id, delivery_key FROM mailroom.messages"
                                " WHERE status = 'sent' AND id <> ALL (%s)", [reported_ids]).fetchall()
        assert accepted == Counter(message_id(r["delivery_key"], r["id"], MID_DOMAIN) for r in expected)
        # The feed goes on from the cursor taken before the upgrade: one sent event per mail.
        # (Events are handed out once every transaction open when they were
        # written has ended: other tests' transactions can hold the last back.)
        after = wait_for(lambda: (lambda kinds: kinds if kinds["sent"] >= DELIVERED else None)(
            sent_events_since(conn, before)[0]), timeout=60, what="every sent event handed out")
        assert after["sent"] == DELIVERED, after
        assert conn.execute("SELECT count(*) AS n FROM mailroom.integrity_problems()").fetchone()["n"] == 0

    sqitch(target, "revert", "-y", "--to", f"@{RELEASE}")
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        back = {r["status"]: r["n"] for r in
                conn.execute("SELECT status, count(*) AS n FROM mailroom.messages GROUP BY 1")}
        assert back == {"sent": DELIVERED, "cancelled": 3}, back
        assert conn.execute("SELECT mailroom.is_forgotten(%s) AS f", [FORGOTTEN]).fetchone() == {"f": True}
        assert conn.execute("SELECT cursor FROM mailroom.webhook_status WHERE name = 'shop'"
                            ).fetchone() == {"cursor": shop["cursor"]}
        assert conn.execute("SELECT count(*) AS n FROM mailroom.integrity_problems()").fetchone()["n"] == 0
    sqitch(target, "deploy")
