"""Webhook delivery of the event feed (mailroom.send.webhooks,
deploy/webhook_delivery.sql) to a real HTTPS server on loopback, with a
self-signed certificate the runner is told to trust (--webhook-ca-file)."""

from __future__ import annotations

import json

import psycopg
import pytest

from mailroom.dev.sink import Sink
from mailroom.dev.webhook_sink import WebhookSink
from mailroom.send import webhooks
from mailroom.signing import b64url_decode, new_key_line
from tests.runnerkit import RunnerProcess, enqueue_many, self_signed_cert, statuses, wait_for


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed_cert(tmp_path_factory.mktemp("webhook-tls"))


@pytest.fixture
def secrets_file(tmp_path):
    line = new_key_line("hooks")
    path = tmp_path / "webhook-secrets"
    path.write_text(line + "\n")
    return str(path), b64url_decode(line.split("=", 1)[1])


def status(conn, name="app"):
    return conn.execute("SELECT * FROM mailroom.webhook_status WHERE name = %s", (name,)).fetchone()


def test_events_are_signed_delivered_in_order_and_retried_after_a_500(db_url, conn, cert, secrets_file):
    ctx, cafile = cert
    path, secret = secrets_file
    with WebhookSink(ctx, fail_first=2) as endpoint, Sink() as sink:
        conn.execute("SELECT mailroom.webhook_endpoint_set('app', %s, 'hooks', ARRAY['sent'])", (endpoint.url,))
        enqueue_many(conn, "hook", 5)
        with RunnerProcess(db_url, f"smtp://127.0.0.1:{sink.port}", "--webhook-secrets", path,
                           "--webhook-ca-file", cafile, "--poll-interval", "0.2") as runner:
            wait_for(lambda: len(endpoint.accepted()) == 5, timeout=60, what="5 sent events accepted")
            runner.stop()
            log = runner.log()
    assert statuses(conn) == {"sent": 5}
    accepted = endpoint.accepted()
    events = [json.loads(r["body"]) for r in accepted]
    assert {e["type"] for e in events} == {"sent"}
    # Feed order, each event's id as its idempotency key.
    feed = [r["cursor"] for r in conn.execute("SELECT cursor FROM mailroom.events_since(NULL, 100, p_kinds => ARRAY['sent'])")]
    assert [e["cursor"] for e in events] == feed
    for r, e in zip(accepted, events):
        assert r["headers"]["Mailroom-Event-Id"] == str(e["id"]) == r["headers"]["Idempotency-Key"]
        assert webhooks.verify(secret, r["headers"]["Mailroom-Signature"], r["body"])
        assert not webhooks.verify(b"x" * 32, r["headers"]["Mailroom-Signature"], r["body"])
        assert not webhooks.verify(secret, r["headers"]["Mailroom-Signature"], r["body"] + b" ")
    # The two 500s: the first event went three times under one id.
    first_id = events[0]["id"]
    assert [json.loads(r["body"])["id"] for r in endpoint.requests[:3]] == [first_id] * 3
    row = status(conn)
    assert row["status"] == "active" and row["failures"] == 0 and row["delivered"] == 5
    assert row["last_error"].startswith("HTTP 500")
    assert secret.hex() not in log and path not in json.dumps(row, default=str)


def test_a_dead_endpoint_is_paused_while_mail_keeps_flowing(db_url, conn, cert, secrets_file):
    ctx, cafile = cert
    path, _ = secrets_file
    with WebhookSink(ctx, fail_always=True) as endpoint, Sink() as sink:
        conn.execute("SELECT mailroom.webhook_endpoint_set('app', %s, 'hooks', p_max_failures => 2)", (endpoint.url,))
        enqueue_many(conn, "dead", 50)
        with RunnerProcess(db_url, f"smtp://127.0.0.1:{sink.port}", "--webhook-secrets", path,
                           "--webhook-ca-file", cafile, "--poll-interval", "0.2") as runner:
            wait_for(lambda: status(conn)["status"] == "paused", timeout=60, what="the endpoint paused")
            wait_for(lambda: statuses(conn) == {"sent": 50}, timeout=60, what="all mail sent")
            runner.stop()
            log = runner.log()
    row = status(conn)
    assert row["failures"] == 2 and row["delivered"] == 0
    assert row["paused_reason"].startswith("2 failures in a row; the last: HTTP 500")
    assert "webhooks.endpoint_paused" in log
    # Paused: its events wait (the cursor never moved); resume starts over from there.
    assert row["events_behind"] >= 50
    conn.execute("SELECT mailroom.webhook_endpoint_resume('app')")
    assert status(conn)["status"] == "active" and status(conn)["failures"] == 0


def test_the_endpoint_certificate_is_verified(db_url, conn, cert, secrets_file):
    """Without --webhook-ca-file the self-signed endpoint is not trusted."""
    ctx, _ = cert
    path, _ = secrets_file
    with WebhookSink(ctx) as endpoint, Sink() as sink:
        conn.execute("SELECT mailroom.webhook_endpoint_set('app', %s, 'hooks', p_max_failures => 1)", (endpoint.url,))
        enqueue_many(conn, "tls", 1)
        with RunnerProcess(db_url, f"smtp://127.0.0.1:{sink.port}", "--webhook-secrets", path,
                           "--poll-interval", "0.2") as runner:
            wait_for(lambda: status(conn)["status"] == "paused", timeout=60, what="the endpoint paused")
            runner.stop()
    assert "CERTIFICATE_VERIFY_FAILED" in status(conn)["last_error"]
    assert endpoint.requests == []


def test_a_runner_without_the_secret_claims_nothing_and_leases_exclude_each_other(conn):
    conn.execute("SELECT mailroom.webhook_endpoint_set('app', 'https://example.com/h', 'hooks', p_from_start => true)")
    conn.execute("SELECT mailroom.suppress('x@example.com')")
    assert conn.execute("SELECT * FROM mailroom.webhook_claim('w0', ARRAY['other'])").fetchall() == []
    # The feed hands out nothing newer than the oldest transaction open in the
    # cluster (other tests' among them): claim until the event is handed out.
    first = wait_for(lambda: conn.execute("SELECT * FROM mailroom.webhook_claim('w1', ARRAY['hooks'])").fetchall(),
                     timeout=120, interval=0.2, what="the suppressed event to be claimable")
    assert len(first) == 1 and [e["kind"] for e in first[0]["events"]] == ["suppressed"]
    assert conn.execute("SELECT * FROM mailroom.webhook_claim('w2', ARRAY['hooks'])").fetchall() == []
    assert status(conn)["delivering_worker"] == "w1"
    lost = conn.execute("SELECT mailroom.webhook_report('app', gen_random_uuid(), %s, 1) AS s",
                        (first[0]["batch_end"],)).fetchone()["s"]
    assert lost == "lost" and status(conn)["delivered"] == 0
    done = conn.execute("SELECT mailroom.webhook_report('app', %s, %s, 1) AS s",
                        (first[0]["lease_token"], first[0]["batch_end"])).fetchone()["s"]
    assert done == "active" and status(conn)["cursor"] == first[0]["batch_end"]
    assert conn.execute("SELECT * FROM mailroom.webhook_claim('w2', ARRAY['hooks'])").fetchall() == []


@pytest.mark.parametrize("args, message", [
    ("'a', 'http://example.com/h', 'hooks'", "mailroom: url: must be an https:// URL"),
    ("'a', 'https://user:pw@example.com/h', 'hooks'", "mailroom: url: must be an https:// URL"),
    ("'a', 'https://example.com/h', 'x=secret-looking-value'", "mailroom: secret_name:"),
    ("'a b', 'https://example.com/h', 'hooks'", "mailroom: name:"),
    ("'a', 'https://example.com/h', 'hooks', ARRAY['delivered']", 'mailroom: kinds: unknown event kind "delivered"'),
    ("'a', 'https://example.com/h', 'hooks', NULL, ARRAY['nope']", 'mailroom: streams: unknown stream "nope"'),
    ("'a', 'https://example.com/h', 'hooks', p_max_failures => 0", "mailroom: max_failures:"),
])
def test_bad_endpoints_are_refused(conn, args, message):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
        conn.execute(f"SELECT mailroom.webhook_endpoint_set({args})")
    assert conn.execute("SELECT count(*) AS n FROM mailroom.webhook_endpoints").fetchone()["n"] == 0
