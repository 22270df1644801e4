"""Campaigns end to end: the real runner (`mailroom run` in a subprocess) and
an aiosmtpd sink on loopback (mailroom.dev.sink.Sink, which keeps every accepted
mail in arrival order).

- Two campaigns queued together are sent strictly by priority by one runner.
- A campaign paused (from another session) while the runner sends it: nothing
  more of it is claimed after the claims in flight, other mail keeps flowing;
  resume completes it with no duplicate at the sink.

The last tests are SQL-level races (pause against an uncommitted claim,
concurrent enqueue_campaign, concurrent materialize) and use direct SQL.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from mailroom.send.render import message_id
from mailroom.dev.sink import Sink
from tests.conftest import connect
from tests.runnerkit import FROM, RunnerProcess, wait_for

MESSAGE_ID_DOMAIN = FROM.rsplit("@", 1)[1].rstrip(">")
# One sending thread, small batches: the arrival order at the sink is the claim order.
ONE_BY_ONE = ("--concurrency", "1", "--batch", "10", "--poll-interval", "0.2")


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
            (name, f"SELECT id AS recipient_id, email, jsonb_build_object('name', 'User ' || id) AS vars"
             f" FROM public.users WHERE {where}", priority),
        ).fetchone()["id"]
    finally:
        conn.execute("RESET ROLE")


def campaign_of(conn) -> dict[str, int]:
    """Message-ID (as the runner derives it from the delivery key and id) -> campaign id."""
    rows = conn.execute("SELECT id, delivery_key, campaign_id FROM mailroom.messages").fetchall()
    return {message_id(r["delivery_key"], r["id"], MESSAGE_ID_DOMAIN): r["campaign_id"] for r in rows}


def arrivals(sink: Sink, campaigns: dict[str, int]) -> list[int]:
    """The campaign of every mail the sink accepted, in arrival order."""
    return [campaigns[m["message_id"]] for m in list(sink.messages)]


def test_priority_10_is_sent_before_priority_0(db_url, conn, users):
    low = enqueue_campaign(conn, "low", "id <= 40", 0)      # queued first
    high = enqueue_campaign(conn, "high", "id > 60", 10)
    campaigns = campaign_of(conn)
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle", *ONE_BY_ONE) as r:
        assert r.wait() == 0, r.log()

    assert arrivals(sink, campaigns) == [high] * 40 + [low] * 40, \
        "every priority-10 mail arrived before any priority-0 mail"
    stats = sink.stats()
    assert (stats["unique_message_ids"], stats["duplicates"]) == (80, 0)
    assert conn.execute("SELECT count(*) AS n FROM mailroom.messages WHERE status = 'sent'").fetchone()["n"] == 80


def test_pause_mid_send_then_resume_sends_everyone_once(db_url, conn, users):
    spring = enqueue_campaign(conn, "spring", "id <= 60", 0)
    other = enqueue_campaign(conn, "other", "id > 70", -5)  # waits behind spring until it is paused
    campaigns = campaign_of(conn)

    # 30 ms per mail at the sink: the runner is still busy with spring when it is paused.
    with Sink(keep=True, delay=0.03) as sink, RunnerProcess(
        db_url, sink.url(), "--log-level", "debug", *ONE_BY_ONE
    ) as r:
        def sent_of(campaign: int) -> int:
            return arrivals(sink, campaigns).count(campaign)

        wait_for(lambda: sent_of(spring) >= 15, what="spring half-way out")
        with connect(db_url) as operator:  # another session pauses it
            held = operator.execute("SELECT mailroom.pause_campaign(%s) AS n", (spring,)).fetchone()["n"]
            paused_at = operator.execute("SELECT clock_timestamp() AS t").fetchone()["t"]  # after the commit
        assert 0 < held < 45

        # Other mail keeps flowing while spring is held.
        wait_for(lambda: sent_of(other) == 30, what="the other campaign sent")
        wait_for(lambda: conn.execute(
            "SELECT count(*) = 0 AS ok FROM mailroom.messages WHERE campaign_id = %s AND status = 'sending'",
            (other,)).fetchone()["ok"], what="the other campaign recorded")
        # ... and after that the runner claims again (its poll) and gets nothing of spring.
        seen = len(r.log())
        wait_for(lambda: "batch.claimed count=0" in r.log()[seen:], what="an empty claim")

        spring_sent = sent_of(spring)
        counts = dict((row["status"], row["n"]) for row in conn.execute(
            "SELECT status, count(*)::int AS n FROM mailroom.messages WHERE campaign_id = %s GROUP BY 1", (spring,)))
        assert counts == {"sent": spring_sent, "paused": held}, "the claims in flight finished, the rest is held"
        assert spring_sent + held == 60
        ledger = conn.execute(
            "SELECT count(*)::int AS n, count(*) FILTER (WHERE a.claimed_at > %s)::int AS after_pause"
            " FROM mailroom.attempts a JOIN mailroom.messages m ON m.id = a.message_id"
            " WHERE m.campaign_id = %s", (paused_at, spring)).fetchone()
        assert ledger == {"n": spring_sent, "after_pause": 0}, "nothing of spring claimed after the pause"
        assert conn.execute(
            "SELECT count(*)::int AS n FROM mailroom.attempts a JOIN mailroom.messages m ON m.id = a.message_id"
            " WHERE m.campaign_id = %s AND a.claimed_at > %s", (other, paused_at)).fetchone()["n"] == 30
        progress = conn.execute(
            "SELECT status, paused, sent FROM mailroom.campaign_progress WHERE campaign_id = %s", (spring,)
        ).fetchone()
        assert progress == {"status": "paused", "paused": held, "sent": spring_sent}

        assert conn.execute("SELECT mailroom.resume_campaign(%s) AS n", (spring,)).fetchone()["n"] == held
        wait_for(lambda: conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'sent') = 60 AS ok FROM mailroom.messages"
            " WHERE campaign_id = %s", (spring,)).fetchone()["ok"], what="spring completed")
        assert r.stop() == 0, r.log()

    spring_ids = [m["message_id"] for m in sink.messages if campaigns[m["message_id"]] == spring]
    assert len(spring_ids) == 60 and len(set(spring_ids)) == 60, "everyone once: 0 duplicates at the sink"
    assert sink.stats()["duplicates"] == 0
    assert conn.execute("SELECT mailroom.finish_campaigns() AS n").fetchone()["n"] == 2
    assert conn.execute("SELECT status FROM mailroom.campaigns WHERE id = %s", (spring,)).fetchone()["status"] == "done"


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
    failures = []

    def run():
        try:
            with connect(db_url) as c:
                enqueue_campaign(c, "digest", "true", 0)
        except psycopg.Error as e:  # a run that fails must fail the test, not only its thread
            failures.append(e)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert failures == []
    rows = conn.execute(
        "SELECT count(*) AS n, count(DISTINCT recipient_id) AS d FROM mailroom.messages m"
        " JOIN mailroom.campaigns c ON c.id = m.campaign_id WHERE c.name = 'digest'"
    ).fetchone()
    assert rows == {"n": 100, "d": 100}


def test_two_claimers_queue_a_campaign_chunk_once_and_never_wait_for_each_other(db_url, conn, users):
    """A campaign's next chunk is queued by the claim that finds the newest
    one low (deploy/campaign_chunks.sql); a second claim meanwhile neither
    waits for it (lock_timeout) nor queues the same chunk again."""
    conn.execute("CREATE OR REPLACE FUNCTION mailroom._campaign_chunk_size() RETURNS integer LANGUAGE sql IMMUTABLE"
                 " SECURITY DEFINER SET search_path = mailroom, pg_temp AS $$ SELECT 10 $$")
    campaign = enqueue_campaign(conn, "digest", "true", 0)  # 100 recipients: the first chunk of 10 is queued
    queued = ("SELECT count(*) AS n FROM mailroom.queue q JOIN mailroom.contents c USING (id)"
              " WHERE c.campaign_id = %s")
    assert conn.execute(queued, (campaign,)).fetchone()["n"] == 10
    assert conn.execute("SELECT count(*) AS n FROM mailroom.claim_batch('c', 10)").fetchone()["n"] == 10
    with connect(db_url) as a, connect(db_url) as b:
        b.execute("SET lock_timeout = '2s'")
        with a.transaction():
            # a queues the second chunk (and holds its backlog row until commit)
            assert a.execute("SELECT count(*) AS n FROM mailroom.claim_batch('a', 5)").fetchone()["n"] == 5
            assert b.execute("SELECT count(*) AS n FROM mailroom.claim_batch('b', 50)").fetchone()["n"] == 0
            assert b.execute(queued, (campaign,)).fetchone()["n"] == 10, "b queued nothing"
        # committed: b takes the rest of the second chunk and queues the third
        assert b.execute("SELECT count(*) AS n FROM mailroom.claim_batch('b', 50)").fetchone()["n"] == 15
    rows = conn.execute("SELECT count(*) AS n, count(DISTINCT q.id) AS d FROM mailroom.queue q"
                        " JOIN mailroom.contents c USING (id) WHERE c.campaign_id = %s", (campaign,)).fetchone()
    assert rows == {"n": 30, "d": 30}
    assert conn.execute("SELECT count(*) AS n FROM mailroom.integrity_problems()").fetchone()["n"] == 0


def test_concurrent_materialize_creates_each_occurrence_once(db_url, conn):
    conn.execute("SELECT mailroom.upsert_template('digest', 'Your week', 'Hello')")
    conn.execute(
        "SELECT mailroom._schedule_upsert('d:' || g, 'u' || g || '@example.org', '0 8 * * 1',"
        " (ARRAY['Europe/Berlin', 'America/New_York', 'Asia/Kolkata'])[1 + g % 3], 'digest', p_now => '2026-03-20Z')"
        " FROM generate_series(1, 300) g"
    )
    created = []

    def run():
        with connect(db_url) as c:
            created.append(c.execute(
                "SELECT mailroom._materialize_schedules(50, '2026-03-23 13:00Z') AS n").fetchone()["n"])

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
