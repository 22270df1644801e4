"""STARTTLS + AUTH and implicit TLS against a sink with a self-signed certificate (runnerkit)."""

from __future__ import annotations

import pytest

from mailroom.dev.sink import Sink
from tests.runnerkit import RunnerProcess, enqueue, self_signed_cert, statuses

PASSWORD = "s3cret p@ss/word"
QUOTED = "s3cret%20p%40ss%2Fword"


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


def test_starttls_and_auth(db_url, conn, cert):
    ctx, cafile = cert
    enqueue(conn, "secure@example.com", subject="over TLS", body_text="hello")
    with Sink(keep=True, starttls_context=ctx, require_starttls=True, auth=("mailer", PASSWORD)) as sink:
        url = f"smtp://mailer:{QUOTED}@localhost:{sink.port}?starttls&cafile={cafile}&timeout=5"
        with RunnerProcess(db_url, url, "--exit-when-idle", "--log-level", "debug") as r:
            assert r.wait() == 0, r.log()
            log = r.log()
    assert statuses(conn) == {"sent": 1}
    assert sink.stats()["received"] == 1 and sink.stats()["auth_failures"] == 0
    assert "smtp://mailer:***@localhost" in log
    assert PASSWORD not in log and QUOTED not in log


def test_wrong_password_is_retried_and_never_logged(db_url, conn, cert):
    ctx, cafile = cert
    enqueue(conn, "secure@example.com", subject="over TLS", body_text="hello")
    with Sink(keep=True, starttls_context=ctx, require_starttls=True, auth=("mailer", "right")) as sink:
        url = f"smtp://mailer:{QUOTED}@localhost:{sink.port}?starttls&cafile={cafile}&timeout=5"
        with RunnerProcess(db_url, url, "--exit-when-idle", "--log-format", "json") as r:
            assert r.wait() == 0, r.log()
            log = r.log()
    assert sink.stats()["received"] == 0 and sink.stats()["auth_failures"] >= 1
    row = conn.execute("SELECT status, last_error FROM mailroom.messages").fetchone()
    assert row["status"] == "queued" and "535" in row["last_error"]
    assert '"event": "smtp.down"' in log
    assert PASSWORD not in log and QUOTED not in log


def test_implicit_tls(db_url, conn, cert):
    ctx, cafile = cert
    enqueue(conn, "tls@example.com", subject="smtps", body_text="hello")
    with Sink(keep=True, tls_context=ctx) as sink:
        with RunnerProcess(db_url, f"smtps://127.0.0.1:{sink.port}?cafile={cafile}", "--exit-when-idle") as r:
            assert r.wait() == 0, r.log()
    assert statuses(conn) == {"sent": 1}
