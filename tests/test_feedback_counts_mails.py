"""Feedback counts mails, not events (issue 32, item 5).

A provider, or anyone who can reach the webhook or the inbound server, may
report one mail's bounce under many event keys. Each event key is recorded
(the feedback feed keeps what was said), but the ledger takes one bounced
row per mail and the circuit breaker counts each (mail, kind) once:

- 15 bounce reports about one mail, each under its own event key: one
  bounced ledger row, one bounce in breaker_status, no trip;
- complaints likewise count once per mail;
- a DSN about a mail whose SMTP answer was already a 5.1.1 (mark_outcomes
  counted that bounce) counts nothing more;
- two connections reporting the same mail's bounce at once (the second
  waits on the first's lock on the mail, then sees it): one ledger row, one
  count, whether the first commits or rolls back.

All through mailroom.record_feedback as the mailroom_feedback role.
"""

from __future__ import annotations

import threading
import uuid

import psycopg
from psycopg.rows import dict_row
import pytest

from tests.conftest import connect
from tests.operatorkit import as_user
from tests.runnerkit import wait_for

SENDER = "shop"


@pytest.fixture
def db(conn):
    # Thresholds a forged flood would cross: 20 delivered mails, pause at 5 %.
    conn.execute("SELECT mailroom.set_breaker_thresholds(s, p_window_size => 100, p_min_sample => 20,"
                 " p_bounce_warn => 0.025, p_bounce_pause => 0.05,"
                 " p_complaint_warn => 0.025, p_complaint_pause => 0.05) FROM unnest(ARRAY['campaign', 'sender']) s")
    return conn


@pytest.fixture
def feedback_url(db_url, conn):
    """A login that is a member of mailroom_feedback only, as inbound and the webhooks run."""
    role = f"t_feedback_{uuid.uuid4().hex[:8]}"
    conn.execute(f'CREATE ROLE "{role}" LOGIN IN ROLE mailroom_feedback')
    yield as_user(db_url, role)
    conn.execute(f'DROP OWNED BY "{role}"')
    conn.execute(f'DROP ROLE "{role}"')


def _sent(conn, n: int, **outcome) -> list[int]:
    """n mails of SENDER that left (reported sent, or as `outcome`)."""
    conn.execute("SELECT mailroom.enqueue('r' || g || '@feedback.example', 'Hi', 'text', p_sender => %s,"
                 " p_send_at => now() - interval '1 second') FROM generate_series(1, %s) g", (SENDER, n))
    rows = conn.execute("SELECT id, lease_token::text AS token FROM mailroom.claim_batch('w', %s, p_sender => %s)"
                        " ORDER BY id", (n, SENDER)).fetchall()
    assert len(rows) == n
    results = [{"id": r["id"], "token": r["token"], **(outcome or {"outcome": "sent"})} for r in rows]
    conn.execute("SELECT mailroom.mark_outcomes(%s::jsonb)", (psycopg.types.json.Jsonb(results),))
    return [r["id"] for r in rows]


def _record(feedback, kind: str, message_id: int, key: str, status: str = "5.1.1") -> bool:
    return feedback.execute(
        "SELECT mailroom.record_feedback(%s, %s, NULL, %s, 'no such user', 'ses', %s) AS recorded",
        (kind, message_id, status, key)).fetchone()["recorded"]


def _breaker(conn) -> dict:
    return conn.execute("SELECT state, bounced::int AS bounced, complained::int AS complained"
                        " FROM mailroom.breaker_status WHERE scope = 'sender' AND key = %s", (SENDER,)).fetchone()


def _bounced_rows(conn, message_id: int) -> int:
    return conn.execute("SELECT count(*)::int AS n FROM mailroom.attempts WHERE message_id = %s AND outcome = 'bounced'",
                        (message_id,)).fetchone()["n"]


def test_one_bounce_under_15_event_keys_is_one_bounce(db, feedback_url):
    mails = _sent(db, 30)
    with connect(feedback_url) as feedback:
        recorded = [_record(feedback, "bounce", mails[0], f"forged-{i}") for i in range(15)]
    assert recorded == [True] * 15, "each event key is recorded: the feed keeps what was said"
    assert db.execute("SELECT count(*)::int AS n FROM mailroom.feedback_events WHERE message_id = %s",
                      (mails[0],)).fetchone()["n"] == 15
    assert _bounced_rows(db, mails[0]) == 1
    breaker = _breaker(db)
    assert breaker["bounced"] == 1, breaker
    assert breaker["state"] != "paused", breaker
    assert db.execute("SELECT count(*)::int AS n FROM mailroom.breaker_trips").fetchone()["n"] == 0
    assert db.execute("SELECT * FROM mailroom.integrity_problems()").fetchall() == []


def test_bounces_of_different_mails_each_count(db, feedback_url):
    mails = _sent(db, 40)
    with connect(feedback_url) as feedback:
        for i, mail in enumerate(mails[:3]):
            _record(feedback, "bounce", mail, f"a-{i}")
            _record(feedback, "bounce", mail, f"b-{i}")
    assert _breaker(db)["bounced"] == 3
    assert [_bounced_rows(db, m) for m in mails[:3]] == [1, 1, 1]


def test_one_complaint_under_15_event_keys_is_one_complaint(db, feedback_url):
    mails = _sent(db, 60)   # two complaints in 60 (3.3 %) stay under the 5 % pause
    with connect(feedback_url) as feedback:
        for i in range(15):
            _record(feedback, "complaint", mails[1], f"arf-{i}", status="2.0.0")
        _record(feedback, "complaint", mails[2], "arf-other", status="2.0.0")
    breaker = _breaker(db)
    assert breaker["complained"] == 2, breaker
    assert db.execute("SELECT count(*)::int AS n FROM mailroom.breaker_trips").fetchone()["n"] == 0


def test_a_dsn_about_mail_the_smtp_answer_already_bounced_counts_nothing_more(db, feedback_url):
    _sent(db, 30)
    [bounced] = _sent(db, 1, outcome="failed", smtp_code=550, smtp_enhanced="5.1.1", detail="no such user")
    assert _breaker(db)["bounced"] == 1, "mark_outcomes counted the SMTP answer"
    with connect(feedback_url) as feedback:
        assert _record(feedback, "bounce", bounced, "dsn-after-smtp")
    assert _breaker(db)["bounced"] == 1


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_two_reporters_of_one_bounce_at_once_count_it_once(db, feedback_url, first_ends):
    """The second report waits on the first's lock on the mail. When the
    first commits, the second sees its event and ledger row and adds
    neither; when the first rolls back, the second is the one that counts."""
    mails = _sent(db, 30)
    url = feedback_url
    with psycopg.connect(url, row_factory=dict_row) as one, psycopg.connect(url, row_factory=dict_row) as two:
        _record(one, "bounce", mails[0], "webhook-1")
        pid = two.info.backend_pid
        done = threading.Event()

        def second():
            _record(two, "bounce", mails[0], "dsn-1")
            done.set()

        t = threading.Thread(target=second)
        t.start()
        wait_for(lambda: db.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
                                    ).fetchone()["wait_event_type"] == "Lock", what="the second report waits")
        assert not done.is_set()
        getattr(one, first_ends)()
        t.join(10)
        assert done.is_set()
        two.commit()
    assert _bounced_rows(db, mails[0]) == 1
    assert _breaker(db)["bounced"] == 1
    assert db.execute("SELECT * FROM mailroom.integrity_problems()").fetchall() == []
