"""Outcomes are kept until the database has them (issue 14, item 1), with
real `mailroom run` processes, a real SMTP sink and the real cluster.

Each fault starts while mail is at the sink, so the runner has sent mail
whose outcome it cannot write: a read-only database (25006, as after a
failover), a revoked grant on mark_outcomes (42501), mark_outcomes missing
(42883, runner and schema out of step). The runner keeps the outcomes, claims
nothing more meanwhile, and writes them once the fault is fixed: every mail
is sent exactly once. (v0.3.0 dropped such outcomes: the rows stayed
`sending` until reclaim re-queued them and they were sent again.)
"""

from __future__ import annotations

import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

from mailroom.dev.sink import Sink
from tests.conftest import connect
from tests.runnerkit import RunnerProcess, statuses, wait_for

N = 6


def _kick_runner_connections(admin, database: str) -> None:
    """Make the runner reconnect (new sessions pick up database settings)."""
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s"
                  " AND application_name LIKE 'mailroom-run %%'", (database,))


def _mark_outcomes(conn) -> str:
    (sig,) = [r["sig"] for r in conn.execute(
        "SELECT oid::regprocedure::text AS sig FROM pg_proc WHERE proname = 'mark_outcomes'"
        " AND pronamespace = 'mailroom'::regnamespace")]
    return sig


def _faults(conn, database: str):
    sig = _mark_outcomes(conn)
    away = sig.replace("mark_outcomes", "mark_outcomes_away", 1)
    return {
        "read-only (25006)": (
            [f'ALTER DATABASE "{database}" SET default_transaction_read_only = on'],
            [f'ALTER DATABASE "{database}" RESET default_transaction_read_only'], "25006"),
        "revoked grant (42501)": (
            [f"REVOKE EXECUTE ON FUNCTION {sig} FROM mailroom_runner"],
            [f"GRANT EXECUTE ON FUNCTION {sig} TO mailroom_runner"], "42501"),
        "missing function (42883)": (
            [f"ALTER FUNCTION {sig} RENAME TO mark_outcomes_away"],
            [f"ALTER FUNCTION {away} RENAME TO mark_outcomes"], "42883"),
    }


@pytest.mark.parametrize("fault", ["read-only (25006)", "revoked grant (42501)", "missing function (42883)"])
def test_outcomes_survive_a_database_that_cannot_take_them(db_url, conn, server_url, fault):
    database = urlsplit(db_url).path.lstrip("/")
    role = "t_runner_" + uuid.uuid4().hex[:8]
    conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE mailroom_runner")  # grants act on the group role
    parts = urlsplit(db_url)
    runner_url = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
    apply, fix, sqlstate = _faults(conn, database)[fault]
    conn.execute(
        "SELECT count(mailroom.enqueue(format('u%%s@example.com', i), 's', 'b', p_delivery_key => 'k' || i))"
        " FROM generate_series(1, %s) i", (N,))
    try:
        with Sink(delay=1.5) as sink, RunnerProcess(
            runner_url, sink.url(), "--concurrency", str(N), "--batch", str(N), "--poll-interval", "0.2",
        ) as r, connect(server_url) as admin:
            wait_for(lambda: sink.stats()["attempts"] >= N, what="every mail at the sink")
            for stmt in apply:
                conn.execute(stmt)
            _kick_runner_connections(admin, database)
            wait_for(lambda: sink.stats()["received"] == N, what="every mail delivered")
            wait_for(lambda: sqlstate in r.log(), timeout=15, what=f"the runner to meet {sqlstate}")
            time.sleep(1.0)  # retries with backoff meanwhile
            assert statuses(conn) == {"sending": N}, r.log()
            # Nothing more claimed on top of the unwritten outcomes.
            assert conn.execute("SELECT count(*)::int AS n FROM mailroom.attempts").fetchone()["n"] == 0
            assert r.proc.poll() is None, r.log()
            for stmt in fix:
                conn.execute(stmt)
            _kick_runner_connections(admin, database)
            wait_for(lambda: statuses(conn) == {"sent": N}, timeout=30, what="the kept outcomes written")
            assert r.stop() == 0, r.log()
            log = r.log()
            stats = sink.stats()
    finally:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
    assert (stats["received"], stats["duplicates"]) == (N, 0)  # each mail sent exactly once
    assert "runner.outcome_rejected" not in log and "db.down" in log and "db.up" in log
    ledger = conn.execute("SELECT outcome, count(*)::int AS n FROM mailroom.attempts GROUP BY 1").fetchall()
    assert [(a["outcome"], a["n"]) for a in ledger] == [("sent", N)]
