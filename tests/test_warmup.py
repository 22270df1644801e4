"""Warm-up schedules per sender (issue 30, item 2), decided by claim_batch.

Claims are made with the runner's own function (mailroom.claim_batch, the
database clock); a day rollover is tested by moving the schedule's start date
back, never by a settable clock."""

from __future__ import annotations

import psycopg
import pytest

from tests.conftest import connect


def _enqueue(conn, sender: str, n: int, *, stream: str = "transactional", tag: str = "") -> None:
    conn.execute(
        """SELECT mailroom.enqueue('w' || g || %(tag)s || '@warm.test', 'Warm-up', 'Body',
                                   p_delivery_key => 'warm-' || %(tag)s || %(stream)s || g,
                                   p_sender => %(sender)s, p_stream => %(stream)s)
           FROM generate_series(1, %(n)s) AS g""",
        {"tag": tag, "stream": stream, "sender": sender, "n": n},
    )


def _claim_all(conn, *, batch: int = 100, rounds: int = 50) -> list[dict]:
    """Claim until a claim comes back empty; every mail claimed."""
    claimed: list[dict] = []
    for _ in range(rounds):
        rows = conn.execute("SELECT id, sender, stream FROM mailroom.claim_batch('warm-test', %s)", (batch,)).fetchall()
        if not rows:
            return claimed
        claimed += rows
    raise AssertionError(f"claims never came back empty ({len(claimed)} claimed)")


def _status(conn, sender: str) -> dict:
    return conn.execute("SELECT * FROM mailroom.sender_warmup_status() WHERE sender = %s", (sender,)).fetchone()


def test_a_sender_on_day_one_sends_its_budget_then_holds(conn):
    conn.execute("SELECT mailroom.set_sender_warmup('fresh', ARRAY[30, 60])")
    _enqueue(conn, "fresh", 45)
    _enqueue(conn, "default", 20, tag="other")
    claimed = _claim_all(conn, batch=7)
    by_sender = {s: sum(1 for r in claimed if r["sender"] == s) for s in ("fresh", "default")}
    # Day 1's budget exactly, and the sender without a schedule is not held.
    assert by_sender == {"fresh": 30, "default": 20}
    st = _status(conn, "fresh")
    assert (st["day"], st["days"], st["budget"], st["used"], st["remaining"], st["done"]) == (1, 2, 30, 30, 0, False)
    # Holds: the rest stays queued, due, and another claim takes none of it.
    assert conn.execute("SELECT count(*) AS n FROM mailroom.queue WHERE sender = 'fresh' AND status = 'queued'"
                        ).fetchone()["n"] == 15
    assert conn.execute("SELECT count(*) AS n FROM mailroom.claim_batch('warm-test', 100, p_sender => 'fresh')"
                        ).fetchone()["n"] == 0


def test_the_next_day_grants_the_next_budget(conn):
    conn.execute("SELECT mailroom.set_sender_warmup('fresh', ARRAY[10, 25, 40])")
    _enqueue(conn, "fresh", 100)
    assert len(_claim_all(conn)) == 10
    # A day later: the schedule and today's count moved one day back is
    # what the database clock will show tomorrow. Day 2, a fresh count.
    conn.execute("UPDATE mailroom.sender_warmups SET started_on = started_on - 1, used_on = used_on - 1")
    st = _status(conn, "fresh")
    assert (st["day"], st["budget"], st["used"], st["remaining"]) == (2, 25, 0, 25)
    assert len(_claim_all(conn)) == 25
    # Past the ramp's end the warm-up is over: no more holding.
    conn.execute("UPDATE mailroom.sender_warmups SET started_on = started_on - 2, used_on = used_on - 2")
    assert _status(conn, "fresh")["done"] is True
    assert len(_claim_all(conn)) == 65


@pytest.mark.parametrize("batch", [100, 4])
def test_transactional_mail_goes_before_broadcast(conn, batch):
    conn.execute("SELECT mailroom.set_setting('warmup_transactional_reserve', '0.25')")
    conn.execute("SELECT mailroom.set_sender_warmup('fresh', ARRAY[20])")
    # Broadcast mail is older: without the rule it would take the whole day.
    _enqueue(conn, "fresh", 40, stream="broadcast")
    _enqueue(conn, "fresh", 12, tag="t")
    claimed = _claim_all(conn, batch=batch)
    broadcast = sum(1 for r in claimed if r["stream"] == "broadcast")
    transactional = sum(1 for r in claimed if r["stream"] == "transactional")
    assert broadcast + transactional == 20
    # Broadcast never uses the reserve (a quarter of 20 is 5) ...
    assert broadcast <= 15, broadcast
    # ... so transactional mail always has it, and in one big claim it is
    # granted first: all 12 of it.
    assert transactional >= 5, transactional
    if batch == 100:
        assert transactional == 12
    # Broadcast mail held back by the reserve was moved out of the head of
    # the queue (re-timed), not left due to block the claim index.
    held = conn.execute(
        """SELECT count(*) FILTER (WHERE q.run_at > now()) AS later, count(*) AS n
           FROM mailroom.queue q JOIN mailroom.contents t ON t.id = q.id
           WHERE q.status = 'queued' AND t.stream = 'broadcast'""").fetchone()
    assert held["n"] == 40 - broadcast and held["later"] >= 1


def test_bad_warmup_input_is_refused_with_22023_and_nothing_written(conn):
    cases = {
        "SELECT mailroom.set_sender_warmup('fresh', '{}'::integer[])": "mailroom: ramp: must list 1 to 366 daily budgets, got 0",
        "SELECT mailroom.set_sender_warmup('fresh', ARRAY[10, 0])":
            "mailroom: ramp: every daily budget must be a number from 1 to 100000000, got {10,0}",
        "SELECT mailroom.set_sender_warmup('fresh', ARRAY[10, NULL])":
            "mailroom: ramp: every daily budget must be a number from 1 to 100000000, got {10,NULL}",
        "SELECT mailroom.set_sender_warmup(NULL)": "mailroom: sender: must be 1 to 200 characters",
        "SELECT mailroom.set_sender_warmup('fresh', NULL, current_date + 400)": "mailroom: started_on: must be today",
        "SELECT mailroom.set_setting('warmup_transactional_reserve', '1.5')":
            "mailroom: warmup_transactional_reserve: must be between 0 and 1, got 1.5",
    }
    for sql, message in cases.items():
        with pytest.raises(psycopg.Error) as e:
            conn.execute(sql)
        assert e.value.diag.sqlstate == "22023", sql
        assert e.value.diag.message_primary.startswith(message), e.value.diag.message_primary
    assert conn.execute("SELECT count(*) AS n FROM mailroom.sender_warmups").fetchone()["n"] == 0
    assert conn.execute("SELECT value FROM mailroom.settings WHERE key = 'warmup_transactional_reserve'"
                        ).fetchone()["value"] == "0.1"


def test_only_operators_set_warmups(db_url):
    with connect(db_url) as runner:
        runner.execute("SET ROLE mailroom_runner")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            runner.execute("SELECT mailroom.set_sender_warmup('fresh')")
    with connect(db_url) as operator:
        operator.execute("SET ROLE mailroom_operator")
        operator.execute("SELECT mailroom.set_sender_warmup('fresh')")
        st = operator.execute("SELECT * FROM mailroom.sender_warmup_status()").fetchone()
        assert (st["day"], st["budget"], st["remaining"]) == (1, 50, 50)
        assert operator.execute("SELECT mailroom.clear_sender_warmup('fresh') AS gone").fetchone()["gone"] is True
