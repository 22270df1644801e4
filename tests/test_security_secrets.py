"""SMTP credentials never leave the runner: not in a log line, an error, a
database row, `mailroom status` / `mailroom inspect` output or the metrics.

Real `mailroom run` processes (debug level, text and JSON logs) against the
aiosmtpd sink with STARTTLS + AUTH: a delivery that succeeds, a wrong password,
a relay that is down, a TLS failure and a bad URL. Everything they and the CLI
print, and every row of every mailroom table, is searched for the password in
every form it could travel in: as given, URL-encoded (as written in the URL and
as Python quotes it), base64 (AUTH LOGIN sends the password, AUTH PLAIN
"\\0user\\0password" base64-encoded) and its distinctive core, case-insensitively.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import urllib.request
from urllib.parse import quote, quote_plus

import pytest
from aiosmtpd.smtp import AuthResult

from mailroom.dev.sink import Sink
from mailroom.net import free_port
from tests.runnerkit import RunnerProcess, enqueue, self_signed_cert, settled, wait_for

USER = "mailer"
CORE = "Tr0ub4dor"
PASSWORD = CORE + "&3 p@ss/w0rd+=%"
# As an operator might write it in the URL: lower-case hex, unlike Python's quote().
IN_URL = "".join(c if c.isalnum() else "%%%02x" % ord(c) for c in PASSWORD)


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


FORMS = {
    "as given": PASSWORD,
    "as written in the URL": IN_URL,
    "quote()": quote(PASSWORD, safe=""),
    "quote_plus()": quote_plus(PASSWORD),
    "base64 (AUTH LOGIN)": _b64(PASSWORD),
    "base64 (AUTH PLAIN)": _b64(f"\0{USER}\0{PASSWORD}"),
    "base64 (AUTH PLAIN, authzid)": _b64(f"{USER}\0{USER}\0{PASSWORD}"),
}


def assert_no_secret(where: str, text: str) -> None:
    for name, form in FORMS.items():
        assert form not in text, f"the password ({name}) appears in {where}:\n{text}"
    assert CORE.lower() not in text.lower(), f"part of the password appears in {where}:\n{text}"


class EchoingSink(Sink):
    """A relay that quotes the credentials back in its 535 reply, as some echo
    the command they reject: the reply text reaches logs and the ledger."""

    def _authenticate(self, server, session, envelope, mechanism, auth_data):
        super()._authenticate(server, session, envelope, mechanism, auth_data)
        login, password = auth_data.login.decode(), auth_data.password.decode()
        echoed = " ".join([mechanism, _b64(f"\0{login}\0{password}"), _b64(password), password, quote(password)])
        return AuthResult(success=False, handled=False, message=f"535 5.7.8 Rejected: {echoed}")


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


def _cli(*args: str) -> str:
    p = subprocess.run([sys.executable, "-m", "mailroom.cli", *args], capture_output=True, text=True, timeout=60)
    return f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"


def _database_dump(conn) -> str:
    """Every row of every mailroom table (logged or not) as JSON, one per line."""
    tables = [r["t"] for r in conn.execute(
        "SELECT c.oid::regclass::text AS t FROM pg_class c"
        " WHERE c.relnamespace = 'mailroom'::regnamespace AND c.relkind IN ('r', 'p') ORDER BY 1")]
    assert {"mailroom.contents", "mailroom.queue", "mailroom.attempts"} <= set(tables)
    lines = []
    for t in tables:
        lines += [str(r["j"]) for r in conn.execute(f"SELECT row_to_json(x)::text AS j FROM {t} x")]
    return "\n".join(lines)


def _url(port: int, cafile: str | None, password: str = IN_URL) -> str:
    query = "starttls&timeout=5" + (f"&cafile={cafile}" if cafile else "")
    return f"smtp://{USER}:{password}@localhost:{port}?{query}"


def test_smtp_credentials_never_leak(db_url, conn, cert):
    ctx, cafile = cert
    outputs: dict[str, str] = {}
    ids = [enqueue(conn, f"to{i}@example.com", subject="s", body_text="b", delivery_key=f"sec-{i}")
           for i in range(2)]

    # 1. Delivery that works: STARTTLS + AUTH, JSON logs at debug level, metrics scraped while running.
    with Sink(keep=True, starttls_context=ctx, require_starttls=True, auth=(USER, PASSWORD)) as sink:
        port = free_port()
        with RunnerProcess(db_url, _url(sink.port, cafile), "--log-format", "json", "--log-level", "debug",
                           "--metrics-port", str(port), "--poll-interval", "0.2") as r:
            wait_for(lambda: settled(conn, 2), timeout=20, what="both mails sent")
            outputs["metrics"] = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            assert r.stop() == 0, r.log()
            outputs["runner log (success, json)"] = r.log()
        assert sink.stats()["received"] == 2 and sink.stats()["auth_failures"] == 0
    assert "mailroom_mails_total" in outputs["metrics"]

    # 2. Failures: wrong password (and a relay that echoes it), relay down, TLS that cannot be
    #    verified. Text and JSON logs.
    enqueue(conn, "again@example.com", subject="s", body_text="b", delivery_key="sec-again")
    for fmt, sink_class in (("text", Sink), ("json", EchoingSink)):
        with sink_class(keep=True, starttls_context=ctx, require_starttls=True, auth=(USER, "other")) as sink:
            conn.execute("UPDATE mailroom.queue SET run_at = now() WHERE status = 'queued'")
            with RunnerProcess(db_url, _url(sink.port, cafile), "--exit-when-idle", "--log-format", fmt,
                               "--log-level", "debug") as r:
                assert r.wait() == 0, r.log()
                outputs[f"runner log (wrong password, {fmt})"] = r.log()
            assert sink.stats()["auth_failures"] >= 1 and sink.stats()["received"] == 0
            if fmt == "text":
                # No cafile: the self-signed certificate fails verification during STARTTLS.
                conn.execute("UPDATE mailroom.queue SET run_at = now() WHERE status = 'queued'")
                with RunnerProcess(db_url, _url(sink.port, None), "--exit-when-idle", "--log-level", "debug") as r:
                    assert r.wait() == 0, r.log()
                    outputs["runner log (TLS failure)"] = r.log()
    conn.execute("UPDATE mailroom.queue SET run_at = now() WHERE status = 'queued'")
    with RunnerProcess(db_url, _url(free_port(), cafile), "--exit-when-idle", "--log-level", "debug",
                       "--log-format", "json") as r:
        assert r.wait() == 0, r.log()
        outputs["runner log (relay down)"] = r.log()
    # A URL the runner refuses (exit 2) and a database it cannot reach (exit 3).
    outputs["bad URL"] = _cli("run", "--dsn", db_url, "--smtp", _url(25, cafile) + "&bogus=1")
    outputs["bad URL (smtps + starttls)"] = _cli("run", "--dsn", db_url,
                                                 "--smtp", _url(25, cafile).replace("smtp://", "smtps://"))
    outputs["database down"] = _cli("run", "--dsn", f"postgresql://nobody:{IN_URL}@127.0.0.1:{free_port()}/x",
                                    "--smtp", _url(25, cafile), "--log-level", "debug")
    assert "exit 2" in outputs["bad URL"] and "exit 3" in outputs["database down"]

    last = conn.execute("SELECT last_error FROM mailroom.messages WHERE delivery_key = 'sec-again'").fetchone()
    assert last["last_error"], "the failures were recorded"
    for fmt in ([], ["--json"]):
        outputs[f"mailroom status {fmt}"] = _cli("status", "--dsn", db_url, *fmt)
        for ref in [str(ids[0]), "sec-again"]:
            outputs[f"mailroom inspect {ref} {fmt}"] = _cli("inspect", "--dsn", db_url, ref, *fmt)
    outputs["every mailroom table"] = _database_dump(conn)

    # The failures really happened and were logged (so the search below means something).
    assert "535" in outputs["runner log (wrong password, text)"]
    assert "Rejected: " in outputs["runner log (wrong password, json)"]
    assert "certificate verify failed" in outputs["runner log (TLS failure)"].lower()
    assert "ConnectionRefusedError" in outputs["runner log (relay down)"]
    assert "smtp://mailer:***@localhost" in outputs["runner log (success, json)"]
    for where, text in outputs.items():
        assert_no_secret(where, text)


def test_reply_texts_are_redacted_before_the_ledger():
    """What mark_outcomes stores (messages.last_error, attempts.smtp_text) passes the redaction too."""
    from mailroom.send.transport import Outcome, parse_url

    parse_url(_url(25, None))
    echoed = " ".join(FORMS.values())
    stored = Outcome("retry", 535, "5.7.8", f"connect: 535 5.7.8 {echoed}").as_json()["detail"]
    assert stored.startswith("connect: 535 5.7.8 ***")
    assert_no_secret("the stored detail", stored)
