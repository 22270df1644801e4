"""Rough edges a new user hit (issue 17, part 3), each against the real thing:
a real `mailroom run` and aiosmtpd sink, the CLI in-process on a real cluster."""

from __future__ import annotations

import json

from mailroom.sink import Rule, Sink
from tests.operatorkit import run
from tests.runnerkit import FROM, RunnerProcess, enqueue, parse, settled, wait_for

FAST = ("--poll-interval", "0.2", "--concurrency", "2", "--batch", "10")


def test_last_error_says_the_smtp_code_once_and_inspect_shows_the_message_id_sent(db_url, conn):
    rules = [Rule(550, "5.1.1 No such user", stage="rcpt", rcpt_contains="nobody@")]
    nobody = enqueue(conn, "nobody@example.com", subject="s", body_text="b", delivery_key="edge-nobody")
    enqueue(conn, "fine@example.com", subject="s", body_text="b", delivery_key="edge-fine")
    with Sink(keep=True, rules=rules) as sink, RunnerProcess(db_url, sink.url(), *FAST) as r:
        wait_for(lambda: settled(conn, 2), what="both settled")
        assert r.stop() == 0, r.log()
        (received,) = sink.messages

    last_error = conn.execute("SELECT last_error FROM mailroom.messages WHERE id = %s", [nobody]).fetchone()
    assert last_error == {"last_error": "550 5.1.1 rcpt: No such user"}

    code, out, err = run("inspect", "--dsn", db_url, "--from", FROM, "--json", "edge-fine")
    assert code == 0, err
    assert json.loads(out)["message_id"] == parse(received["data"])["Message-ID"]
    code, out, err = run("inspect", "--dsn", db_url, "--from", FROM, "edge-fine")
    assert f"message_id:       {parse(received['data'])['Message-ID']}\n" in out


def test_an_enqueue_whose_key_exists_says_so_with_a_notice(conn):
    """The id comes back either way (idempotence); the repeat raises a NOTICE
    with SQLSTATE 01MR1 that a client can catch, and a new mail raises none."""
    notices = []
    # psycopg's Diagnostic is only valid inside the handler: keep its fields
    conn.add_notice_handler(lambda diag: notices.append((diag.sqlstate, diag.message_primary)))
    first = enqueue(conn, "ann@example.com", subject="Receipt", body_text="b", delivery_key="order:1:receipt")
    assert notices == []
    again = enqueue(conn, "ann@example.com", subject="Receipt", body_text="b", delivery_key="order:1:receipt")
    assert again == first
    assert notices == [
        ("01MR1", f'mailroom: delivery_key: "order:1:receipt" already exists (message {first}): nothing new was queued')]
