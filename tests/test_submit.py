"""`mailroom submit` (issue 30 item 4) against the real thing: a `mailroom
submit serve` process on loopback over a database with the deployed schema,
Python's smtplib (and Django's SMTP mail backend) as the clients, TLS from a
self-signed certificate, logins made with `mailroom submit set-credential`,
and a real runner that delivers what was submitted to a sink."""

from __future__ import annotations

import base64
import os
import smtplib
import ssl
import subprocess
import sys
import tempfile
import threading
from email import policy
from email.message import EmailMessage
from email.utils import make_msgid

import pytest
from psycopg import sql

from mailroom import exitcodes
from mailroom.dev.sink import Sink
from mailroom.net import free_port
from tests.runnerkit import RunnerProcess, parse, self_signed_cert, wait_for

from .conftest import connect

# Roles are cluster-wide: not mailroom_*, which tests/pgtap/roles.sql keeps NOLOGIN.
SERVER_ROLE = "t_submit_server"  # what production runs `submit serve` as: mailroom_app + mailroom_submission
OPERATOR_ROLE = "t_submit_operator"
APP_ONLY_ROLE = "t_submit_app_only"
PASSWORD = "correct horse battery staple 7"
SLOW_PASSWORD = "slow and steady 42"
MAX_SIZE = 64 * 1024


def _role_url(url: str, role: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[1]}"


def mailroom(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mailroom.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture(scope="module")
def db(module_db_url: str):
    with connect(module_db_url) as c:
        yield c


@pytest.fixture(scope="module")
def roles(db):
    grants = {SERVER_ROLE: ("mailroom_app", "mailroom_submission"), OPERATOR_ROLE: ("mailroom_operator",),
              APP_ONLY_ROLE: ("mailroom_app",)}
    for role, groups in grants.items():
        db.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
            sql.Identifier(role), sql.SQL(", ").join(map(sql.Identifier, groups))))
    yield
    for role in grants:
        db.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture(scope="module")
def operator_url(module_db_url, roles) -> str:
    return _role_url(module_db_url, OPERATOR_ROLE)


@pytest.fixture(scope="module")
def logins(operator_url):
    """Two logins made as an operator would: `shop` may send as anyone at
    @shop.example and as billing@other.example, 1000 a minute; `slow` one a
    minute (the rate-limit cases)."""
    done = mailroom("submit", "set-credential", "shop", "--dsn", operator_url, "--from", "@Shop.Example",
                    "--from", "billing@other.example", "--per-minute", "1000", "--password-stdin",
                    stdin=PASSWORD + "\n")
    assert done.returncode == 0, done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    done = mailroom("submit", "set-credential", "slow", "--dsn", operator_url, "--from", "@shop.example",
                    "--per-minute", "1", "--password-stdin", stdin=SLOW_PASSWORD + "\n")
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    directory = tmp_path_factory.mktemp("submit-tls")
    _, cafile = self_signed_cert(directory)
    return {"cert": str(directory / "cert.pem"), "key": str(directory / "key.pem"), "cafile": cafile}


class Server:
    """`mailroom submit serve` as a process, its log (at DEBUG) in a file."""

    def __init__(self, dsn: str, tls: dict, *args: str):
        self.starttls_port, self.tls_port = free_port("127.0.0.1"), free_port("127.0.0.1")
        self.log_file = tempfile.NamedTemporaryFile("w+", prefix="submit-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mailroom.cli", "submit", "serve", "--dsn", dsn, "--cert", tls["cert"],
             "--key", tls["key"], "--starttls-port", str(self.starttls_port), "--tls-port", str(self.tls_port),
             "--max-size", str(MAX_SIZE), "--log-level", "debug", *args],
            stdout=self.log_file, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def log(self) -> str:
        with open(self.log_file.name) as f:
            return f.read()

    def wait_listening(self) -> None:
        wait_for(lambda: "mailroom submit: STARTTLS on" in self.log() or self.proc.poll() is not None,
                 timeout=60, what="the submit server listening")
        assert self.proc.poll() is None, self.log()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture(scope="module")
def server(module_db_url, roles, logins, tls):
    s = Server(_role_url(module_db_url, SERVER_ROLE), tls)
    s.wait_listening()
    yield s
    assert s.stop() == 0, s.log()
    os.unlink(s.log_file.name)


def client_context(tls) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=tls["cafile"])


def connect_smtp(server, tls, *, implicit: bool = False, user: str | None = "shop", password: str = PASSWORD,
                 mechanism: str = "PLAIN") -> smtplib.SMTP:
    """A client over STARTTLS (or implicit TLS), logged in with `mechanism` unless user is None."""
    if implicit:
        c = smtplib.SMTP_SSL("127.0.0.1", server.tls_port, context=client_context(tls), timeout=30)
    else:
        c = smtplib.SMTP("127.0.0.1", server.starttls_port, timeout=30)
        c.starttls(context=client_context(tls))
    c.ehlo()
    if user is not None:
        c.user, c.password = user, password
        code, text = c.auth(mechanism, getattr(c, "auth_" + mechanism.lower()))
        assert code == 235, (code, text)
    return c


def mail(subject: str, *, sender: str = "Shop <orders@shop.example>", to: str = "ann@example.com",
         body: str = "Your order has shipped.\n", message_id: str | None = None) -> EmailMessage:
    m = EmailMessage()
    m["From"] = sender
    m["To"] = to
    m["Subject"] = subject
    m["Message-ID"] = message_id or make_msgid(domain="shop.example")
    m.set_content(body)
    return m


def rows(db, subject: str) -> list[dict]:
    """The contents rows of the mails with this subject, with their queue row and writing transaction."""
    return db.execute("""
        SELECT c.id, c.to_address, c.sender, c.stream, c.subject, c.body_text, c.headers, c.delivery_key,
               c.xmin::text AS xact, q.id IS NOT NULL AS queued
        FROM mailroom.contents c LEFT JOIN mailroom.queue q ON q.id = c.id
        WHERE c.subject = %s ORDER BY c.to_address""", (subject,)).fetchall()


@pytest.mark.parametrize("implicit, mechanism", [(False, "PLAIN"), (False, "LOGIN"), (True, "PLAIN"), (True, "LOGIN")],
                         ids=["starttls-plain", "starttls-login", "implicit-plain", "implicit-login"])
def test_a_mail_is_queued_in_one_transaction_before_250(db, server, tls, implicit, mechanism):
    subject = f"Order shipped ({'implicit' if implicit else 'starttls'} {mechanism})"
    with connect_smtp(server, tls, implicit=implicit, mechanism=mechanism) as c:
        m = mail(subject)
        refused = c.send_message(m, from_addr="orders@shop.example", to_addrs=["ann@example.com", "bob@example.org"])
        assert refused == {}
        # The 250 has been read: the rows are committed, both by one transaction.
        got = rows(db, subject)
    assert [r["to_address"] for r in got] == ["ann@example.com", "bob@example.org"]
    assert all(r["queued"] and r["sender"] == "default" and r["stream"] == "transactional" for r in got)
    assert len({r["xact"] for r in got}) == 1, "both recipients written by one transaction"
    assert got[0]["body_text"].strip() == "Your order has shipped."
    assert got[0]["headers"]["From"] == "Shop <orders@shop.example>"
    assert "Message-ID" not in got[0]["headers"] and "To" not in got[0]["headers"]  # the runner writes its own


def test_the_submission_port_wants_tls_before_auth_and_auth_before_mail(server, tls):
    with smtplib.SMTP("127.0.0.1", server.starttls_port, timeout=30) as c:
        c.ehlo()
        assert c.has_extn("starttls") and not c.has_extn("auth"), "AUTH is not offered in the clear"
        code, text = c.docmd("AUTH", "PLAIN " + base64.b64encode(f"\0shop\0{PASSWORD}".encode()).decode())
        assert (code, text) == (530, b"Must issue a STARTTLS command first")
        code, _ = c.docmd("MAIL", "FROM:<orders@shop.example>")
        assert code == 530
    with connect_smtp(server, tls, user=None) as c:
        assert c.has_extn("auth") and {"PLAIN", "LOGIN"} <= set(c.esmtp_features["auth"].split())
        code, text = c.mail("orders@shop.example")
        assert code == 530 and b"Authentication required" in text


@pytest.mark.parametrize("user, password", [("shop", "wrong password"), ("nobody", PASSWORD), ("slow", PASSWORD)])
def test_a_wrong_password_or_login_gets_535(server, tls, user, password):
    with pytest.raises(smtplib.SMTPAuthenticationError) as refused:
        connect_smtp(server, tls, user=user, password=password)
    assert refused.value.smtp_code == 535


def test_a_login_waiting_on_the_database_holds_up_no_other_connection(module_db_url, server, tls):
    """The login is checked off the event loop: while one client's AUTH waits
    for the database (the credentials table locked), another client of the
    same listener is greeted, starts TLS and is answered."""
    with connect(module_db_url) as locker, connect(module_db_url) as watcher:
        locker.execute("BEGIN")
        locker.execute("LOCK TABLE mailroom.submission_credentials IN ACCESS EXCLUSIVE MODE")
        waiting: list = []
        first = threading.Thread(target=lambda: waiting.append(connect_smtp(server, tls)), daemon=True)
        first.start()
        # another session: pg_stat_activity is read once per transaction
        wait_for(lambda: watcher.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'mailroom submit'"
            " AND wait_event_type = 'Lock' AND query LIKE '%%submission_login%%'").fetchone()["n"] == 1,
            timeout=30, what="the first login waiting for the lock")
        with smtplib.SMTP("127.0.0.1", server.starttls_port, timeout=20) as other:
            other.starttls(context=client_context(tls))
            assert other.ehlo()[0] == 250 and other.has_extn("auth")
        assert waiting == [] and first.is_alive()
        locker.execute("ROLLBACK")
    first.join(30)
    assert len(waiting) == 1, "the first login went through once the lock was gone"
    waiting[0].quit()


def test_a_sender_the_login_may_not_use_is_refused_and_nothing_is_queued(db, server, tls):
    with connect_smtp(server, tls) as c:
        code, text = c.mail("ceo@elsewhere.example")
        assert code == 550 and b"<ceo@elsewhere.example> is not an address login shop may send as" in text, text
        c.rset()
        # The envelope is fine, the From header is not: refused at DATA.
        subject = "Spoofed From"
        with pytest.raises(smtplib.SMTPDataError) as refused:
            c.send_message(mail(subject, sender="CEO <ceo@elsewhere.example>"), from_addr="orders@shop.example")
        assert refused.value.smtp_code == 550
        assert b"From header <ceo@elsewhere.example> is not an address login shop may send as" in refused.value.smtp_error
        with pytest.raises(smtplib.SMTPDataError) as refused:
            _send_with_sender(c, subject + " (Sender)")
        assert refused.value.smtp_code == 550 and b"Sender header" in refused.value.smtp_error
        # Allowed: an address of the login's domain (in any case) and its one listed address.
        assert c.send_message(mail("Allowed identities", sender="Orders@SHOP.example"),
                              from_addr="orders@shop.example") == {}
        assert c.send_message(mail("Allowed identities 2", sender="billing@other.example"),
                              from_addr="billing@other.example") == {}
    assert rows(db, subject) == [] and rows(db, subject + " (Sender)") == []
    assert len(rows(db, "Allowed identities")) == 1 and len(rows(db, "Allowed identities 2")) == 1


def _send_with_sender(c, subject):
    m = mail(subject)
    m["Sender"] = "someone@elsewhere.example"
    c.send_message(m, from_addr="orders@shop.example")


def test_recipients_are_refused_one_by_one_at_rcpt_and_the_others_are_queued(db, server, tls):
    """The semantics: a recipient that cannot be mailed (suppressed for the
    login's stream, forgotten, or an address enqueue refuses) is refused at
    RCPT TO with its reason; the mail goes to the others, in one transaction."""
    db.execute("SELECT mailroom.suppress('complained@example.com', 'complaint', 'test', 'transactional')")
    db.execute("SELECT * FROM mailroom.forget('Erased@Example.com')")
    subject = "Four recipients, one suppressed, one forgotten, one bad"
    with connect_smtp(server, tls) as c:
        refused = c.send_message(mail(subject), from_addr="orders@shop.example",
                                 to_addrs=["ann@example.com", "complained@example.com", "erased@example.com",
                                           "bad@-example.com"])
    assert refused["erased@example.com"][0] == 550 and b"is suppressed" in refused["erased@example.com"][1]
    assert refused["complained@example.com"][0] == 550
    assert b"<complained@example.com> is suppressed for stream transactional" in refused["complained@example.com"][1]
    assert refused["bad@-example.com"][0] == 553 and b"mailroom: to:" in refused["bad@-example.com"][1]
    assert [r["to_address"] for r in rows(db, subject)] == ["ann@example.com"]


def test_the_mail_is_all_or_nothing_the_rate_limit_refuses_it_whole_with_451(db, server, tls):
    """`slow` may send one mail a minute; a mail to two recipients needs two:
    451 4.7.0 (a client retries later), and neither recipient is queued nor is
    the limit's counter spent (the hits were in the transaction rolled back)."""
    subject = "Two recipients over the rate"
    with connect_smtp(server, tls, user="slow", password=SLOW_PASSWORD) as c:
        with pytest.raises(smtplib.SMTPDataError) as refused:
            c.send_message(mail(subject), from_addr="orders@shop.example",
                           to_addrs=["ann@example.com", "bob@example.org"])
    assert refused.value.smtp_code == 451
    assert b"4.7.0 login slow: rate limit of 1 mails a minute reached, try again in" in refused.value.smtp_error
    assert rows(db, subject) == []
    assert db.execute("SELECT count(*) AS n FROM mailroom.rate_limits WHERE key = 'submit:slow'").fetchone()["n"] == 0


def test_a_failure_on_the_second_recipient_leaves_nothing_of_the_first(db, server, tls):
    """A fault injected in the database (a trigger of this test's database
    refuses one recipient's row, after the first recipient's rows were
    written in the same transaction): 451, nothing of the mail remains, and
    the client's retry once the fault is gone queues both, once."""
    subject = "Second recipient fails"
    db.execute("""CREATE FUNCTION public.t_submit_fault() RETURNS trigger LANGUAGE plpgsql AS $$
                  BEGIN IF NEW.to_address = 'boom@example.com' THEN RAISE EXCEPTION 'injected fault'; END IF;
                  RETURN NEW; END $$""")
    db.execute("CREATE TRIGGER t_submit_fault BEFORE INSERT ON mailroom.contents"
               " FOR EACH ROW EXECUTE FUNCTION public.t_submit_fault()")
    m = mail(subject)
    try:
        with connect_smtp(server, tls) as c:
            with pytest.raises(smtplib.SMTPDataError) as refused:
                c.send_message(m, from_addr="orders@shop.example", to_addrs=["ann@example.com", "boom@example.com"])
        assert refused.value.smtp_code == 451 and b"4.3.0" in refused.value.smtp_error
        assert rows(db, subject) == []
    finally:
        db.execute("DROP TRIGGER t_submit_fault ON mailroom.contents")
        db.execute("DROP FUNCTION public.t_submit_fault()")
    with connect_smtp(server, tls) as c:
        assert c.send_message(m, from_addr="orders@shop.example", to_addrs=["ann@example.com", "boom@example.com"]) == {}
    got = rows(db, subject)
    assert [r["to_address"] for r in got] == ["ann@example.com", "boom@example.com"]
    assert len({r["xact"] for r in got}) == 1


def test_the_same_message_id_twice_is_queued_once_and_answered_250_both_times(db, server, tls):
    subject = "Submitted twice"
    m = mail(subject, message_id="<order-77@shop.example>")
    answers = []
    for implicit in (False, True):  # a retry after a lost 250 may come on another connection
        with connect_smtp(server, tls, implicit=implicit) as c:
            c.mail("orders@shop.example")
            c.rcpt("ann@example.com")
            answers.append(c.data(m.as_bytes(policy=policy.SMTP)))
    assert [code for code, _ in answers] == [250, 250]
    assert answers[0][1] == answers[1][1], "the same queue id both times"
    got = rows(db, subject)
    assert len(got) == 1 and got[0]["delivery_key"].startswith("submit:")
    assert f"queued as {got[0]['id']}".encode() in answers[0][1]


def test_size_is_advertised_and_a_larger_mail_gets_552(db, server, tls):
    subject = "Too large"
    big = mail(subject, body=("y" * 76 + "\n") * 1000)  # 77 kB > MAX_SIZE
    with connect_smtp(server, tls) as c:
        assert int(c.esmtp_features["size"]) == MAX_SIZE
        with pytest.raises(smtplib.SMTPSenderRefused) as refused:  # smtplib sends SIZE=: refused at MAIL
            c.send_message(big, from_addr="orders@shop.example")
        assert refused.value.smtp_code == 552
        c.rset()
        c.mail("orders@shop.example")  # no SIZE= given: refused at the end of DATA
        c.rcpt("ann@example.com")
        code, text = c.data(big.as_bytes(policy=policy.SMTP))
        assert code == 552, text
        # and the connection goes on
        assert c.send_message(mail("After the large one"), from_addr="orders@shop.example") == {}
    assert rows(db, subject) == []


@pytest.mark.parametrize("raw, code, reason", [
    (b"To: ann@example.com\r\nSubject: No From\r\nMessage-ID: <nofrom@shop.example>\r\n\r\nbody\r\n",
     550, b"the mail has no From header"),
    (b"From: orders@shop.example\r\nSubject: Broken\r\nthis line is no header\r\nX-After: 1\r\n\r\nbody\r\n",
     554, b"malformed header section"),
    (b"From: orders@shop.example\r\nFrom: billing@other.example\r\nSubject: Twice\r\n\r\nbody\r\n",
     550, b"header From appears more than once"),
    (b"From: orders@shop.example\r\nSubject: Attachment\r\nMIME-Version: 1.0\r\n"
     b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n"
     b"--b\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment\r\n\r\nJVBER\r\n--b--\r\n",
     554, b"multipart/mixed is not supported"),
    (b"From: =?utf-8?q?broken?= <\r\nSubject: Bad From\r\n\r\nbody\r\n", 550, b"From"),
], ids=["no-from", "malformed-headers", "from-twice", "attachment", "bad-from"])
def test_bad_input_gets_a_clear_answer_and_the_server_keeps_serving(db, server, tls, raw, code, reason):
    before = db.execute("SELECT count(*) AS n FROM mailroom.contents").fetchone()["n"]
    with connect_smtp(server, tls) as c:
        c.mail("orders@shop.example")
        c.rcpt("ann@example.com")
        got_code, text = c.data(raw)
        assert (got_code, reason in text) == (code, True), text
        assert c.send_message(mail(f"After bad input {code} {reason[:10]!r}"), from_addr="orders@shop.example") == {}
    assert db.execute("SELECT count(*) AS n FROM mailroom.contents").fetchone()["n"] == before + 1
    assert server.proc.poll() is None


def test_credentials_commands_and_no_password_in_the_database_or_the_log(db, server, tls, operator_url):
    listed = mailroom("submit", "credentials", "--dsn", operator_url)
    assert listed.returncode == 0, listed.stderr
    assert "shop\tsender=default\tstream=transactional\t1000/min\tfrom=@shop.example,billing@other.example" \
        in listed.stdout
    assert "scrypt$" not in listed.stdout
    stored = db.execute("SELECT username, password_hash FROM mailroom.submission_credentials ORDER BY 1").fetchall()
    assert [r["username"] for r in stored] == ["shop", "slow"]
    assert all(r["password_hash"].startswith("scrypt$") for r in stored)
    dump = str(db.execute("SELECT * FROM mailroom.submission_credentials").fetchall())
    assert PASSWORD not in dump and SLOW_PASSWORD not in dump

    # a third login, replaced, used, dropped: its next login gets 535
    for per_minute in ("5", "7"):
        done = mailroom("submit", "set-credential", "temp", "--dsn", operator_url, "--from", "temp@shop.example",
                        "--per-minute", per_minute, "--password-stdin", stdin="temporary pass 1\n")
        assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("replaced login temp: sender default, stream transactional, 7/min")
    connect_smtp(server, tls, user="temp", password="temporary pass 1").quit()
    assert mailroom("submit", "drop-credential", "temp", "--dsn", operator_url).returncode == 0
    again = mailroom("submit", "drop-credential", "temp", "--dsn", operator_url)
    assert (again.returncode, again.stdout.strip()) == (exitcodes.CRASH, "no such login temp")
    with pytest.raises(smtplib.SMTPAuthenticationError):
        connect_smtp(server, tls, user="temp", password="temporary pass 1")

    bad = mailroom("submit", "set-credential", "x y", "--dsn", operator_url, "--from", "@shop.example",
                   "--password-stdin", stdin="whatever pass 9\n")
    assert bad.returncode == exitcodes.USAGE and 'username: "x y" is not a user name' in bad.stderr
    app_only = mailroom("submit", "credentials", "--dsn", _role_url(operator_url, APP_ONLY_ROLE))
    assert app_only.returncode == exitcodes.REFUSED, app_only.stderr

    log = server.log()
    assert "submit.login_refused" in log  # the log is written, at DEBUG
    for secret in (PASSWORD, SLOW_PASSWORD, "temporary pass 1"):
        assert secret not in log
        assert base64.b64encode(secret.encode()).decode() not in log
        assert base64.b64encode(f"\0shop\0{secret}".encode()).decode() not in log


def test_a_database_that_goes_away_gets_temporary_answers_and_nothing_half_written(db, server, tls, server_url):
    """The server's database stops taking connections and its sessions end:
    AUTH gets 454, a mail whose recipients were accepted gets 451 at DATA
    (the client keeps it), RCPT gets 451; once the database is back the
    client's retry is queued, once."""
    subject = "Database away"
    m = mail(subject)
    name = db.execute("SELECT current_database() AS d").fetchone()["d"]
    during = connect_smtp(server, tls)
    assert during.mail("orders@shop.example")[0] == 250
    assert during.rcpt("ann@example.com")[0] == 250
    admin = connect(server_url)  # another database: ALTER DATABASE is refused on the current one
    try:
        admin.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(sql.Identifier(name)))
        db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                   " WHERE datname = current_database() AND application_name = 'mailroom submit'")
        code, text = during.data(m.as_bytes(policy=policy.SMTP))
        assert (code, text[:5]) == (451, b"4.3.0"), (code, text)
        during.rset()
        assert during.mail("orders@shop.example")[0] == 250
        code, text = during.rcpt("ann@example.com")
        assert code == 451, (code, text)
        during.quit()
        with smtplib.SMTP("127.0.0.1", server.starttls_port, timeout=30) as fresh:
            fresh.starttls(context=client_context(tls))
            fresh.ehlo()
            fresh.user, fresh.password = "shop", PASSWORD
            with pytest.raises(smtplib.SMTPAuthenticationError) as refused:
                fresh.auth("PLAIN", fresh.auth_plain)
            assert refused.value.smtp_code == 454 and b"4.7.0" in refused.value.smtp_error
        assert rows(db, subject) == []
    finally:
        admin.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true").format(sql.Identifier(name)))
        admin.close()

    def retried():
        try:
            with connect_smtp(server, tls) as c:
                return c.send_message(m, from_addr="orders@shop.example", to_addrs=["ann@example.com"]) == {}
        except (smtplib.SMTPException, AssertionError):
            return False
    # The pool reconnects with a growing backoff: up to half a minute after an outage this long.
    wait_for(retried, timeout=180, interval=1, what="the retry queued once the database is back")
    assert retried()  # the same Message-ID again: answered 250, not queued twice
    got = rows(db, subject)
    assert [r["to_address"] for r in got] == ["ann@example.com"] and got[0]["queued"]
    assert "Traceback" not in server.log()

def test_a_role_without_mailroom_submission_cannot_serve(module_db_url, roles, tls):
    s = Server(_role_url(module_db_url, APP_ONLY_ROLE), tls)
    try:
        assert s.proc.wait(60) == exitcodes.REFUSED
        assert "cannot execute submission_login, submission_recipient_refusal" in s.log()
    finally:
        s.stop()
        os.unlink(s.log_file.name)


def test_django_send_mail_through_the_front_door(db, server, tls, monkeypatch):
    import django  # in the test extras of pyproject.toml
    from django.conf import settings

    if not settings.configured:
        settings.configure(EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend")
        django.setup()
    from django.core.mail import get_connection, send_mail

    # Django's backend trusts the system's CAs: this one is the test's own.
    monkeypatch.setenv("SSL_CERT_FILE", tls["cafile"])
    for use_tls, port in ((True, server.starttls_port), (False, server.tls_port)):
        connection = get_connection(host="127.0.0.1", port=port, username="shop", password=PASSWORD,
                                    use_tls=use_tls, use_ssl=not use_tls, timeout=30)
        sent = send_mail(f"Django {'STARTTLS' if use_tls else 'SSL'}", "Sent by django.core.mail.\n",
                         "Shop <orders@shop.example>", ["django@example.com"], connection=connection)
        assert sent == 1
    assert len(rows(db, "Django STARTTLS")) == 1 and len(rows(db, "Django SSL")) == 1
    assert rows(db, "Django SSL")[0]["body_text"].strip() == "Sent by django.core.mail."


def test_a_runner_delivers_the_submitted_mail_intact(module_db_url, db, server, tls):
    """Last: the runner sends everything the module queued; this mail is checked."""
    subject = "Delivered through the front door ✓"
    with connect_smtp(server, tls) as c:
        assert c.send_message(mail(subject, sender="Shop Orders <orders@shop.example>", to="Dee <dee@example.net>",
                                   body="Line one.\nLine two, ünïcode.\n"),
                              from_addr="orders@shop.example", to_addrs=["dee@example.net"]) == {}
    [row] = rows(db, subject)
    with Sink(keep=True) as sink, RunnerProcess(module_db_url, sink.url(), "--poll-interval", "0.2") as runner:
        wait_for(lambda: any(m["rcpt_tos"] == ["dee@example.net"] for m in sink.messages), timeout=60,
                 what="the submitted mail at the sink")
        runner.stop()
    [got] = [m for m in sink.messages if m["rcpt_tos"] == ["dee@example.net"]]
    delivered = parse(got["data"])
    assert delivered["Subject"] == subject
    assert delivered["From"] == "Shop Orders <orders@shop.example>"
    assert delivered["To"] == "dee@example.net"
    text = delivered.get_body(("plain",)).get_content()
    assert "Line one.\nLine two, ünïcode." in text.replace("\r\n", "\n")
    status = db.execute("SELECT finished_as FROM mailroom.attempts WHERE message_id = %s AND finished_as = 'sent'",
                        (row["id"],)).fetchall()
    assert len(status) == 1
