"""End to end through a real `mailroom run` process and an aiosmtpd sink on loopback."""

from __future__ import annotations

import pytest

from mailroom.dev.sink import Rule, Sink
from tests.runnerkit import RunnerProcess, enqueue, parse, runners_message_id, settled, statuses, wait_for

FAST = ("--poll-interval", "0.2", "--concurrency", "4", "--batch", "20")


@pytest.fixture
def sink():
    with Sink(keep=True) as s:
        yield s


def test_rollback_is_never_sent_commit_arrives_complete(db_url, conn, sink):
    with pytest.raises(RuntimeError):
        with conn.transaction():
            enqueue(conn, "rolled.back@example.com", subject="never", body_text="never",
                    delivery_key="order-41")
            raise RuntimeError("the business write failed")
    with conn.transaction():
        enqueue(conn, "ada@example.com", subject="Your order 42 ✓",
                body_text="Plain text body\n.\nwith a lone dot line", body_html="<p>HTML <b>body</b></p>",
                headers={"Reply-To": "support@example.com", "X-Order": "42"},
                delivery_key="order-42")
    with RunnerProcess(db_url, sink.url(), "--exit-when-idle", *FAST) as r:
        assert r.wait() == 0, r.log()

    assert statuses(conn) == {"sent": 1}
    assert len(sink.messages) == 1
    got = sink.messages[0]
    assert got["rcpt_tos"] == ["ada@example.com"]
    assert got["mail_from"] == "noreply@tests.mailroom.invalid"
    mail = parse(got["data"])
    assert mail["Message-ID"] == runners_message_id(conn, "order-42")
    assert mail["Subject"] == "Your order 42 ✓"
    assert mail["To"] == "ada@example.com"
    assert mail["From"] == "Mailroom Tests <noreply@tests.mailroom.invalid>"
    assert mail["Reply-To"] == "support@example.com"
    assert mail["X-Order"] == "42"
    assert mail["Date"] is not None
    assert mail.get_content_type() == "multipart/alternative"
    parts = {p.get_content_type(): p.get_content() for p in mail.iter_parts()}
    assert parts["text/plain"].replace("\r\n", "\n") == "Plain text body\n.\nwith a lone dot line\n"
    assert parts["text/html"].strip() == "<p>HTML <b>body</b></p>"
    ledger = conn.execute("SELECT outcome, smtp_code, provider_id FROM mailroom.attempts").fetchall()
    assert ledger == [{"outcome": "sent", "smtp_code": 250, "provider_id": "SINK00000001"}]


def test_template_missing_variable_fails_that_one_only(db_url, conn, sink):
    conn.execute("SELECT mailroom.upsert_template('welcome', 'Welcome {{ name }}',"
                 " 'Hello {{ name }}, your code is {{ code }}.', '<p>Hello {{ name }}</p>')")
    for i in range(5):
        enqueue(conn, f"user{i}@example.com", template="welcome",
                vars={"name": f"<User {i}>", "code": i})
    bad = enqueue(conn, "nocode@example.com", template="welcome", vars={"name": "No Code"})
    with RunnerProcess(db_url, sink.url(), "--exit-when-idle", *FAST) as r:
        assert r.wait() == 0, r.log()

    assert statuses(conn) == {"sent": 5, "failed": 1}
    row = conn.execute("SELECT status, last_error FROM mailroom.messages WHERE id = %s", [bad]).fetchone()
    assert row["status"] == "failed"
    assert "'code' is undefined" in row["last_error"]
    assert sorted(m["rcpt_tos"][0] for m in sink.messages) == [f"user{i}@example.com" for i in range(5)]
    mail = parse(sink.messages[0]["data"])
    html = mail.get_body(("html",)).get_content()
    assert "&lt;User" in html  # HTML autoescapes variables
    assert mail["Subject"].startswith("Welcome <User")


def test_4xx_retried_then_delivered_5xx_failed_with_code_lost_reply_ambiguous(db_url, conn):
    conn.execute("SELECT mailroom.set_setting('retry_backoff_base', '100 milliseconds')")
    rules = [
        Rule(451, "4.3.0 Mailbox busy, try later", rcpt_contains="busy@", times=1),
        Rule(550, "5.1.1 No such user here", stage="rcpt", rcpt_contains="nobody@"),
        Rule(drop=True, rcpt_contains="unsure@"),
    ]
    busy = enqueue(conn, "busy@example.com", subject="s", body_text="b")
    nobody = enqueue(conn, "nobody@example.com", subject="s", body_text="b")
    fine = enqueue(conn, "fine@example.com", subject="s", body_text="b")
    unsure = enqueue(conn, "unsure@example.com", subject="s", body_text="b", on_ambiguous="review")
    with Sink(keep=True, rules=rules) as sink, RunnerProcess(db_url, sink.url(), *FAST) as r:
        wait_for(lambda: settled(conn, 4, final=("sent", "failed", "review")), what="all four settled")
        assert r.stop() == 0, r.log()

    rows = {r["id"]: r for r in conn.execute(
        "SELECT id, status, attempts FROM mailroom.messages").fetchall()}
    assert rows[busy]["status"] == "sent" and rows[busy]["attempts"] == 2
    assert rows[fine]["status"] == "sent" and rows[fine]["attempts"] == 1
    assert rows[nobody]["status"] == "failed"
    assert rows[unsure]["status"] == "review"  # connection lost after the body: ambiguous
    ledger = conn.execute(
        "SELECT message_id, outcome, smtp_code, smtp_enhanced, smtp_text FROM mailroom.attempts"
        " ORDER BY id").fetchall()
    busy_ledger = [(a["outcome"], a["smtp_code"], a["smtp_enhanced"]) for a in ledger if a["message_id"] == busy]
    assert busy_ledger == [("retry", 451, "4.3.0"), ("sent", 250, "2.0.0")]
    (failed,) = [a for a in ledger if a["message_id"] == nobody]
    assert (failed["outcome"], failed["smtp_code"], failed["smtp_enhanced"]) == ("failed", 550, "5.1.1")
    assert "No such user" in failed["smtp_text"]
    assert [a["outcome"] for a in ledger if a["message_id"] == unsure] == ["ambiguous"]
    assert sorted(m["rcpt_tos"][0] for m in sink.messages) == ["busy@example.com", "fine@example.com"]


def test_a_login_role_with_only_mailroom_runner_is_enough(db_url, conn, server_url, sink):
    import uuid
    from urllib.parse import urlsplit, urlunsplit

    from tests.conftest import connect

    role = "t_runner_" + uuid.uuid4().hex[:8]
    enqueue(conn, "least@example.com", subject="s", body_text="b")
    with connect(server_url) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN IN ROLE mailroom_runner")
        try:
            parts = urlsplit(db_url)
            url = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
            with RunnerProcess(url, sink.url(), "--exit-when-idle", *FAST) as r:
                assert r.wait() == 0, r.log()
        finally:
            admin.execute(f"DROP ROLE {role}")
    assert statuses(conn) == {"sent": 1}


def test_sender_option_serves_only_that_profile(db_url, conn, sink):
    mine = enqueue(conn, "a@example.com", subject="s", body_text="b", sender="transactional")
    other = enqueue(conn, "b@example.com", subject="s", body_text="b", sender="marketing")
    with RunnerProcess(db_url, sink.url(), "--exit-when-idle", "--sender", "transactional", *FAST) as r:
        assert r.wait() == 0, r.log()
    rows = {r["id"]: r["status"] for r in conn.execute("SELECT id, status FROM mailroom.messages")}
    assert rows == {mine: "sent", other: "queued"}


@pytest.mark.parametrize("url,expected", [("null://", "sent"), ("null://?render=1", "failed")])
def test_null_transport_renders_only_when_asked(db_url, conn, url, expected):
    """null:// accepts without building the mail (a template that cannot render
    still goes out); null://?render=1 builds it, so the render error fails it."""
    conn.execute("SELECT mailroom.upsert_template('broken', 'Hi {{ name }}', 'Hello {{ name }}', NULL)")
    enqueue(conn, "a@example.com", template="broken", vars={})  # no "name": StrictUndefined
    enqueue(conn, "b@example.com", template="broken", vars={"name": "B"})
    with RunnerProcess(db_url, url, "--exit-when-idle", *FAST) as r:
        assert r.wait() == 0, r.log()
    rows = conn.execute("SELECT to_address, status, status_reason FROM mailroom.messages ORDER BY id").fetchall()
    assert [(m["to_address"], m["status"]) for m in rows] == [("a@example.com", expected), ("b@example.com", "sent")]


def test_runner_works_on_a_database_whose_default_isolation_is_repeatable_read(db_url, conn, sink):
    # claim_batch and mark_outcomes refuse anything but READ COMMITTED (0A000):
    # the runner must not inherit a stricter database default.
    database = conn.execute("SELECT current_database() AS d").fetchone()["d"]
    conn.execute(f'ALTER DATABASE "{database}" SET default_transaction_isolation = \'repeatable read\'')
    enqueue(conn, "rr@example.com", subject="s", body_text="b")
    with RunnerProcess(db_url, sink.url(), "--exit-when-idle", *FAST) as r:
        assert r.wait() == 0, r.log()
    assert statuses(conn) == {"sent": 1}
    assert [m["rcpt_tos"][0] for m in sink.messages] == ["rr@example.com"]
