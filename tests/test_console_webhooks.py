"""The console's Webhooks page over real HTTP (`mailroom web` in a
subprocess, logged into the database as a mailroom_operator login): an
endpoint a real runner paused after failing against a closed port is shown
with its health and without its URL's token, and its Resume button works
only with the page's CSRF token."""

from __future__ import annotations

import html
import json
import http.client
import re
import urllib.parse
import uuid

import pytest

from mailroom.dev.sink import Sink
from mailroom.net import free_port
from mailroom.signing import new_key_line
from mailroom.web.console.auth import hash_password
from tests.operatorkit import as_user, run, start_web
from tests.runnerkit import RunnerProcess, enqueue_many, wait_for

USER, PASSWORD = "wendy", "webhooks are events too"
TOKEN = "s3cret-query-token"


class Browser:
    """One cookie, no redirects followed: what a browser sends."""

    def __init__(self, port: int):
        self.port, self.cookie = port, ""

    def send(self, method: str, path: str, form: dict | None = None) -> tuple[int, dict, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Cookie": self.cookie} if self.cookie else {}
        if form is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, urllib.parse.urlencode(form) if form is not None else None, headers)
        answer = conn.getresponse()
        body = answer.read().decode()
        conn.close()
        if answer.getheader("Set-Cookie"):
            self.cookie = answer.getheader("Set-Cookie").split(";", 1)[0]
        return answer.status, dict(answer.getheaders()), body

    def sign_in(self) -> None:
        _, _, page = self.send("GET", "/login")
        status, _, _ = self.send("POST", "/login", {"csrf_token": csrf(page), "username": USER, "password": PASSWORD})
        assert status == 302


def csrf(page: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def row_of(page: str, name: str) -> str:
    return re.search(rf'<tr data-endpoint="{re.escape(name)}">(.*?)</tr>', page, re.S).group(1)


def field(row: str, name: str) -> str:
    cell = re.search(rf'data-field="{name}"[^>]*>(.*?)</(?:td|span)>', row, re.S).group(1)
    return html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()


@pytest.fixture
def console(db_url, conn, tmp_path):
    role = f"t_console_{uuid.uuid4().hex[:8]}"
    conn.execute(f'CREATE ROLE "{role}" LOGIN IN ROLE mailroom_operator')
    users = tmp_path / "users"
    users.write_text(f"{USER}:{hash_password(PASSWORD)}\n")
    proc, port = start_web(as_user(db_url, role), users, "--port", "0")
    try:
        yield Browser(port)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()
        conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def endpoint(conn, name: str):
    return conn.execute("SELECT * FROM mailroom.webhook_status WHERE name = %s", (name,)).fetchone()


def test_a_paused_endpoint_is_shown_and_resumed_from_the_console(db_url, conn, tmp_path, console):
    secrets = tmp_path / "webhook-secrets"
    secrets.write_text(new_key_line("hooks") + "\n")
    closed = f"https://127.0.0.1:{free_port()}/hook?token={TOKEN}"
    conn.execute("SELECT mailroom.webhook_endpoint_set('dead', %s, 'hooks', ARRAY['sent'], p_max_failures => 1)",
                 (closed,))
    conn.execute("SELECT mailroom.webhook_endpoint_set('idle', 'https://hooks.example.com/in', 'hooks',"
                 " ARRAY['bounced'], ARRAY['broadcast'])")
    with Sink() as sink:
        enqueue_many(conn, "console-hook", 3)
        with RunnerProcess(db_url, f"smtp://127.0.0.1:{sink.port}", "--webhook-secrets", str(secrets),
                           "--poll-interval", "0.2") as runner:
            wait_for(lambda: endpoint(conn, "dead")["status"] == "paused", timeout=90, what="the endpoint paused")
            runner.stop()
    paused = endpoint(conn, "dead")

    status, _, page = console.send("GET", "/webhooks")
    assert status == 302  # signed out: to the login page
    console.sign_in()
    status, _, page = console.send("GET", "/webhooks")
    assert status == 200
    assert TOKEN not in page  # the query string, where tokens live, is not shown
    dead = row_of(page, "dead")
    assert f"https://127.0.0.1:{urllib.parse.urlsplit(closed).port}/hook?…" in html.unescape(dead)
    assert field(dead, "status").startswith("paused since")
    assert field(dead, "paused_reason") == paused["paused_reason"]
    assert paused["paused_reason"].startswith("1 failures in a row; the last:")
    assert field(dead, "failures") == "1 / 1"
    assert field(dead, "events_behind") == str(paused["events_behind"]) and paused["events_behind"] >= 3
    assert field(dead, "last_success").startswith("never")
    assert field(dead, "next_try") == "on resume"
    assert 'class="resume"' in dead
    idle = row_of(page, "idle")
    assert field(idle, "status") == "active" and "bounced" in idle and "broadcast" in idle
    assert 'class="pause"' in idle

    # Resume without the page's token: refused, nothing changed.
    for form in ({}, {"csrf_token": "forged"}):
        status, _, body = console.send("POST", "/webhooks/dead/resume", form)
        assert status == 400 and "CSRF" in body
    assert endpoint(conn, "dead")["status"] == "paused"

    status, headers, _ = console.send("POST", "/webhooks/dead/resume", {"csrf_token": csrf(page)})
    assert status == 302 and headers["Location"].endswith("/webhooks")
    resumed = endpoint(conn, "dead")
    assert resumed["status"] == "active" and resumed["failures"] == 0 and resumed["paused_reason"] is None
    assert resumed["cursor"] == paused["cursor"]  # from where it stopped
    _, _, page = console.send("GET", "/webhooks")
    assert "webhook endpoint dead: resumed" in page
    assert field(row_of(page, "dead"), "status") == "active"

    # An endpoint that is not there: the operator function's refusal, shown.
    status, _, _ = console.send("POST", "/webhooks/gone/pause", {"csrf_token": csrf(page)})
    _, _, page = console.send("GET", "/webhooks")
    assert status == 302 and 'no webhook endpoint "gone"' in html.unescape(page)


def test_an_endpoint_whose_key_no_runner_holds_is_flagged(db_url, conn, tmp_path, console):
    """Such an endpoint is never claimed, so nothing fails: webhook_status and
    the page say that no runner offers its key, and a key offered again
    clears the warning within a minute of the runner's polls."""
    secrets = tmp_path / "webhook-secrets"
    secrets.write_text(new_key_line("held") + "\n")
    conn.execute("SELECT mailroom.webhook_endpoint_set('served', 'https://hooks.example.com/a', 'held')")
    conn.execute("SELECT mailroom.webhook_endpoint_set('orphan', 'https://hooks.example.com/b', 'lost')")
    conn.execute("SELECT mailroom.webhook_endpoint_set('off', 'https://hooks.example.com/c', 'lost')")
    conn.execute("SELECT mailroom.webhook_endpoint_pause('off')")
    assert endpoint(conn, "served")["warning"] is not None  # no runner yet
    with Sink() as sink:
        with RunnerProcess(db_url, f"smtp://127.0.0.1:{sink.port}", "--webhook-secrets", str(secrets),
                           "--poll-interval", "0.2") as runner:
            wait_for(lambda: endpoint(conn, "served")["key_offered_at"], timeout=60, what="the runner offering its key")
            assert endpoint(conn, "served")["warning"] is None
            orphan = endpoint(conn, "orphan")
            assert orphan["key_offered_at"] is None
            assert orphan["warning"] == ("no runner has offered the key lost yet:"
                                         " start a runner with it in --webhook-secrets")
            assert endpoint(conn, "off")["warning"] is None  # paused: nothing waits for it

            console.sign_in()
            _, _, page = console.send("GET", "/webhooks")
            assert field(row_of(page, "orphan"), "warning") == orphan["warning"]
            assert 'data-field="warning"' not in row_of(page, "served")
            code, out, _ = run("status", "--dsn", db_url, "--json")
            assert code == 0
            flagged = [w for w in json.loads(out)["warnings"] if w["warning"].startswith("webhook_")]
            assert flagged == [{"warning": "webhook_paused", "count": flagged[0]["count"], "oldest_age": None,
                                "detail": "endpoint off: paused by an operator"},
                               {"warning": "webhook_key_not_offered", "count": flagged[1]["count"], "oldest_age": None,
                                "detail": f"endpoint orphan: {orphan['warning']}"}], flagged

            # A key last offered long ago is flagged, until a runner offers it again.
            conn.execute("UPDATE mailroom.webhook_keys_offered SET offered_at = now() - interval '10 minutes'"
                         " WHERE secret_name = 'held'")
            wait_for(lambda: endpoint(conn, "served")["warning"] is None, timeout=60,
                     what="the runner's next claim offering the key again")
            runner.stop()
    conn.execute("UPDATE mailroom.webhook_keys_offered SET offered_at = now() - interval '10 minutes'")
    assert endpoint(conn, "served")["warning"].startswith("no runner has offered the key held since ")
