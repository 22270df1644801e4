"""Issue 32, item 2: a campaign must never become done while it has a
backlog or live mail, whatever the interleaving of enqueue_campaign (a
re-run adding recipients) and finish_campaigns (pg_cron, every minute).

The campaign is active and all its queued mail has left (sent). A re-run of
enqueue_campaign adds more recipients than one chunk holds, so its mail is
partly queued (the first chunk) and partly a backlog row.

- The re-run's transaction first, finish_campaigns while it is open: on
  v0.4.0 finish_campaigns' UPDATE waited for the campaign row (held FOR
  SHARE by the re-run), then re-checked only that row while its NOT EXISTS
  over campaign_backlog and the queue kept the snapshot from before the
  re-run committed: the campaign ended done with a backlog row and queued
  mail, and no claim would ever queue the rest (claims top up active
  campaigns only). Checked once against the v0.4.0 deploy (git stash of the
  SQL change): this order failed at "done while it has a backlog".
- finish_campaigns' transaction first, the re-run while it is open: the
  re-run waits for the campaign row, then finds the campaign done and makes
  it active again (it passes on v0.4.0 too; kept so both orders stay true).

The tests decide on final states and on pg_stat_activity's wait events (to
know a session is waiting), never on timing.
"""

from __future__ import annotations

import json
import threading

import psycopg

from tests.conftest import connect
from tests.runnerkit import wait_for

# More than one chunk (mailroom._campaign_chunk_size(), 5,000): a backlog row stays.
ADDED = 5_010


def as_role(conn, role: str, query: str, params: tuple = ()) -> list[dict]:
    conn.execute(f"SET ROLE {role}")
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.execute("RESET ROLE")


def recipients(first: int, last: int) -> str:
    return (f"SELECT g AS recipient_id, 'r' || g || '@example.org' AS email"
            f" FROM generate_series({first}, {last}) g")


def enqueue_campaign_sql() -> str:
    return ("SELECT mailroom.enqueue_campaign('spring', 'news', %s,"
            " p_send_at => now() - interval '1 minute') AS id")


def campaign_whose_mail_all_left(conn) -> int:
    """An active campaign of two mails, both claimed and sent: nothing live, no backlog."""
    conn.execute("SELECT mailroom.upsert_template('news', 'News', 'Hello')")
    as_role(conn, "mailroom_app", enqueue_campaign_sql(), (recipients(1, 2),))
    leased = as_role(conn, "mailroom_runner", "SELECT id, lease_token FROM mailroom.claim_batch('r', 10)")
    assert len(leased) == 2
    as_role(conn, "mailroom_runner", "SELECT mailroom.mark_outcomes(%s::jsonb)", (json.dumps(
        [{"id": r["id"], "token": str(r["lease_token"]), "outcome": "sent"} for r in leased]),))
    state = campaign_state(conn)
    assert state == {"status": "active", "backlog": 0, "live": 0}, state
    return conn.execute("SELECT id FROM mailroom.campaigns WHERE name = 'spring'").fetchone()["id"]


def campaign_state(conn) -> dict:
    return conn.execute(
        "SELECT k.status,"
        " (SELECT count(*) FROM mailroom.campaign_backlog b WHERE b.campaign_id = k.id)::int AS backlog,"
        " (SELECT count(*) FROM mailroom.queue q WHERE q.campaign_id = k.id"
        "   AND q.status IN ('queued', 'sending', 'paused'))::int AS live"
        " FROM mailroom.campaigns k WHERE k.name = 'spring'").fetchone()


def waiting_on_a_lock(conn, pid: int) -> bool:
    return conn.execute("SELECT wait_event_type = 'Lock' AS w FROM pg_stat_activity WHERE pid = %s",
                        (pid,)).fetchone()["w"] is True


def in_thread(fn) -> tuple[threading.Thread, list]:
    outcome: list = []

    def run():
        try:
            outcome.append(fn())
        except psycopg.Error as e:  # reported by the test, not lost in the thread
            outcome.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, outcome


def assert_never_done_with_work_left(conn) -> None:
    assert conn.execute("SELECT count(*) AS n FROM mailroom.contents c JOIN mailroom.campaigns k"
                        " ON k.id = c.campaign_id WHERE k.name = 'spring'").fetchone()["n"] == 2 + ADDED
    state = campaign_state(conn)
    assert state["backlog"] + state["live"] > 0, state
    assert state["status"] == "active", f"done while it has a backlog or live mail: {state}"
    # Another run of the housekeeping changes nothing while mail is left.
    assert as_role(conn, "mailroom_operator", "SELECT mailroom.finish_campaigns() AS n")[0]["n"] == 0
    assert campaign_state(conn)["status"] == "active"
    assert conn.execute("SELECT count(*) AS n FROM mailroom.integrity_problems()").fetchone()["n"] == 0


def test_finish_campaigns_racing_an_open_enqueue_campaign_rerun_leaves_it_active(db_url, conn):
    campaign = campaign_whose_mail_all_left(conn)
    with connect(db_url) as app, connect(db_url) as cron:
        app.execute("BEGIN")
        app.execute("SET LOCAL ROLE mailroom_app")
        assert app.execute(enqueue_campaign_sql(), (recipients(3, 2 + ADDED),)).fetchone()["id"] == campaign
        cron.execute("SET ROLE mailroom_operator")
        finishing, finished = in_thread(lambda: cron.execute("SELECT mailroom.finish_campaigns() AS n").fetchone())
        # finish_campaigns either waits for the re-run's campaign row (v0.4.0) or is done already.
        wait_for(lambda: finished or waiting_on_a_lock(conn, cron.info.backend_pid),
                 what="finish_campaigns to wait for the campaign row or to return")
        app.execute("COMMIT")
        finishing.join(30)
        assert not finishing.is_alive()
        assert not isinstance(finished[0], Exception), finished
    assert_never_done_with_work_left(conn)


def test_enqueue_campaign_rerun_after_an_open_finish_campaigns_makes_it_active_again(db_url, conn):
    campaign = campaign_whose_mail_all_left(conn)
    with connect(db_url) as cron, connect(db_url) as app:
        cron.execute("BEGIN")
        cron.execute("SET LOCAL ROLE mailroom_operator")
        assert cron.execute("SELECT mailroom.finish_campaigns() AS n").fetchone()["n"] == 1
        app.execute("SET ROLE mailroom_app")
        enqueuing, enqueued = in_thread(
            lambda: app.execute(enqueue_campaign_sql(), (recipients(3, 2 + ADDED),)).fetchone())
        wait_for(lambda: waiting_on_a_lock(conn, app.info.backend_pid),
                 what="the re-run to wait for finish_campaigns' campaign row")
        cron.execute("COMMIT")
        enqueuing.join(30)
        assert not enqueuing.is_alive()
        assert enqueued[0]["id"] == campaign, enqueued
    assert_never_done_with_work_left(conn)
