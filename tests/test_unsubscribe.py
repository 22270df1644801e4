"""One-click unsubscribe end to end (issue 15): a real `mailroom run`, an
aiosmtpd sink, the unsubscribe app served by a real WSGI server (werkzeug) on
loopback and logged in as a member of mailroom_unsubscribe only, dkimpy
verifying what arrived.

- A campaign mail arrives with List-Unsubscribe (https and mailto) and
  List-Unsubscribe-Post, both signed by DKIM; the signature verifies.
- GET of its URL shows a confirmation page and writes nothing; POSTing the
  RFC 8058 form to it suppresses that address for broadcast only
  (idempotently): its next campaign mail, queued before the unsubscribe, is
  cancelled by claim_batch's gate, while a transactional mail to it goes out.
- Tampered, truncated or wrong-key tokens get 400 and write nothing; a token
  signed before a key rotation still works; hostile input writes nothing;
  unknown and already unsubscribed addresses get the answer a known one gets.
"""

from __future__ import annotations

import base64
import email
import http.client
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import dkim
import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from mailroom.signing import Keyring, new_key_line
from mailroom.dev.sink import Sink
from mailroom.send.unsubscribe import make_token, read_token, TokenError
from mailroom.web.unsubscribe_app import create_app, make_dev_server
from tests.conftest import connect
from tests.operatorkit import as_user
from tests.runnerkit import RunnerProcess, enqueue, statuses, wait_for

DOMAIN = "mail.tests.mailroom.invalid"
MAILTO_DOMAIN = "unsub.tests.mailroom.invalid"


@pytest.fixture
def unsubscribe_login(conn):
    """A LOGIN role that is a member of mailroom_unsubscribe only."""
    name = f"t_unsub_{uuid.uuid4().hex[:8]}"
    conn.execute(f'CREATE ROLE "{name}" LOGIN IN ROLE mailroom_unsubscribe')
    yield name
    conn.execute(f'DROP ROLE IF EXISTS "{name}"')


@pytest.fixture
def keys_file(tmp_path) -> Path:
    path = tmp_path / "signing-keys"
    path.write_text("# current key first\n" + new_key_line("k2026") + "\n" + new_key_line("k2025") + "\n")
    path.chmod(0o600)
    return path


class Served:
    """The app on a real WSGI server in a thread, on a free loopback port."""

    def __init__(self, app):
        self.server = make_dev_server(app, "127.0.0.1", 0)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def request(self, method: str, path: str, body: bytes | None = None,
                content_type: str = "application/x-www-form-urlencoded") -> tuple[int, str, dict]:
        """(status, page, headers); status 0 when the server cut the request
        off before it was sent whole (it answers an oversized request line
        with 414 and closes, and the client's unsent rest then meets a closed
        socket, so whether the 414 can still be read is a matter of timing)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.server.server_port, timeout=10)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": content_type} if body is not None else {})
            resp = conn.getresponse()
            return resp.status, resp.read().decode("utf-8", "replace"), dict(resp.getheaders())
        except (BrokenPipeError, ConnectionResetError):
            return 0, "", {}
        finally:
            conn.close()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        pool = self.server.app.extensions["mailroom_unsubscribe_pool"]
        pool.close()


@pytest.fixture
def served(db_url, unsubscribe_login, keys_file):
    app = create_app(as_user(db_url, unsubscribe_login), keys_file=str(keys_file))
    s = Served(app)
    yield s
    s.close()


def suppressions(conn) -> list[tuple]:
    return [tuple(r.values()) for r in conn.execute(
        "SELECT address, stream, reason, source FROM mailroom.suppressions ORDER BY address, stream")]


def header(data: bytes, name: str) -> list[str]:
    """Unfolded values of a header field."""
    head = data.split(b"\r\n\r\n", 1)[0].decode("utf-8")
    return [re.sub(r"\r\n[ \t]+", " ", line.split(":", 1)[1]).strip()
            for line in re.split(r"\r\n(?![ \t])", head) if line.lower().startswith(name.lower() + ":")]


ONE_CLICK = b"List-Unsubscribe=One-Click"


def test_one_click_unsubscribes_from_broadcast_only_at_claim_time(db_url, conn, served, keys_file, tmp_path):
    key = ed25519.Ed25519PrivateKey.generate()
    key_path = tmp_path / "ed.pem"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    records = {f"ed1._domainkey.{DOMAIN}": b"v=DKIM1; k=ed25519; p=" + base64.b64encode(raw)}

    conn.execute("SELECT mailroom.upsert_template('news', 'News', 'Hello. Leave: {{ unsubscribe_url }}')")
    conn.execute("CREATE TABLE public.readers AS SELECT 1 AS id, 'Reader@Example.ORG' AS email")
    conn.execute("GRANT SELECT ON public.readers TO mailroom_app")
    spring = conn.execute("SELECT mailroom.enqueue_campaign('spring', 'news', 'SELECT id AS recipient_id, email"
                          " FROM public.readers', p_sender => 'newsletter', p_send_at => now() - interval '1 s')"
                          " AS id").fetchone()["id"]
    # Queued before the unsubscribe, under another sender profile so that the
    # first run leaves it alone: what the gate must stop at claim time.
    summer = conn.execute("SELECT mailroom.enqueue_campaign('summer', 'news', 'SELECT id AS recipient_id, email"
                          " FROM public.readers', p_sender => 'digest', p_send_at => now() - interval '1 s')"
                          " AS id").fetchone()["id"]
    assert conn.execute("SELECT array_agg(DISTINCT stream) AS s FROM mailroom.contents").fetchone()["s"] == ["broadcast"]

    runner_args = ("--exit-when-idle", "--unsubscribe-url", served.base, "--unsubscribe-mailto", MAILTO_DOMAIN,
                   "--signing-keys", str(keys_file))
    env = {"MAILROOM_DKIM": f"newsletter={DOMAIN}:ed1:{key_path};digest={DOMAIN}:ed1:{key_path}"}
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), *runner_args, "--sender", "newsletter",
                                                env=env) as r:
        assert r.wait() == 0, r.log()
        log = r.log()
    [mail] = list(sink.messages)
    data = mail["data"]

    assert header(data, "List-Unsubscribe-Post") == ["List-Unsubscribe=One-Click"]
    [value] = header(data, "List-Unsubscribe")
    m = re.fullmatch(r"<(http://127\.0\.0\.1:\d+/u/([A-Za-z0-9_.-]+))>, <mailto:unsubscribe\+([A-Za-z0-9_.-]+)@"
                     + re.escape(MAILTO_DOMAIN) + ">", value.replace(" ", "").replace(",<", ", <"))
    assert m, value
    url, token, mailto_token = m.groups()
    assert mailto_token == token
    assert url.encode() in data.split(b"\r\n\r\n", 1)[1], "{{ unsubscribe_url }} is the same URL"
    assert read_token(Keyring.load(str(keys_file)), token).stream == "broadcast"
    assert token not in log, "the token (it carries the address) is not logged"
    assert "unsubscribe.not_configured" not in log, "a runner with --unsubscribe-url does not warn"

    # DKIM covers both unsubscribe fields, and the mail verifies.
    dkim_sig = re.sub(r"\s+", "", header(data, "DKIM-Signature")[0])
    signed = dict(t.split("=", 1) for t in dkim_sig.split(";") if t)["h"].lower().split(":")
    assert {"list-unsubscribe", "list-unsubscribe-post"} <= set(signed)
    assert dkim.verify(data, dnsfunc=lambda name, timeout=5: records.get(name.decode().rstrip(".")))

    path = urllib.parse.urlsplit(url).path
    status, page, headers = served.request("GET", path)
    assert status == 200 and '<form method="post"' in page and 'name="List-Unsubscribe"' in page
    assert headers["Referrer-Policy"] == "no-referrer" and "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert suppressions(conn) == [], "GET never unsubscribes"

    status, page, _ = served.request("POST", path, ONE_CLICK)
    assert status == 200, page
    again = served.request("POST", path, ONE_CLICK)
    assert again[:2] == (200, page), "a repeat gets the same answer"
    assert suppressions(conn) == [("Reader@Example.ORG", "broadcast", "unsubscribed",
                                   f"one-click message {mail_id(conn, spring)}")]

    # The same address: transactional mail still goes, the queued campaign mail is stopped at claim.
    enqueue(conn, "Reader@example.org", subject="Password reset", body_text="Your code.\n", sender="digest")
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), *runner_args, "--sender", "digest",
                                                env=env) as r:
        assert r.wait() == 0, r.log()
    got = list(sink.messages)
    assert [header(m["data"], "Subject") for m in got] == [["Password reset"]]
    assert not header(got[0]["data"], "List-Unsubscribe"), "transactional mail carries no unsubscribe header"
    assert conn.execute(
        "SELECT f.finished_as, f.status_reason, f.attempt FROM mailroom.contents c"
        " JOIN mailroom.attempts f ON f.message_id = c.id AND f.finished_as IS NOT NULL"
        " WHERE c.campaign_id = %s", (summer,)).fetchone() == \
        {"finished_as": "cancelled", "status_reason": "suppressed", "attempt": 0}
    assert statuses(conn) == {"sent": 2, "cancelled": 1}


def mail_id(conn, campaign: int) -> int:
    return conn.execute("SELECT id FROM mailroom.contents WHERE campaign_id = %s", (campaign,)).fetchone()["id"]


def test_bad_tokens_and_hostile_input_write_nothing(conn, served, keys_file):
    ring = Keyring.load(str(keys_file))
    good = make_token(ring, "ann@example.org", "broadcast", 42)
    kid, payload, mac = good.split(".")
    other_secret = Keyring.parse(new_key_line(kid))  # the same key id, another secret
    forged_payload = base64.urlsafe_b64encode(b"1\n42\nbroadcast\neve@example.org").rstrip(b"=").decode()
    flipped = mac[:10] + ("A" if mac[10] != "A" else "B") + mac[11:]
    bad = {
        "tampered payload": f"{kid}.{forged_payload}.{mac}",
        "tampered mac": f"{kid}.{payload}.{flipped}",
        "truncated": good[:-5],
        "no mac": f"{kid}.{payload}",
        "wrong key": make_token(other_secret, "ann@example.org", "broadcast", 42),
        "unknown key id": "zz9." + good.split(".", 1)[1],
        "huge": good + "A" * 100_000,
        "bad percent-encoding": good[:20] + "%ff%fe" + good[20:],
        "non-ASCII": good[:20] + "%C3%A9" + good[20:],
        "empty": "",
    }
    for name, token in bad.items():
        for body in (ONE_CLICK, None):
            status, page, _ = served.request("POST" if body else "GET", "/u/" + token, body)
            if name == "huge" and status == 0:
                continue  # cut off before it was sent whole: refused all the same
            assert status in (400, 404, 405, 414, 431), (name, status)
            if token:
                assert status in (400, 414, 431), (name, status, page[:200])
    hostile_bodies = {
        "missing field": (b"", "application/x-www-form-urlencoded"),
        "other value": (b"List-Unsubscribe=Yes", "application/x-www-form-urlencoded"),
        "bad encoding": (b"List-Unsubscribe=One-Click%ff\xff\xfe", "application/x-www-form-urlencoded"),
        "json": (b'{"List-Unsubscribe": "One-Click"}', "application/json"),
        "huge body": (ONE_CLICK + b"&x=" + b"A" * 100_000, "application/x-www-form-urlencoded"),
        "broken multipart": (b"--x\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne",
                             "multipart/form-data; boundary=x"),
    }
    for name, (body, ctype) in hostile_bodies.items():
        status, _, _ = served.request("POST", "/u/" + good, body, ctype)
        assert status in (400, 413) or (name == "huge body" and status == 0), (name, status)
    assert suppressions(conn) == [], "nothing was written"
    assert served.request("GET", "/u/" + good)[0] == 200
    assert suppressions(conn) == [], "GET never unsubscribes"
    with pytest.raises(TokenError):
        read_token(ring, bad["tampered payload"])


def test_rotation_and_the_same_answer_for_every_address(conn, served, keys_file):
    old_ring = Keyring.parse(keys_file.read_text().splitlines()[2])  # k2025 alone: before the rotation
    assert old_ring.current_id == "k2025"
    conn.execute("SELECT mailroom.suppress('known@example.org', 'unsubscribed', 'app', 'broadcast')")
    answers = set()
    for address in ("old@example.org", "never-mailed@example.org", "known@example.org"):
        status, page, _ = served.request("POST", "/u/" + make_token(old_ring, address, "broadcast", 7), ONE_CLICK)
        assert status == 200, (address, page)
        answers.add(page)
    assert len(answers) == 1, "unknown, known and already unsubscribed addresses read the same"
    assert suppressions(conn) == [
        ("known@example.org", "broadcast", "unsubscribed", "app"),
        ("never-mailed@example.org", "broadcast", "unsubscribed", "one-click message 7"),
        ("old@example.org", "broadcast", "unsubscribed", "one-click message 7"),
    ]


@pytest.mark.parametrize("keys", ["missing", "short secret"])
def test_a_bad_keyring_stops_the_runner_at_start(db_url, conn, tmp_path, keys):
    path = tmp_path / "signing-keys"
    if keys == "short secret":
        path.write_text("k1=" + base64.urlsafe_b64encode(b"too short").decode() + "\n")
    enqueue(conn, "held@example.org", subject="Held", body_text="Not yet.\n")
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle", "--unsubscribe-url",
                                                "https://u.example.org", "--signing-keys", str(path)) as r:
        assert r.wait() == 2, r.log()
        log = r.log()
    assert log.startswith(f"mailroom: signing keys file {path}"), log
    assert statuses(conn) == {"queued": 1}, "nothing was claimed"
    assert not sink.messages


def test_a_runner_without_an_unsubscribe_url_refuses_to_start_while_a_stream_wants_the_headers(db_url, conn):
    """Issue 30, item 6: broadcast mail (unsubscribe_headers = true by
    default) would leave without List-Unsubscribe. `mailroom run` without
    --unsubscribe-url and without the opt-out refuses to start (exit 2, a
    configuration error) and claims nothing. Failed before: the runner sent
    the campaign mail (exit 0) with a warning in its log."""
    enqueue(conn, "bulk@example.org", subject="News", body_text="Hi\n", stream="broadcast")
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle",
                                                without_unsubscribe=False) as bare:
        assert bare.wait() == 2, bare.log()
        log = bare.log()
    assert "stream broadcast wants unsubscribe headers and no --unsubscribe-url is given" in log, log
    assert "--no-unsubscribe-headers" in log
    assert statuses(conn) == {"queued": 1}, "nothing was claimed"
    assert not sink.messages


def test_no_unsubscribe_headers_sends_broadcast_mail_without_them_and_warns_once(db_url, conn):
    """The operator's explicit opt-out: the mail goes, without the headers,
    and the log says so once at start."""
    enqueue(conn, "bulk@example.org", subject="News", body_text="Hi\n", stream="broadcast")
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle", "--no-unsubscribe-headers",
                                                without_unsubscribe=False) as r:
        assert r.wait() == 0, r.log()
        log = r.log()
        (mail,) = [email.message_from_bytes(m["data"]) for m in sink.messages]
    assert mail["List-Unsubscribe"] is None and mail["Subject"] == "News"
    warned = [line for line in log.splitlines() if "unsubscribe.not_configured" in line]
    assert len(warned) == 1 and " WARNING " in warned[0] and "streams=broadcast" in warned[0], log
    assert "--unsubscribe-url" in warned[0]
    assert statuses(conn) == {"sent": 1}


def test_a_database_whose_streams_want_no_unsubscribe_headers_needs_no_url(db_url, conn):
    """A sender of transactional mail only (the broadcast stream redefined
    without headers) starts without the URL and without the opt-out."""
    conn.execute("SELECT mailroom.define_stream('broadcast', false, 'not bulk here')")
    enqueue(conn, "user@example.org", subject="Reset", body_text="Link\n")
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle",
                                                without_unsubscribe=False) as r:
        assert r.wait() == 0, r.log()
        assert "unsubscribe.not_configured" not in r.log()
        assert len(sink.messages) == 1
    assert statuses(conn) == {"sent": 1}


def test_the_unsubscribe_role_cannot_suppress_a_stream_without_unsubscribe_headers(db_url, conn, served, keys_file,
                                                                                    unsubscribe_login):
    """Issue 32, item 6: transactional mail (password resets) carries no
    unsubscribe link, so the unsubscribe service may not suppress for it,
    neither by calling the function as its role nor through a token signed
    with the service's own key (a stale or leaked one). Failed on v0.4.0: the
    suppression was written."""
    conn.execute("SELECT mailroom.define_stream('receipts', false, 'order receipts')")
    with psycopg.connect(as_user(db_url, unsubscribe_login), autocommit=True) as service:
        for stream in ("transactional", "receipts"):
            with pytest.raises(psycopg.Error) as refused:
                service.execute("SELECT mailroom.unsubscribe('ann@example.org', %s, 7)", (stream,))
            assert refused.value.sqlstate == "22023"
            assert "stream: " + stream in str(refused.value) and "no unsubscribe headers" in str(refused.value)
        service.execute("SELECT mailroom.unsubscribe('ann@example.org', 'broadcast', 7)")

    ring = Keyring.load(str(keys_file))
    status, _, _ = served.request("POST", "/u/" + make_token(ring, "bob@example.org", "transactional", 8), ONE_CLICK)
    assert status == 400, "a signed token for the transactional stream is an invalid link"
    assert suppressions(conn) == [("ann@example.org", "broadcast", "unsubscribed", "one-click message 7")]
