"""The queue core under concurrency, and the plans its hot statements run with.

pgTAP covers each function's contract in one session; what needs several
sessions, or the planner's view of a realistic table, is here.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from tests.conftest import connect

WORKERS = 8


def fill_queue(conn, n: int, *, sent_history: int = 0) -> None:
    """n queued mails (and optionally a long history of sent ones: content
    and a finishing ledger row each, no queue row), analysed."""
    conn.execute(
        """
        WITH c AS (
          INSERT INTO mailroom.contents (delivery_key, to_address, subject, body_text, created_at)
          SELECT 'history-' || g, 'old' || g || '@example.com', 'Old', 'Body', now() - interval '2 days'
          FROM generate_series(1, %s) AS g
          RETURNING id)
        INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at,
                                       reported_at, reported, outcome, finished_as)
        SELECT id, 1, 'old-runner', gen_random_uuid(), now() - interval '2 days', now() - interval '1 day',
               now() - interval '1 day', 'sent', 'sent', 'sent'
        FROM c
        """,
        (sent_history,),
    )
    conn.execute(
        """
        SELECT mailroom.enqueue('user' || g || '@example.com', 'Hi', 'Body',
                                p_delivery_key => 'queued-' || g, p_priority => g %% 3)
        FROM generate_series(1, %s) AS g
        """,
        (n,),
    )
    for table in ("queue", "contents", "attempts"):
        conn.execute(f"ANALYZE mailroom.{table}")


def claim(conn, worker: str, limit: int) -> list[dict]:
    return conn.execute(
        "SELECT id, lease_token FROM mailroom.claim_batch(%s, %s, '5 minutes')", (worker, limit)
    ).fetchall()


def test_open_claims_never_block_each_other(db_url, conn):
    """Eight transactions hold their claims open at once; none waits for another."""
    fill_queue(conn, 10_000)
    holders = [connect(db_url) for _ in range(WORKERS)]
    try:
        claimed: list[int] = []
        for i, holder in enumerate(holders):
            holder.execute("SET lock_timeout = '200ms'")
            holder.execute("BEGIN")
            # Every earlier holder still has its locked rows: SKIP LOCKED must
            # pass over them rather than wait (a wait would hit lock_timeout).
            rows = claim(holder, f"holder-{i}", 100)
            assert len(rows) == 100
            claimed += [r["id"] for r in rows]
        assert len(set(claimed)) == len(claimed) == WORKERS * 100
    finally:
        for holder in holders:
            holder.execute("ROLLBACK")
            holder.close()


def test_eight_runners_drain_10000_each_row_exactly_once(db_url, conn):
    fill_queue(conn, 10_000)
    start = threading.Barrier(WORKERS)

    def drain(worker: str) -> list[int]:
        got: list[int] = []
        with connect(db_url) as c:
            c.execute("SET lock_timeout = '2s'")
            start.wait()
            while rows := claim(c, worker, 50):
                got += [r["id"] for r in rows]
        return got

    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(drain, [f"runner-{i}" for i in range(WORKERS)]))

    everything = [i for got in results for i in got]
    counts = Counter(everything)
    assert len(everything) == 10_000, "every queued row was claimed"
    assert max(counts.values()) == 1, "no row was claimed twice"
    assert sum(1 for got in results if got) == WORKERS, "every runner got work"
    row = conn.execute(
        """
        SELECT count(*) FILTER (WHERE status = 'sending') AS sending,
               count(*) FILTER (WHERE attempts <> 1) AS wrong_attempts,
               count(DISTINCT worker) AS workers,
               (SELECT count(*) FROM mailroom.attempts) AS ledger_rows
        FROM mailroom.queue
        """
    ).fetchone()
    # The leases are on the messages; each attempt's ledger row is written when it ends.
    assert row == {"sending": 10_000, "wrong_attempts": 0, "workers": WORKERS, "ledger_rows": 0}


# -- plans ------------------------------------------------------------------

def run_explained(conn, statement: str, params=()) -> list[dict]:
    """Run a statement with auto_explain logging every nested statement's
    actual plan to this client; return the JSON plans."""
    plans: list[dict] = []

    def on_notice(diag):
        text = diag.message_primary or ""
        if text.startswith("duration:") and "{" in text:
            plans.append(json.loads(text[text.index("{"):]))

    conn.add_notice_handler(on_notice)
    conn.execute("LOAD 'auto_explain'")
    for setting, value in {
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_analyze": "on",
        "auto_explain.log_buffers": "on",
        "auto_explain.log_nested_statements": "on",
        "auto_explain.log_format": "json",
        "auto_explain.log_level": "notice",
    }.items():
        conn.execute(f"SET {setting} = {value}")
    try:
        conn.execute(statement, params)
    finally:
        conn.execute("SET auto_explain.log_min_duration = -1")
        conn.remove_notice_handler(on_notice)
    return plans


def nodes_of(plan: dict) -> list[dict]:
    """Every node of a logged plan, depth first."""
    found, stack = [], [plan["Plan"]]
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(node.get("Plans", []))
    return found


def scans_of(plan: dict, relation: str) -> list[dict]:
    return [n for n in nodes_of(plan) if n.get("Relation Name") == relation and n["Node Type"].endswith("Scan")]


def buffers_read(scans: list[dict]) -> int:
    """Pages the scans touched: index entries skipped inside the index (an
    index condition) show here, not in the row counts."""
    return sum(s.get("Shared Hit Blocks", 0) + s.get("Shared Read Blocks", 0) for s in scans)


def plan_of(plans: list[dict], marker: str) -> dict:
    matching = [p for p in plans if marker in p.get("Query Text", "")]
    assert matching, f"no plan logged for a statement containing {marker!r}"
    return matching[0]


def rows_visited(scans: list[dict]) -> int:
    return sum(
        int(s.get("Actual Rows", 0) * s.get("Actual Loops", 1)) + int(s.get("Rows Removed by Filter", 0))
        for s in scans
    )


def test_claim_plan_uses_claim_index_and_skips_history(conn):
    fill_queue(conn, 1_000, sent_history=100_000)
    plans = run_explained(conn, "SELECT * FROM mailroom.claim_batch('plan-check', 100, '5 minutes')")
    claim_plan = plan_of(plans, "WITH picks AS")
    scans = scans_of(claim_plan, "queue")
    assert scans, "the claim statement reads the queue"
    assert all(s["Node Type"] != "Seq Scan" for s in scans + scans_of(claim_plan, "contents")), scans
    # (The lease finds each pick by the ctid its row lock returned: a Tid Scan.)
    used = {s.get("Index Name") or s["Node Type"] for s in scans}
    assert "queue_claim_idx" in used, used
    assert used <= {"queue_claim_idx", "queue_pkey", "Tid Scan"}, used
    # Content is read for the rows handed out only: by key for the gate,
    # then by the ctid that lookup found for what the lease returns.
    content = scans_of(claim_plan, "contents")
    assert {s.get("Index Name") or s["Node Type"] for s in content} <= {"contents_pkey", "Tid Scan"}
    assert rows_visited([s for s in content if s.get("Index Name")]) <= 100
    # 100 claimed rows (and a few probes per priority), never the 100,000 sent ones.
    assert rows_visited(scans) < 1_000, rows_visited(scans)


def test_claim_does_not_scan_higher_priority_mail_scheduled_for_later(conn):
    """100,000 mails at priority 10 due tomorrow stand first in the claim
    index; a claim of today's priority-0 mail must step over them, not read them."""
    fill_queue(conn, 1_000)
    conn.execute(
        """
        WITH c AS (
          INSERT INTO mailroom.contents (delivery_key, to_address, subject, body_text, priority)
          SELECT 'tomorrow-' || g, 'later' || g || '@example.com', 'Later', 'Body', 10
          FROM generate_series(1, 100000) AS g
          RETURNING id, sender, priority, max_attempts, on_ambiguous)
        INSERT INTO mailroom.queue (id, priority, run_at, sender, max_attempts, on_ambiguous)
        SELECT id, priority, now() + interval '1 day', sender, max_attempts, on_ambiguous FROM c
        """
    )
    conn.execute("ANALYZE mailroom.queue")
    plans = run_explained(conn, "SELECT * FROM mailroom.claim_batch('plan-check', 100, '5 minutes')")
    candidate_scans = [s for s in scans_of(plan_of(plans, "WITH picks AS"), "queue")
                       if s.get("Index Name") == "queue_claim_idx"]
    # A single ORDER BY priority DESC, run_at over the claim index reads ~900
    # pages of tomorrow's entries here before it reaches today's mail.
    assert buffers_read(candidate_scans) < 100, buffers_read(candidate_scans)
    claimed = conn.execute("SELECT count(*) AS n FROM mailroom.queue WHERE status = 'sending'").fetchone()
    assert claimed["n"] == 100


def test_mark_outcomes_plan_is_index_driven_with_1000_in_flight(conn):
    fill_queue(conn, 1_000, sent_history=100_000)
    claimed = claim(conn, "plan-check", 1_000)
    assert len(claimed) == 1_000
    conn.execute("ANALYZE mailroom.queue")
    conn.execute("ANALYZE mailroom.attempts")
    results = json.dumps(
        [{"id": r["id"], "token": str(r["lease_token"]), "outcome": "sent", "smtp_code": 250} for r in claimed]
    )
    plans = run_explained(conn, "SELECT mailroom.mark_outcomes(%s::jsonb)", (results,))
    outcome_plan = plan_of(plans, "DELETE FROM mailroom.queue q")
    message_scans = scans_of(outcome_plan, "queue")
    ledger_scans = scans_of(outcome_plan, "attempts")
    assert message_scans
    # Each report is one primary-key lookup, never a walk over the leases in flight.
    assert {s.get("Index Name") for s in message_scans} == {"queue_pkey"}, message_scans
    for scan in message_scans + ledger_scans:
        assert scan["Node Type"] != "Seq Scan", scan
    assert rows_visited(message_scans) < 10_000, rows_visited(message_scans)
    assert rows_visited(ledger_scans) < 10_000, rows_visited(ledger_scans)  # not the 100,000 rows of history
    assert all(n["Node Type"] != "Hash Join" for n in nodes_of(outcome_plan)), "key lookups only, no hash over a table"
    assert conn.execute("SELECT count(*) AS n FROM mailroom.messages WHERE status = 'sent'").fetchone()["n"] == 101_000


def test_reclaim_plan_uses_reclaim_index(conn):
    fill_queue(conn, 500, sent_history=100_000)
    claim(conn, "dead", 500)
    conn.execute("ANALYZE mailroom.queue")
    plans = run_explained(conn, "SELECT mailroom._reclaim(10000, now() + interval '1 hour')")
    scans = scans_of(plan_of(plans, "FOR UPDATE SKIP LOCKED"), "queue")
    assert any(s.get("Index Name") == "queue_reclaim_idx" for s in scans), scans
    assert all(s["Node Type"] != "Seq Scan" for s in scans), scans


# -- idempotent enqueue under a race ------------------------------------------

ENQUEUE = "SELECT mailroom.enqueue('race@example.com', 'Hi', %s, p_delivery_key => 'order-42') AS id"


@pytest.mark.parametrize("first_commits", [True, False])
def test_enqueue_race_on_one_delivery_key_yields_one_row(db_url, conn, first_commits):
    first, second = connect(db_url), connect(db_url)
    try:
        first.execute("BEGIN")
        first_id = first.execute(ENQUEUE, ("from first",)).fetchone()["id"]

        second_result: dict = {}

        def second_enqueue():
            second.execute("BEGIN")
            second_result["id"] = second.execute(ENQUEUE, ("from second",)).fetchone()["id"]
            second.execute("COMMIT")

        racer = threading.Thread(target=second_enqueue)
        racer.start()
        racer.join(0.5)
        assert racer.is_alive(), "the second insert waits on the first's uncommitted key"
        first.execute("COMMIT" if first_commits else "ROLLBACK")
        racer.join(10)
        assert not racer.is_alive()
    finally:
        first.close()
        second.close()

    rows = conn.execute("SELECT id, body_text FROM mailroom.messages WHERE delivery_key = 'order-42'").fetchall()
    assert len(rows) == 1
    if first_commits:
        assert second_result["id"] == first_id == rows[0]["id"]
        assert rows[0]["body_text"] == "from first"
    else:
        assert second_result["id"] == rows[0]["id"] != first_id
        assert rows[0]["body_text"] == "from second"


def test_enqueue_notifies_on_commit_only(db_url, conn):
    listener = psycopg.connect(db_url, autocommit=True)
    try:
        listener.execute("LISTEN mailroom")
        listener.execute("SELECT mailroom.runner_waiting(true)")  # a runner waits for work (tests/test_wakeup.py)
        with connect(db_url) as app:
            app.execute("BEGIN")
            app.execute("SELECT mailroom.enqueue('n@example.com', 'Hi', 'Body', p_sender => 'billing')")
            assert list(listener.notifies(timeout=0.3)) == [], "nothing before commit"
            app.execute("COMMIT")
        note = next(listener.notifies(timeout=30))
        assert (note.channel, note.payload) == ("mailroom", "billing")
    finally:
        listener.close()


def test_roles_from_a_login_connection(db_url, conn):
    """The group roles are what applications log in through."""
    conn.execute("CREATE ROLE test_app_login LOGIN IN ROLE mailroom_app")
    conn.execute("CREATE ROLE test_runner_login LOGIN IN ROLE mailroom_runner")
    try:
        app_url = db_url.replace("postgres@", "test_app_login@")
        runner_url = db_url.replace("postgres@", "test_runner_login@")
        with connect(app_url) as app:
            assert app.execute("SELECT mailroom.enqueue('r@example.com', 'Hi', 'B') AS id").fetchone()["id"]
            for forbidden in ("SELECT * FROM mailroom.claim_batch('x', 1)", "SELECT * FROM mailroom.messages"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    app.execute(forbidden)
        with connect(runner_url) as runner:
            rows = runner.execute("SELECT id, lease_token FROM mailroom.claim_batch('x', 5)").fetchall()
            assert len(rows) == 1
            applied = runner.execute(
                "SELECT mailroom.mark_outcome(%s, %s, 'sent') AS ok", (rows[0]["id"], rows[0]["lease_token"])
            ).fetchone()
            assert applied["ok"] is True
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                runner.execute("SELECT mailroom.enqueue('r@example.com', 'Hi', 'B')")
    finally:
        conn.execute("DROP OWNED BY test_app_login, test_runner_login")
        conn.execute("DROP ROLE test_app_login")
        conn.execute("DROP ROLE test_runner_login")
