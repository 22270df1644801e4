"""Adaptive throttling per destination group (issue 30, item 1).

The learning step (mark_outcomes) and the claim's budget are checked first
with pinned clocks (the owner-only twins _mark_outcomes and _claim_batch), so
each decision is a fact, not a timing; then end to end: real `mailroom run`
processes against a sink that answers 421 4.7.28 above N mails a second."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from mailroom import metrics, queries
from mailroom.dev.sink import Sink
from mailroom.web.console import create_app
from mailroom.web.console.db import Database
from tests.conftest import connect
from tests.operatorkit import as_user, run
from tests.runnerkit import RunnerProcess, wait_for

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)
GMAIL_421 = "4.7.28 Our system has detected an unusual rate of unsolicited mail, rate limited. - gsmtp"


def _enqueue(conn, domain: str, n: int, tag: str = "") -> None:
    conn.execute(
        """SELECT mailroom.enqueue('t' || g || '@' || %(d)s, 'Throttle', 'Body',
                                   p_delivery_key => 'throttle-' || %(tag)s || %(d)s || g, p_max_attempts => 100)
           FROM generate_series(1, %(n)s) AS g""",
        {"d": domain, "tag": tag, "n": n},
    )
    # Due before every pinned clock of these tests.
    conn.execute("UPDATE mailroom.queue SET run_at = %s, updated_at = %s", (T0 - timedelta(hours=1),) * 2)


def _claim(conn, n: int, at: datetime) -> list[dict]:
    return conn.execute(
        "SELECT id, lease_token, to_address FROM mailroom._claim_batch('throttle-test', %s, '5 minutes', NULL, %s)",
        (n, at)).fetchall()


def _report(conn, rows: list[dict], at: datetime, *, deferred: int = 0, text: str = GMAIL_421) -> None:
    """The first `deferred` rows deferred (421 + text), the rest sent."""
    results = []
    for i, r in enumerate(rows):
        if i < deferred:
            results.append({"id": r["id"], "token": str(r["lease_token"]), "outcome": "retry",
                            "smtp_code": 421, "smtp_enhanced": text.split()[0], "detail": "data: 421 " + text})
        else:
            results.append({"id": r["id"], "token": str(r["lease_token"]), "outcome": "sent",
                            "smtp_code": 250, "smtp_enhanced": "2.0.0", "detail": "data: 250 2.0.0 OK"})
    conn.execute("SELECT mailroom._mark_outcomes(%s::jsonb, %s)", (json.dumps(results), at))


def _rate(conn, group: str) -> dict | None:
    return conn.execute("SELECT * FROM mailroom.destination_rates() WHERE group_name = %s", (group,)).fetchone()


def test_deferrals_lower_the_rate_once_per_interval_and_clean_sends_raise_it_to_the_ceiling(conn):
    conn.execute("SELECT mailroom.set_setting('throttle_ceiling', '600')")
    conn.execute("SELECT mailroom.set_setting('throttle_increase_step', '60')")
    _enqueue(conn, "gmail.com", 400)
    rows = _claim(conn, 20, T0)
    _report(conn, rows, T0, deferred=5)
    r = _rate(conn, "google")
    # The first deferral: the group starts at its ceiling x 0.5, in effect,
    # lowered since then, with the answer that lowered it.
    assert (r["in_effect"], r["rate_per_minute"], r["ceiling_per_minute"]) == (True, 300, 600)
    assert r["lowered_since"] == T0 and r["last_deferral"].startswith("421 4.7.28") and r["deferrals"] == 5

    # More deferrals within the interval (the mail that was in flight): no
    # second decrease.
    _report(conn, _claim(conn, 4, T0 + timedelta(seconds=5)), T0 + timedelta(seconds=10), deferred=4)
    assert _rate(conn, "google")["rate_per_minute"] == 300
    # A deferral an interval later halves it again.
    _report(conn, _claim(conn, 2, T0 + timedelta(seconds=61)), T0 + timedelta(seconds=61), deferred=1)
    assert _rate(conn, "google")["rate_per_minute"] == 150

    # Clean sends within the interval after a deferral: no increase yet ...
    at = T0 + timedelta(seconds=90)
    _report(conn, _claim(conn, 2, at), at)
    assert _rate(conn, "google")["rate_per_minute"] == 150
    # ... each clean interval after it adds the step (60 a minute), and the
    # rate never passes the ceiling: once it reaches it the throttle lifts.
    seen = []
    for k in range(1, 12):
        at = T0 + timedelta(seconds=61 + 61 * k)
        _report(conn, _claim(conn, 1, at), at)
        r = _rate(conn, "google")
        seen.append(r["rate_per_minute"])
        assert r["rate_per_minute"] <= r["ceiling_per_minute"]
    assert seen[:4] == [210, 270, 330, 390]
    assert seen[-1] == 600
    r = _rate(conn, "google")
    assert r["in_effect"] is False and r["lowered_since"] is None


def test_a_throttled_group_is_one_budget_at_claim_time_and_other_mail_flows(conn):
    conn.execute("SELECT mailroom.set_setting('throttle_ceiling', '240')")  # learned: 120 a minute = 2 a second
    _enqueue(conn, "gmail.com", 50)
    _enqueue(conn, "googlemail.com", 50, tag="g")
    _enqueue(conn, "other.test", 50, tag="o")
    _report(conn, _claim(conn, 1, T0), T0, deferred=1)
    assert _rate(conn, "google")["rate_per_minute"] == 120
    rows = _claim(conn, 200, T0 + timedelta(seconds=1))
    domains = [r["to_address"].split("@")[1] for r in rows]
    # gmail.com and googlemail.com share the group's 2 a second; the other
    # domain is not held back.
    assert domains.count("gmail.com") + domains.count("googlemail.com") == 2
    assert domains.count("other.test") == 50
    # Another claim in the same second gets nothing more of the group.
    again = _claim(conn, 200, T0 + timedelta(seconds=1, milliseconds=500))
    assert not [r for r in again if "google" in r["to_address"] or "gmail" in r["to_address"]]


def test_the_operators_domain_limit_caps_the_learned_rate(conn):
    conn.execute("SELECT mailroom.set_domain_limits('*', NULL, 100)")
    _enqueue(conn, "example.org", 10)
    _report(conn, _claim(conn, 1, T0), T0, deferred=1, text="4.7.0 Try again later")
    r = _rate(conn, "example.org")
    # A domain no group knows is its own group; its ceiling is the default limit.
    assert (r["ceiling_per_minute"], r["rate_per_minute"]) == (100, 50)


def test_a_deferral_text_teaches_the_group_of_an_unknown_domain(conn):
    _enqueue(conn, "acme-workspace.test", 5)
    _report(conn, _claim(conn, 1, T0), T0, deferred=1)  # the relay passed Gmail's answer on (gsmtp)
    g = conn.execute("SELECT group_name, source FROM mailroom.destination_groups WHERE pattern = 'acme-workspace.test'"
                     ).fetchone()
    assert (g["group_name"], g["source"]) == ("google", "learned")
    assert _rate(conn, "google")["in_effect"] is True
    # Yahoo's and Microsoft's texts name theirs.
    names = conn.execute(
        """SELECT mailroom._provider_from_text('421 4.7.0 [TSS04] Messages from 192.0.2.1 temporarily deferred') AS y,
                  mailroom._provider_from_text('451 4.7.650 The mail server [192.0.2.1] has been temporarily rate limited') AS m,
                  mailroom._provider_from_text('421 RP-001 (BAY004-MC1F20) Unfortunately, S775 ...') AS m2""").fetchone()
    assert names == {"y": "yahoo", "m": "microsoft", "m2": "microsoft"}


def test_what_is_no_rate_deferral_teaches_nothing(conn):
    _enqueue(conn, "gmail.com", 5)
    rows = _claim(conn, 2, T0)
    results = [{"id": rows[0]["id"], "token": str(rows[0]["lease_token"]), "outcome": "failed", "smtp_code": 550,
                "smtp_enhanced": "5.1.1", "detail": "rcpt: 550 5.1.1 no such user"},
               {"id": rows[1]["id"], "token": str(rows[1]["lease_token"]), "outcome": "retry",
                "detail": "connect: connection refused"}]
    conn.execute("SELECT mailroom._mark_outcomes(%s::jsonb, %s)", (json.dumps(results), T0))
    assert conn.execute("SELECT count(*) AS n FROM mailroom.destination_throttles").fetchone()["n"] == 0


def test_bad_throttle_input_is_refused_with_22023(conn):
    for sql, message in {
        "SELECT mailroom.set_setting('throttle_decrease_factor', '1')":
            "mailroom: throttle_decrease_factor: must be between 0.05 and 0.95, got 1",
        "SELECT mailroom.set_setting('throttle_interval', 'soon')": "mailroom: throttle_interval: must be an interval",
        "SELECT mailroom.set_destination_group('not a domain', 'google')":
            "mailroom: pattern: must be a domain or host suffix such as gmail.com, got not a domain",
        "SELECT mailroom.set_destination_group('corp.example', 'Big Provider')":
            "mailroom: group: must be 1 to 63 lower-case letters",
    }.items():
        with pytest.raises(psycopg.Error) as e:
            conn.execute(sql)
        assert e.value.diag.sqlstate == "22023", sql
        assert e.value.diag.message_primary.startswith(message), e.value.diag.message_primary
    assert conn.execute("SELECT count(*) AS n FROM mailroom.destination_groups WHERE source = 'operator'"
                        ).fetchone()["n"] == 0
    conn.execute("SELECT mailroom.set_destination_group('Corp.Example', 'google')")
    assert conn.execute("SELECT mailroom._destination_group('mx1.corp.example') AS g").fetchone()["g"] == "google"


def test_runners_learn_a_rate_under_a_deferring_sinks_limit_and_recover_after_it_relents(db_url, conn):
    """A sink that defers above 4 mails/s (421 4.7.28, Gmail's text). The
    facts checked: the rate was lowered after deferrals and stays below its
    ceiling, deferrals stop being most of what the sink answers, and after
    the sink relents the rate rises again until the throttle lifts."""
    for key, value in {"throttle_interval": "1 second", "throttle_ceiling": "600", "throttle_increase_step": "60",
                       "retry_backoff_base": "100 milliseconds", "retry_backoff_max": "1 second"}.items():
        conn.execute("SELECT mailroom.set_setting(%s, %s)", (key, value))
    conn.execute(
        """SELECT mailroom.enqueue('t' || g || '@gmail.com', 'Throttle', 'Body',
                                   p_delivery_key => 'e2e-' || g, p_max_attempts => 100)
           FROM generate_series(1, 400) AS g""")
    ceilings_seen: list[tuple[float, int]] = []

    def watch() -> dict | None:
        r = _rate(conn, "google")
        if r:
            ceilings_seen.append((float(r["rate_per_minute"]), r["ceiling_per_minute"]))
        return r

    with Sink(max_rate=4) as sink:
        runner = RunnerProcess(db_url, sink.url(query="timeout=10"), "--batch", "10", "--concurrency", "4",
                               "--poll-interval", "0.2", "--log-level", "warning")
        try:
            wait_for(lambda: (r := watch()) is not None and r["in_effect"], timeout=60, what="a learned rate")
            lowered = watch()
            assert lowered["rate_per_minute"] < lowered["ceiling_per_minute"]
            assert lowered["last_deferral"].startswith("421 4.7.28")
            # It converges under the sink's limit (4 a second = 240 a
            # minute): while it is above, the sink keeps deferring and each
            # interval halves it.
            wait_for(lambda: float(watch()["rate_per_minute"]) < 240, timeout=60, what="a rate under 4/s")
            # The deferral share falls: of the sink's answers after the rate
            # was learned, most are acceptances.
            wait_for(lambda: sink.stats()["received"] >= 120, timeout=120, what="120 mails accepted")
            d0, r0 = sink.deferred, sink.stats()["received"]
            wait_for(lambda: sink.stats()["received"] - r0 >= 40, timeout=120, what="40 more accepted")
            d1, r1 = sink.deferred, sink.stats()["received"]
            assert (d1 - d0) < (r1 - r0), f"{d1 - d0} deferred against {r1 - r0} accepted"
            # Relent: the rate rises back to the ceiling and the throttle lifts.
            low = float(watch()["rate_per_minute"])
            sink.max_rate = None
            wait_for(lambda: float(watch()["rate_per_minute"]) > low, timeout=60, what="the rate to rise")
            wait_for(lambda: not watch()["in_effect"], timeout=120, what="the throttle to lift")
        finally:
            runner.stop()
            runner.close()
    assert all(rate <= ceiling for rate, ceiling in ceilings_seen)


@pytest.fixture
def operator_login(conn, db_url):
    name = f"t_deliverability_{uuid.uuid4().hex[:8]}"
    conn.execute(f'CREATE ROLE "{name}" LOGIN IN ROLE mailroom_operator')
    yield as_user(db_url, name)
    conn.execute(f'DROP ROLE IF EXISTS "{name}"')


def test_status_console_and_metrics_show_the_learned_rate_and_the_warmup(conn, db_url, operator_login):
    _enqueue(conn, "gmail.com", 5)
    _report(conn, _claim(conn, 1, T0), T0, deferred=1)
    conn.execute("SELECT mailroom.set_sender_warmup('fresh', ARRAY[40, 80])")

    code, out, _ = run("status", "--dsn", operator_login, "--json")
    assert code == 0
    report = json.loads(out)
    google = next(t for t in report["throttles"] if t["group_name"] == "google")
    assert google["in_effect"] is True and google["last_deferral"].startswith("421 4.7.28")
    assert google["lowered_since"].startswith("2026-12-07T12:00:00")
    fresh = next(w for w in report["warmups"] if w["sender"] == "fresh")
    assert (fresh["day"], fresh["budget"], fresh["remaining"]) == (1, 40, 40)
    code, out, _ = run("status", "--dsn", operator_login)
    assert code == 0
    throttle = out.split("THROTTLE", 1)[1].split("WARM-UP", 1)[0]
    assert "google" in throttle and "3000.0/min" in throttle and "4.7.28" in throttle
    assert "fresh" in out.split("WARM-UP", 1)[1] and "1 of 2" in out.split("WARM-UP", 1)[1]

    db = Database(operator_login)
    db.open()
    try:
        app = create_app(database=db, trust_header="X-Remote-User")
        page = app.test_client().get("/rates", headers={"X-Remote-User": "ann"})
        assert page.status_code == 200
        html = page.get_data(as_text=True)
        assert "google" in html and "4.7.28" in html and "1 of 2" in html
    finally:
        db.close()

    # The runner's metrics: what its heartbeat reads (as mailroom_runner).
    with connect(db_url) as runner_conn:
        runner_conn.execute("SET ROLE mailroom_runner")
        metrics.export_deliverability(*queries.deliverability(runner_conn))
    assert metrics.DESTINATION_THROTTLED.labels("google")._value.get() == 1
    assert metrics.DESTINATION_RATE.labels("google")._value.get() == 3000
    assert metrics.DESTINATION_LOWERED_SINCE.labels("google")._value.get() == T0.timestamp()
    assert metrics.WARMUP_REMAINING.labels("fresh")._value.get() == 40
