"""The circuit breaker under concurrent reporters, with two or three
connections to one database.

- Reporters of one sender (and one campaign) do not wait on each other for
  the breaker's counts: one holds an open mark_outcomes transaction, the
  other's mark_outcomes completes, and both counts are there after.
- Bad events still take turns: two hard bounces reported at once, each
  under the threshold on its own, trip the sender at the threshold.
- A bounce evaluated while delivered mail is still in flight neither waits
  for it nor trips on too few mails; the next bounce, which sees it, trips.
- A bounce evaluated while a fold holds the pending delivered mail neither
  waits for the fold nor misses that mail, and the fold counts it once.

Small thresholds for readable numbers: window 100, minimum sample 20, pause
at a 5 % hard-bounce rate. Each test uses its own sender.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from tests.conftest import connect
from tests.runnerkit import wait_for

HARD_BOUNCE = {"outcome": "failed", "smtp_code": 550, "smtp_enhanced": "5.1.1", "detail": "no such user"}


@pytest.fixture
def db(module_db_url):
    with connect(module_db_url) as c:
        c.execute("SELECT mailroom.set_breaker_thresholds(s, p_window_size => 100, p_min_sample => 20,"
                  " p_bounce_warn => 0.025, p_bounce_pause => 0.05) FROM unnest(ARRAY['campaign', 'sender']) s")
        yield c


def _claim(conn, sender: str, n: int, campaign: bool = False) -> list[dict]:
    """n fresh mails of `sender` (of one new campaign if asked), claimed."""
    if campaign:
        conn.execute("SELECT mailroom.upsert_template('news', 'News', 'Hello')")
        conn.execute("SELECT mailroom.enqueue_campaign(%s, 'news', %s, p_sender => %s,"
                     " p_send_at => now() - interval '1 second')",
                     (f"{sender} list", f"SELECT g AS recipient_id, 'r' || g || '@{sender}.example' AS email"
                      f" FROM generate_series(1, {n}) g", sender))
    else:
        conn.execute("SELECT mailroom.enqueue('r' || g || %s, 'Hi', 'text', p_sender => %s,"
                     " p_send_at => now() - interval '1 second') FROM generate_series(1, %s) g",
                     (f"@{sender}.example", sender, n))
    rows = conn.execute("SELECT id, lease_token::text AS token FROM mailroom.claim_batch('w', %s, p_sender => %s)"
                        " ORDER BY id", (n, sender)).fetchall()
    assert len(rows) == n
    return rows


def _report(conn, mails: list[dict], **outcome) -> int:
    results = [{"id": m["id"], "token": m["token"], **(outcome or {"outcome": "sent"})} for m in mails]
    return conn.execute("SELECT mailroom.mark_outcomes(%s::jsonb) AS n", (psycopg.types.json.Jsonb(results),)
                        ).fetchone()["n"]


def _figures(conn, scope: str, key: str) -> tuple | None:
    row = conn.execute("SELECT delivered, bounced, state FROM mailroom.breaker_status WHERE scope = %s AND key = %s",
                       (scope, key)).fetchone()
    return None if row is None else (float(row["delivered"]), float(row["bounced"]), row["state"])


def _waiting_on_a_lock(conn, query_part: str) -> bool:
    return conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock' AND query LIKE %s", (f"%{query_part}%",)).fetchone()["n"] > 0


def test_reporters_of_one_sender_do_not_wait_on_each_other(db, module_db_url):
    """On the breaker before brk5 the second report waited for the first's
    commit on the sender's (and campaign's) counter row: it failed here with
    lock_timeout (checked once)."""
    a_mail, b_mail = _claim(db, "one", 2, campaign=True)
    campaign = db.execute("SELECT campaign_id::text AS c FROM mailroom.contents WHERE id = %s",
                          (a_mail["id"],)).fetchone()["c"]
    with connect(module_db_url) as a, connect(module_db_url) as b:
        a.autocommit = False
        assert _report(a, [a_mail]) == 1  # A's transaction stays open
        b.execute("SET lock_timeout = '1s'")
        assert _report(b, [b_mail]) == 1, "B's report completed while A's is open"
        assert _figures(db, "sender", "one") == (1.0, 0.0, "ok"), "B's count is in, A's is not yet"
        a.commit()
    assert _figures(db, "sender", "one") == (2.0, 0.0, "ok"), "no count lost"
    assert _figures(db, "campaign", campaign) == (2.0, 0.0, "ok")


def test_two_bounces_reported_at_once_trip_at_the_threshold(db, module_db_url):
    """57 sent and a bounce (1 in 58), then two reporters with one hard
    bounce each: alone, each makes 2 in 59 (3.4 %); together 3 in 60 = 5 %,
    the pause threshold. The second to evaluate waits for the first (on the
    sender's row, which the earlier bounce created) and sees its bounce: the
    sender trips. (Checked once with that wait removed, ON CONFLICT DO
    NOTHING in _breaker_tally: the second did not wait, and this failed.)"""
    mails = _claim(db, "two", 60)
    assert _report(db, mails[:57]) == 57
    assert _report(db, [mails[57]], **HARD_BOUNCE) == 1
    with connect(module_db_url) as a, connect(module_db_url) as b:
        a.autocommit = False
        assert _report(a, [mails[58]], **HARD_BOUNCE) == 1
        done: list[int] = []
        t = threading.Thread(target=lambda: done.append(_report(b, [mails[59]], **HARD_BOUNCE)))
        t.start()
        wait_for(lambda: not t.is_alive() or _waiting_on_a_lock(db, "mark_outcomes"),
                 what="the second bounce to wait for the first")
        assert t.is_alive(), "bad events of one sender take turns"
        a.commit()
        t.join(10)
    assert done == [1]
    pause = db.execute("SELECT reason, figures FROM mailroom.sender_pauses WHERE sender = 'two'").fetchone()
    assert pause is not None, "the two bounces together tripped the sender"
    assert pause["reason"] == "circuit breaker: hard-bounce rate 5.00 % >= 5.00 % over the last 60 delivered"
    assert (pause["figures"]["delivered"], pause["figures"]["bounced"]) == (60, 3)


def test_a_bounce_next_to_delivered_mail_in_flight(db, module_db_url):
    """10 sent; A reports 10 more and has not committed; B's bounce does not
    wait for A (on the breaker before brk5 it did: lock_timeout, checked
    once) and sees 11 delivered, under the minimum sample of 20: no trip.
    Once A commits, the next bounce sees all 22 (2 bounced, 9 %) and trips."""
    mails = _claim(db, "three", 22)
    assert _report(db, mails[:10]) == 10
    with connect(module_db_url) as a, connect(module_db_url) as b:
        a.autocommit = False
        assert _report(a, mails[10:20]) == 10
        b.execute("SET lock_timeout = '1s'")
        assert _report(b, [mails[20]], **HARD_BOUNCE) == 1
        assert db.execute("SELECT count(*) AS n FROM mailroom.sender_pauses WHERE sender = 'three'"
                          ).fetchone()["n"] == 0, "11 delivered: too few mails to trip"
        a.commit()
    assert _report(db, [mails[21]], **HARD_BOUNCE) == 1
    trip = db.execute("SELECT delivered, bounced FROM mailroom.breaker_trips WHERE key = 'three'").fetchall()
    assert [(float(t["delivered"]), float(t["bounced"])) for t in trip] == [(22.0, 2.0)]


def test_a_bounce_while_a_fold_holds_the_pending_mail(db, module_db_url):
    """19 sent wait in breaker_pending; a fold (the pg_cron job's breaker_fold)
    has taken them and not committed. A bounce then neither waits for the
    fold nor misses the 19: it counts them as pending (20 delivered, 1
    bounced: 5 %) and trips. Once the fold commits they are counted once."""
    mails = _claim(db, "four", 20)
    assert _report(db, mails[:19]) == 19
    with connect(module_db_url) as folder, connect(module_db_url) as b:
        folder.autocommit = False
        assert folder.execute("SELECT mailroom.breaker_fold() AS n").fetchone()["n"] >= 19
        b.execute("SET lock_timeout = '1s'")
        assert _report(b, [mails[19]], **HARD_BOUNCE) == 1
        trip = db.execute("SELECT delivered, bounced FROM mailroom.breaker_trips WHERE key = 'four'").fetchall()
        assert [(float(t["delivered"]), float(t["bounced"])) for t in trip] == [(20.0, 1.0)]
        folder.commit()
    assert _figures(db, "sender", "four") == (20.0, 1.0, "paused"), "folded once, not twice"
