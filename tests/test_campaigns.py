"""Campaigns end to end against a real SMTP server on loopback.

Two campaigns queued together are sent strictly by priority; a campaign
paused mid-send loses no mail and sends none after the batch in flight; resume
completes it with no duplicate at the sink.

main has no runner yet, so `send_batch` below is a minimal one built on the
same SQL API the runner uses: claim_batch -> SMTP (smtplib to an aiosmtpd
sink) -> mark_outcomes. Swap it for `mailroom run` once the runner lands.
"""

from __future__ import annotations

import email
import json
import smtplib
import socket
import threading
from collections import Counter
from email.message import EmailMessage

import pytest
from aiosmtpd.controller import Controller

from tests.conftest import connect


class Sink:
    """Records the delivery key of every mail it accepts, in arrival order."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self._lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd hook name)
        key = email.message_from_bytes(envelope.content)["X-Mailroom-Key"]
        with self._lock:
            self.keys.append(key)
        return "250 OK"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def sink():
    handler = Sink()
    controller = Controller(handler, hostname="127.0.0.1", port=_free_port())
    controller.start()
    try:
        with smtplib.SMTP(controller.hostname, controller.port, timeout=10) as smtp:
            yield handler, smtp
    finally:
        controller.stop()


def send_batch(conn, smtp: smtplib.SMTP, limit: int) -> list[str]:
    """One runner iteration: claim, send over SMTP, report. Returns the keys sent."""
    rows = conn.execute(
        "SELECT id, lease_token, delivery_key, to_address, subject, template_key"
        " FROM mailroom.claim_batch('test-runner', %s, '5 minutes')",
        (limit,),
    ).fetchall()
    results = []
    for row in rows:
        msg = EmailMessage()
        msg["From"] = "mailroom@example.org"
        msg["To"] = row["to_address"]
        msg["Subject"] = row["subject"] or row["template_key"]
        msg["X-Mailroom-Key"] = row["delivery_key"]
        msg.set_content("hello")
        smtp.send_message(msg)
        results.append({"id": row["id"], "token": str(row["lease_token"]), "outcome": "sent"})
    if results:
        conn.execute("SELECT mailroom.mark_outcomes(%s::jsonb)", (json.dumps(results),))
    return [r["delivery_key"] for r in rows]


def drain(conn, smtp, limit: int) -> None:
    while send_batch(conn, smtp, limit):
        pass


@pytest.fixture
def users(conn):
    conn.execute("SELECT mailroom.upsert_template('news', 'News', 'Hello {{ name }}')")
    conn.execute(
        "CREATE TABLE public.users AS SELECT g AS id, 'user' || g || '@example.org' AS email"
        " FROM generate_series(1, 100) g"
    )
    conn.execute("GRANT SELECT ON public.users TO mailroom_app")


def enqueue_campaign(conn, name: str, where: str, priority: int) -> int:
    """As the application role: the recipients query runs with its rights."""
    conn.execute("SET ROLE mailroom_app")
    try:
        return conn.execute(
            "SELECT mailroom.enqueue_campaign(%s, 'news', %s, p_priority => %s, p_send_at => now() - interval '1 second')"
            " AS id",
            (name, f"SELECT id AS recipient_id, email FROM public.users WHERE {where}", priority),
        ).fetchone()["id"]
    finally:
        conn.execute("RESET ROLE")


def test_priority_10_is_sent_before_priority_0(conn, users, sink):
    handler, smtp = sink
    low = enqueue_campaign(conn, "low", "id <= 40", 0)      # queued first
    high = enqueue_campaign(conn, "high", "id > 60", 10)
    drain(conn, smtp, limit=15)

    assert len(handler.keys) == 80
    kinds = [int(k.split(":")[1]) for k in handler.keys]
    assert kinds == [high] * 40 + [low] * 40, "every priority-10 mail went out before any priority-0 mail"
    assert not [k for k, n in Counter(handler.keys).items() if n > 1]


def test_pause_mid_send_then_resume_sends_everyone_once(db_url, conn, users, sink):
    handler, smtp = sink
    campaign = enqueue_campaign(conn, "spring", "true", 0)
    conn.execute("SELECT mailroom.enqueue('ops@example.org', 'Other mail', 'Body', p_delivery_key => 'other-1', p_priority => -5)")

    # The runner has claimed a batch of 10 and is sending it when an operator
    # (another session) pauses the campaign.
    rows = conn.execute(
        "SELECT id, lease_token, delivery_key, to_address, subject, template_key"
        " FROM mailroom.claim_batch('test-runner', 10, '5 minutes')"
    ).fetchall()
    with connect(db_url) as operator:
        held = operator.execute("SELECT mailroom.pause_campaign(%s) AS n", (campaign,)).fetchone()["n"]
    assert held == 90
    results = []
    for row in rows:
        msg = EmailMessage()
        msg["To"] = row["to_address"]
        msg["Subject"] = "News"
        msg["X-Mailroom-Key"] = row["delivery_key"]
        msg.set_content("hello")
        smtp.send_message(msg)
        results.append({"id": row["id"], "token": str(row["lease_token"]), "outcome": "sent"})
    conn.execute("SELECT mailroom.mark_outcomes(%s::jsonb)", (json.dumps(results),))

    # The runner keeps going: other mail flows, nothing more of the campaign.
    drain(conn, smtp, limit=10)
    assert "other-1" in handler.keys
    campaign_keys = [k for k in handler.keys if k.startswith(f"campaign:{campaign}:")]
    assert len(campaign_keys) == 10, "only the batch in flight was sent after the pause"
    progress = conn.execute(
        "SELECT status, paused, sent FROM mailroom.campaign_progress WHERE campaign_id = %s", (campaign,)
    ).fetchone()
    assert progress == {"status": "paused", "paused": 90, "sent": 10}

    assert conn.execute("SELECT mailroom.resume_campaign(%s) AS n", (campaign,)).fetchone()["n"] == 90
    drain(conn, smtp, limit=10)

    campaign_keys = [k for k in handler.keys if k.startswith(f"campaign:{campaign}:")]
    assert len(campaign_keys) == 100
    assert len(set(campaign_keys)) == 100, "0 duplicates at the sink"
    assert conn.execute("SELECT mailroom.finish_campaigns() AS n").fetchone()["n"] == 1
    assert conn.execute("SELECT status FROM mailroom.campaigns WHERE id = %s", (campaign,)).fetchone()["status"] == "done"


def test_pause_waits_for_a_claim_in_progress(db_url, conn, users):
    """A claim that has locked rows but not committed: pause waits for it and
    then holds everything else; the claimed rows stay with their runner."""
    campaign = enqueue_campaign(conn, "race", "id <= 20", 0)
    with connect(db_url) as runner, connect(db_url) as operator:
        runner.autocommit = False
        claimed = runner.execute("SELECT id FROM mailroom.claim_batch('r', 5)").fetchall()
        assert len(claimed) == 5
        done = threading.Event()

        def pause():
            operator.execute("SELECT mailroom.pause_campaign(%s)", (campaign,))
            done.set()

        t = threading.Thread(target=pause)
        t.start()
        assert not done.wait(0.3), "pause waits for the uncommitted claim"
        runner.commit()
        t.join(10)
        assert done.is_set()
    counts = dict(
        (r["status"], r["n"])
        for r in conn.execute(
            "SELECT status, count(*) AS n FROM mailroom.messages WHERE campaign_id = %s GROUP BY 1", (campaign,)
        )
    )
    assert counts == {"sending": 5, "paused": 15}
    assert conn.execute("SELECT count(*) AS n FROM mailroom.claim_batch('r2', 100)").fetchone()["n"] == 0


def test_concurrent_runs_of_one_campaign_add_everybody_once(db_url, conn, users):
    """Two cron jobs firing at once (or a retry overlapping a slow run)."""
    enqueue_campaign(conn, "digest", "id <= 10", 0)  # the campaign exists already

    def run():
        with connect(db_url) as c:
            enqueue_campaign(c, "digest", "true", 0)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    rows = conn.execute(
        "SELECT count(*) AS n, count(DISTINCT recipient_id) AS d FROM mailroom.messages m"
        " JOIN mailroom.campaigns c ON c.id = m.campaign_id WHERE c.name = 'digest'"
    ).fetchone()
    assert rows == {"n": 100, "d": 100}


def test_concurrent_materialize_creates_each_occurrence_once(db_url, conn):
    conn.execute("SELECT mailroom.upsert_template('digest', 'Your week', 'Hello')")
    conn.execute(
        "SELECT mailroom.schedule_upsert('d:' || g, 'u' || g || '@example.org', '0 8 * * 1',"
        " (ARRAY['Europe/Berlin', 'America/New_York', 'Asia/Kolkata'])[1 + g % 3], 'digest', p_now => '2026-03-20Z')"
        " FROM generate_series(1, 300) g"
    )
    created = []

    def run():
        with connect(db_url) as c:
            created.append(c.execute(
                "SELECT mailroom.materialize_schedules('2026-03-23 13:00Z', 50) AS n").fetchone()["n"])

    while True:
        threads = [threading.Thread(target=run) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        if sum(created[-3:]) == 0:
            break
    assert sum(created) == 300
    assert conn.execute("SELECT count(DISTINCT delivery_key) AS n FROM mailroom.messages").fetchone()["n"] == 300
