"""The circuit breaker end to end: the real runner (`mailroom run` in a
subprocess) sending to an aiosmtpd sink that refuses chosen recipients with
550 5.1.1 during the SMTP conversation (how mark_outcomes learns a hard
bounce), under the default thresholds (pause at a 5 % hard-bounce rate, no
trip before 200 delivered mails).

- A campaign of 2,000 of which 8 % bounce pauses itself long before it is
  done, with its figures in `mailroom status`; a clean campaign sent at the
  same time by the same runner finishes and never trips.
- A sender whose mail bounces at 8 % is paused (its remaining mail parked by
  claim_batch's gate) while another sender's mail keeps going; an operator
  resumes it.
- A claim racing an operator's resume_sender parks nothing behind it.
"""

from __future__ import annotations

import json
import threading

from mailroom.dev.sink import Rule, Sink
from tests.conftest import connect
from tests.operatorkit import run
from tests.runnerkit import RunnerProcess, enqueue, wait_for

# 2 of every 25 recipients (8 %) are addresses the sink does not know.
BOUNCING = "g % 25 IN (3, 16)"
FAST = ("--concurrency", "8", "--batch", "50", "--poll-interval", "0.2")
HARD_BOUNCE = Rule(550, "5.1.1 No such user here", stage="rcpt", rcpt_contains="gone")


def _recipients(conn, table: str, n: int) -> None:
    conn.execute(f"CREATE TABLE public.{table} AS SELECT g AS id,"
                 f" CASE WHEN {BOUNCING} THEN 'gone' ELSE 'user' END || g || '@{table}.example' AS email"
                 f" FROM generate_series(1, {n}) g")
    conn.execute(f"GRANT SELECT ON public.{table} TO mailroom_app")


def _campaign(conn, name: str, table: str, sender: str) -> int:
    conn.execute("SET ROLE mailroom_app")
    try:
        return conn.execute(
            "SELECT mailroom.enqueue_campaign(%s, 'news', %s, p_sender => %s, p_send_at => now() - interval '1 second')"
            " AS id", (name, f"SELECT id AS recipient_id, email FROM public.{table}", sender)).fetchone()["id"]
    finally:
        conn.execute("RESET ROLE")


def _nothing_left(conn) -> bool:
    """Nothing is due or in flight: all that is left is held (paused)."""
    return conn.execute("SELECT count(*) AS n FROM mailroom.queue WHERE status IN ('queued', 'sending')"
                        ).fetchone()["n"] == 0


def _finished(conn, campaign: int) -> dict[str, int]:
    return {r["status"]: r["n"] for r in conn.execute(
        "SELECT status, count(*)::int AS n FROM mailroom.messages WHERE campaign_id = %s GROUP BY 1", (campaign,))}


def test_a_campaign_that_bounces_8_percent_pauses_itself_and_a_clean_one_never_does(db_url, conn):
    conn.execute("SELECT mailroom.upsert_template('news', 'News', 'Hello')")
    # This test is about campaigns: the senders' breaker must not stop them first.
    conn.execute("SELECT mailroom.set_breaker_thresholds('sender', p_bounce_warn => 1, p_bounce_pause => 1)")
    _recipients(conn, "bad", 2000)
    _recipients(conn, "clean", 1000)
    conn.execute("UPDATE public.clean SET email = replace(email, 'gone', 'user')")
    bad = _campaign(conn, "bad list", "bad", "bulk")
    clean = _campaign(conn, "clean list", "clean", "bulk")

    # Not --exit-when-idle: a claim that meets only held mail parks it and
    # comes back empty while more of it is still queued behind.
    with Sink(rules=[HARD_BOUNCE]) as sink, RunnerProcess(db_url, sink.url(), *FAST) as r:
        wait_for(lambda: _nothing_left(conn), timeout=120, what="everything sent or held")
        assert r.stop() == 0, r.log()

    bad_states = _finished(conn, bad)
    assert conn.execute("SELECT status FROM mailroom.campaigns WHERE id = %s", (bad,)).fetchone()["status"] == "paused"
    assert bad_states.get("paused", 0) > 1000, f"paused long before it was done: {bad_states}"
    assert sum(bad_states.values()) == 2000
    trip = conn.execute("SELECT * FROM mailroom.breaker_trips WHERE scope = 'campaign' AND key = %s",
                        (str(bad),)).fetchall()
    assert len(trip) == 1
    assert trip[0]["delivered"] >= 200, "not before the minimum sample"
    assert trip[0]["bounce_rate"] >= 0.05
    # Every refused recipient was counted, up to the trip: the synchronous 5xx reached the breaker.
    failed_before_trip = conn.execute(
        "SELECT count(*) AS n FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id"
        " WHERE c.campaign_id = %s AND a.finished_as = 'failed' AND a.finished_at <= %s",
        (bad, trip[0]["tripped_at"])).fetchone()["n"]
    assert trip[0]["bounced"] == failed_before_trip

    clean_states = _finished(conn, clean)
    assert clean_states == {"sent": 1000}, "the clean campaign went on and finished"
    assert conn.execute("SELECT count(*) AS n FROM mailroom.breaker_trips WHERE key = %s",
                        (str(clean),)).fetchone()["n"] == 0
    assert conn.execute("SELECT state FROM mailroom.breaker_status WHERE scope = 'campaign' AND key = %s",
                        (str(clean),)).fetchone()["state"] == "ok"

    code, out, err = run("status", "--dsn", db_url)
    assert code == 0, err
    section = out.split("CIRCUIT BREAKER", 1)[1].split("WARNINGS", 1)[0]
    assert f"campaign {bad} (bad list)" in section and "paused" in section and "hard-bounce rate" in section
    assert f"campaign {clean}" not in section
    assert f"campaign {bad}: hard-bounce rate" in out.split("WARNINGS", 1)[1]
    code, out, _ = run("status", "--dsn", db_url, "--json")
    [row] = [b for b in json.loads(out)["breaker"] if b["key"] == str(bad)]
    assert row["state"] == "paused" and float(row["bounce_rate"]) >= 0.05

    code, out, _ = run("resume", "--dsn", db_url, "--campaign", str(bad))
    assert code == 0 and out.startswith(f"resumed campaign {bad}: ")
    assert conn.execute("SELECT status FROM mailroom.campaigns WHERE id = %s", (bad,)).fetchone()["status"] == "active"
    assert conn.execute("SELECT count(*) AS n FROM mailroom.breaker_status WHERE key = %s AND scope = 'campaign'",
                        (str(bad),)).fetchone()["n"] == 0, "a fresh window after resume"


def test_a_sender_that_bounces_8_percent_is_paused_and_other_senders_go_on(db_url, conn):
    conn.execute(f"""SELECT mailroom.enqueue(CASE WHEN {BOUNCING} THEN 'gone' ELSE 'user' END || g || '@shop.example',
                                             'Receipt', 'Thanks', p_sender => 'shop')
                     FROM generate_series(1, 1000) g""")
    conn.execute("""SELECT mailroom.enqueue('user' || g || '@other.example', 'Hi', 'Hello', p_sender => 'alerts')
                    FROM generate_series(1, 300) g""")

    # Not --exit-when-idle: a claim that meets only held mail parks it and
    # comes back empty while more of it is still queued behind.
    with Sink(rules=[HARD_BOUNCE]) as sink, RunnerProcess(db_url, sink.url(), *FAST) as r:
        wait_for(lambda: _nothing_left(conn), timeout=120, what="everything sent or held")
        assert r.stop() == 0, r.log()

    pause = conn.execute("SELECT * FROM mailroom.sender_pauses").fetchall()
    assert [p["sender"] for p in pause] == ["shop"]
    assert pause[0]["reason"].startswith("circuit breaker: hard-bounce rate")
    assert float(pause[0]["figures"]["delivered"]) >= 200
    parked = conn.execute("SELECT count(*) AS n FROM mailroom.queue WHERE sender = 'shop' AND status = 'paused'"
                          " AND status_reason = 'sender_paused'").fetchone()["n"]
    assert parked > 500, f"most of shop's mail is held: {parked}"
    assert conn.execute("SELECT count(*) AS n FROM mailroom.messages WHERE sender = 'alerts' AND status = 'sent'"
                        ).fetchone()["n"] == 300, "nothing else stops"

    code, out, _ = run("status", "--dsn", db_url)
    assert "sender shop" in out.split("CIRCUIT BREAKER", 1)[1].split("WARNINGS", 1)[0]

    code, out, _ = run("resume", "--dsn", db_url, "--sender", "shop")
    assert (code, out.strip()) == (0, f"resumed sender shop: {parked} mail(s) queued again")
    assert conn.execute("SELECT count(*) AS n FROM mailroom.sender_pauses").fetchone()["n"] == 0
    assert conn.execute("SELECT count(*) AS n FROM mailroom.queue WHERE status = 'queued' AND sender = 'shop'"
                        ).fetchone()["n"] == parked
    code, _, err = run("resume", "--dsn", db_url)
    assert code == 2 and "give --campaign or --sender" in err


def test_a_claim_that_saw_the_pause_does_not_park_mail_behind_a_resume(db_url, conn):
    """The race of claim_batch's sender gate against resume_sender: a claim
    whose snapshot still shows the sender paused (the resume has not
    committed) must not park the mail once the resume has committed, or the
    mail would stay paused with nothing left to release it. The gate
    re-checks the pause row FOR SHARE SKIP LOCKED: it finds the row held by
    the resume, so it neither waits (issue 32, item 3: a claim never waits
    for a lock an operator or application holds) nor parks; it leaves the
    mail queued, re-timed a few seconds ahead, and a claim after that sends
    it. (Checked once with that re-check removed from deploy/claim_batch.sql:
    the mail ended parked as sender_paused, and this test failed at "left the
    mail queued".)"""
    conn.execute("INSERT INTO mailroom.sender_pauses (sender, reason) VALUES ('shop', 'circuit breaker: test')")
    mail = enqueue(conn, "ann@example.com", subject="Receipt", body_text="Thanks", sender="shop")
    with connect(db_url) as operator, connect(db_url) as runner:
        operator.autocommit = False
        assert operator.execute("SELECT mailroom.resume_sender('shop') AS n").fetchone()["n"] == 0
        claimed: list = []
        t = threading.Thread(target=lambda: claimed.extend(
            runner.execute("SELECT id FROM mailroom.claim_batch('r', 10)").fetchall()))
        t.start()
        # The claim is done at once (a claim that waited for the resume would show here).
        wait_for(lambda: not t.is_alive() or conn.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE '%claim_batch%'"
        ).fetchone()["n"] == 1, what="the claim to wait on the pause row")
        operator.commit()
        t.join(10)
    assert claimed == [], "the claim began while the sender was paused: it hands nothing out"
    assert conn.execute("SELECT status, status_reason FROM mailroom.queue WHERE id = %s", (mail,)).fetchone() == \
        {"status": "queued", "status_reason": None}, "and it left the mail queued, not parked behind the resume"
    assert [r["id"] for r in conn.execute(
        "SELECT id FROM mailroom._claim_batch('r', 10, interval '5 minutes', NULL,"
        " now() + 2 * mailroom._claim_recheck_delay())")] == [mail], "a claim past the re-check delay sends it"
