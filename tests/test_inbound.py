"""`mailroom inbound` against a real database: the provider sample corpus
(tests/inbound_samples/, expected.json) parsed to the right outcome, and
hostile mail kept as unparsed while nothing else changes. Mail is sent to
the server over SMTP and LMTP; each case sends its own mail first (enqueue,
claim, report sent) so the reports name a real message by VERP."""

from __future__ import annotations

import json
import os
import smtplib
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from mailroom import exitcodes
from mailroom.inbound import bounces
from mailroom.inbound.server import Inbound, unsubscribe_verifier
from mailroom.send import unsubscribe, verp
from mailroom.send.render import message_id as runner_message_id
from mailroom.signing import Keyring

from .conftest import connect

SAMPLES = Path(__file__).parent / "inbound_samples"
EXPECTED = {k: v for k, v in json.loads((SAMPLES / "expected.json").read_text()).items() if not k.startswith("_")}
BOUNCE_DOMAIN = "bounces.shop.example"
MID_DOMAIN = "shop.example"
# Roles are cluster-wide: not mailroom_*, which tests/pgtap/roles.sql keeps NOLOGIN.
FEEDBACK_ROLE = "t_inbound_feedback"
NO_FEEDBACK_ROLE = "t_inbound_no_feedback"


def _role_url(url: str, role: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[1]}"


@pytest.fixture(scope="module")
def keyring() -> Keyring:
    return Keyring([("k2", os.urandom(32)), ("k1", os.urandom(32))])


@pytest.fixture(scope="module")
def verper(keyring) -> verp.Verp:
    return verp.Verp(keyring)


@pytest.fixture(scope="module")
def login_roles(module_db_url: str):
    """Login roles for the module, dropped after it (roles are cluster-wide):
    one granted mailroom_feedback only, what production runs inbound as, and
    one granted nothing."""
    with connect(module_db_url) as c:
        for role, group in ((FEEDBACK_ROLE, "mailroom_feedback"), (NO_FEEDBACK_ROLE, None)):
            c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
            c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role))
                      + (sql.SQL(" IN ROLE {}").format(sql.Identifier(group)) if group else sql.SQL("")))
    yield
    with connect(module_db_url) as c:
        for role in (FEEDBACK_ROLE, NO_FEEDBACK_ROLE):
            c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture(scope="module")
def feedback_url(module_db_url: str, login_roles) -> str:
    return _role_url(module_db_url, FEEDBACK_ROLE)


@pytest.fixture(scope="module")
def db(module_db_url: str):
    with connect(module_db_url) as c:
        yield c


@pytest.fixture(scope="module")
def server(feedback_url: str, verper):
    s = Inbound(feedback_url, verper, port=0)
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def lmtp_server(feedback_url: str, verper):
    s = Inbound(feedback_url, verper, port=0, lmtp=True)
    s.start()
    yield s
    s.stop()


def sent_mail(db, key: str) -> dict:
    """A mail to <key>@example.com that left: enqueued, claimed, reported sent."""
    address = key.replace(":", "-") + "@example.com"
    mid = db.execute("SELECT mailroom.enqueue(%s, 'Your receipt', 'Thanks', p_delivery_key => %s) AS id",
                     (address, key)).fetchone()["id"]
    claimed = db.execute("SELECT id, lease_token FROM mailroom.claim_batch('test', 100)").fetchall()
    db.execute("SELECT mailroom.mark_outcomes(%s::jsonb)",
               (json.dumps([{"id": r["id"], "token": str(r["lease_token"]), "outcome": "sent"} for r in claimed]),))
    return {"id": mid, "address": address, "mid": runner_message_id(key, mid, MID_DOMAIN)}


def fill(template: str, mail: dict, verper) -> str:
    return (template.replace("{{VERP}}", verper.address(mail["id"], BOUNCE_DOMAIN))
            .replace("{{RCPT}}", mail["address"]).replace("{{MID}}", mail["mid"])
            .replace("{{BOUNCE_DOMAIN}}", BOUNCE_DOMAIN))


def deliver(server, rcpt: str, data: bytes, mail_from: str = "", lmtp: bool = False):
    """Send over SMTP (or LMTP); returns the server's reply to DATA (code, text)."""
    client = smtplib.LMTP("127.0.0.1", server.port) if lmtp else smtplib.SMTP("127.0.0.1", server.port, timeout=30)
    with client:
        client.ehlo_or_helo_if_needed()
        client.mail(mail_from)
        code, text = client.rcpt(rcpt)
        assert code == 250, (code, text)
        return client.data(data)


def crlf(text: str) -> bytes:
    return text.replace("\r\n", "\n").replace("\n", "\r\n").encode("utf-8")


def state(db) -> dict:
    """Everything inbound may change, for "nothing else changed" checks."""
    return db.execute("""SELECT (SELECT count(*) FROM mailroom.feedback_events) AS events,
                                (SELECT count(*) FROM mailroom.suppressions) AS suppressions,
                                (SELECT count(*) FROM mailroom.attempts) AS ledger,
                                (SELECT count(*) FROM mailroom.inbound_unparsed) AS unparsed""").fetchone()


def last_unparsed(db) -> dict:
    return db.execute("SELECT * FROM mailroom.inbound_unparsed ORDER BY id DESC LIMIT 1").fetchone()


@pytest.mark.parametrize("sample", sorted(EXPECTED))
def test_sample_is_parsed_to_its_outcome(sample, db, server, verper):
    want = EXPECTED[sample]
    mail = sent_mail(db, "s-" + sample.split(".")[0].replace("_", "-"))
    before = state(db)
    data = crlf(fill((SAMPLES / sample).read_text(), mail, verper))
    code, text = deliver(server, fill(want["to"], mail, verper), data)
    assert code == 250, text

    events = db.execute("SELECT kind, status, address, source FROM mailroom.feedback_events WHERE message_id = %s ORDER BY id",
                        (mail["id"],)).fetchall()
    if want.get("ignored"):
        assert events == [] and state(db) == before, "an auto-reply is recognised and changes nothing"
        return
    assert [[e["kind"], e["status"]] for e in events] == want["events"]
    assert state(db)["unparsed"] == before["unparsed"], "a sample that parses is not kept as unparsed"
    suppression = db.execute("SELECT reason FROM mailroom.suppressions WHERE address = %s", (mail["address"],)).fetchone()
    assert (suppression["reason"] if suppression else None) == want["suppressed"]
    bounced = db.execute("SELECT count(*) AS n FROM mailroom.attempts WHERE message_id = %s AND outcome = 'bounced'",
                         (mail["id"],)).fetchone()["n"]
    assert bounced == want["bounced_rows"]
    assert db.execute("SELECT count(*) AS n FROM mailroom.integrity_problems()").fetchone()["n"] == 0

    # The MTA sends it again (say our 250 was lost): nothing changes twice.
    again = state(db)
    assert deliver(server, fill(want["to"], mail, verper), data)[0] == 250
    assert state(db) == again


def test_lmtp_answers_once_the_database_has_it(db, lmtp_server, verper):
    mail = sent_mail(db, "lmtp-postfix")
    data = crlf(fill((SAMPLES / "postfix_failed.eml").read_text(), mail, verper))
    code, _ = deliver(lmtp_server, verper.address(mail["id"], BOUNCE_DOMAIN), data, lmtp=True)
    assert code == 250
    assert db.execute("SELECT kind FROM mailroom.feedback_events WHERE message_id = %s", (mail["id"],)).fetchone()["kind"] == "bounce"


def test_runner_message_id_is_what_the_database_checks(db):
    """inbound compares a report's quoted Message-ID in SQL with the runner's
    derivation (render.message_id): the two must agree."""
    mail = sent_mail(db, "order:7:receipt")
    assert db.execute("SELECT mailroom.feedback_message_id_matches(%s, %s) AS ok", (mail["id"], mail["mid"])).fetchone()["ok"]


def test_a_report_quoting_another_message_id_is_kept(db, server, verper):
    mail = sent_mail(db, "mid-mismatch")
    before = state(db)
    other = dict(mail, mid=runner_message_id("some-other-mail", mail["id"], MID_DOMAIN))
    code, _ = deliver(server, verper.address(mail["id"], BOUNCE_DOMAIN),
                      crlf(fill((SAMPLES / "postfix_failed.eml").read_text(), other, verper)))
    assert code == 250
    assert last_unparsed(db)["reason"].startswith("message_id_mismatch:")
    assert {**state(db), "unparsed": before["unparsed"]} == before and state(db)["unparsed"] == before["unparsed"] + 1


# -- hostile mail: kept whole as unparsed, nothing else changes ---------------------------

def _hostile_cases(mail: dict, verper) -> list[tuple[str, str, bytes, str, str]]:
    """(name, rcpt, data, mail_from, reason prefix)."""
    good_verp = verper.address(mail["id"], BOUNCE_DOMAIN)
    tag = good_verp.split(".", 1)[1].split("@")[0]
    forged = good_verp.replace(tag, ("a" if tag[0] != "a" else "b") + tag[1:])
    other_mail = good_verp.replace(f"+{mail['id']}.", f"+{mail['id'] + 1}.")
    dsn = fill((SAMPLES / "postfix_failed.eml").read_text(), mail, verper)
    big_status = dsn.replace("Reporting-MTA: dns; mx.shop.example\n",
                             "Reporting-MTA: dns; mx.shop.example\n" + ("X-Filler: " + "y" * 980 + "\n") * 10_700)
    return [
        ("malformed MIME: no header block", good_verp, b"\xff\xfe\x00garbage, no headers at all\r\n", "", "malformed_mime"),
        ("a truncated multipart report", good_verp,
         crlf(dsn.split("Content-Type: message/delivery-status")[0]), "", "malformed_report"),
        ("a forged VERP signature", forged, crlf(dsn), "", "bad_verp_signature"),
        ("a VERP tag moved to another mail", other_mail, crlf(dsn), "", "bad_verp_signature"),
        ("a report without VERP", f"postmaster@{BOUNCE_DOMAIN}", crlf(dsn), "", "unmatched"),
        ("a loop: sent from our own bounce address", good_verp, crlf(dsn), good_verp, "loop"),
        ("a loop: 61 Received headers", good_verp,
         crlf("Received: from a by b; Tue, 1 Dec 2026 10:00:00 +0000\n" * 61 + dsn), "", "loop"),
        ("a 10 MB delivery-status part", good_verp, crlf(big_status), "", "too_large"),
        ("a 10 MB plain mail", good_verp,
         crlf("From: x@example.com\nSubject: big\n\n" + ("z" * 76 + "\n") * 135_000), "", "no_report"),
        ("not UTF-8 (Latin-1 and NUL bytes)", good_verp,
         b"From: =?x?q?bad?= <x@example.com>\r\nSubject: caf\xe9 \xff\r\n\r\nna\xefve \x00 body\r\n", "", "no_report"),
    ]


def test_hostile_mail_is_kept_whole_and_changes_nothing_else(db, server, verper):
    mail = sent_mail(db, "hostile")
    for name, rcpt, data, mail_from, reason in _hostile_cases(mail, verper):
        before = state(db)
        code, text = deliver(server, rcpt, data, mail_from=mail_from)
        assert code == 250, (name, text)
        kept = last_unparsed(db)
        assert kept["reason"].startswith(reason), (name, kept["reason"])
        assert bytes(kept["raw"]).replace(b"\r\n", b"\n") == data.replace(b"\r\n", b"\n"), f"{name}: kept as received"
        assert kept["envelope_to"] == rcpt and kept["envelope_from"] == mail_from
        assert state(db) == {**before, "unparsed": before["unparsed"] + 1}, f"{name}: changed something else"
    assert db.execute("SELECT count(*) AS n FROM mailroom.suppressions WHERE address = %s", (mail["address"],)).fetchone()["n"] == 0


def test_a_dsn_with_undecodable_bytes_is_still_recorded(db, server, verper):
    mail = sent_mail(db, "latin1-dsn")
    data = crlf(fill((SAMPLES / "postfix_failed.eml").read_text(), mail, verper)).replace(
        b"Remote-MTA: dns; mx.example.com", b"Remote-MTA: dns; mx.example.com\r\nX-Note: caf\xe9")
    data = data.replace(b"unknown in virtual mailbox table\r\n\r\n--", b"unknown in virtual mailbox t\xe4ble\r\n\r\n--", 1)
    assert deliver(server, verp_address(verper, mail), data)[0] == 250
    event = db.execute("SELECT kind, detail FROM mailroom.feedback_events WHERE message_id = %s", (mail["id"],)).fetchone()
    assert event["kind"] == "bounce" and "t\ufffdble" in event["detail"]


def verp_address(verper, mail) -> str:
    return verper.address(mail["id"], BOUNCE_DOMAIN)


def test_mail_over_the_size_limit_is_refused_by_smtp(db, server, verper):
    """Over 25 MiB: 552 during DATA (the sending MTA keeps and reports it), nothing stored."""
    mail = sent_mail(db, "too-big")
    before = state(db)
    body = b"From: x@example.com\r\n\r\n" + (b"q" * 998 + b"\r\n") * (bounces.MAX_MESSAGE_BYTES // 1000 + 10)
    with smtplib.SMTP("127.0.0.1", server.port, timeout=60) as client:
        client.ehlo()
        client.mail("")
        client.rcpt(verp_address(verper, mail))
        code, _ = client.data(body)
    assert code == 552
    assert state(db) == before


def test_451_when_the_database_does_not_take_it(db, module_db_url, login_roles, verper):
    """A role without mailroom_feedback: the store fails, the answer is 451
    (the MTA keeps the mail and retries), and nothing is written."""
    s = Inbound(_role_url(module_db_url, NO_FEEDBACK_ROLE), verper, port=0)
    s.start()
    try:
        mail = sent_mail(db, "db-refuses")
        before = state(db)
        code, text = deliver(s, verp_address(verper, mail), crlf(fill((SAMPLES / "postfix_failed.eml").read_text(), mail, verper)))
        assert code == 451, text
        code, _ = deliver(s, verp_address(verper, mail), b"\xff garbage\r\n")
        assert code == 451, "unparsed mail that cannot be kept is not accepted either"
        assert state(db) == before
    finally:
        s.stop()


def test_unsubscribe_by_mailto(db, feedback_url, verper, keyring):
    """mailto: List-Unsubscribe (RFC 8058's other form): unsubscribe+TOKEN@ the
    bounce domain, TOKEN as the runner writes it (unsubscribe.make_token):
    suppressed for the mail's stream only; a forged token is kept unparsed."""
    mail = sent_mail(db, "unsub")
    token = unsubscribe.make_token(keyring, mail["address"], "transactional", mail["id"])
    s = Inbound(feedback_url, verper, port=0, unsubscribe_token=unsubscribe_verifier(keyring))
    s.start()
    try:
        plain = crlf(f"From: {mail['address']}\nTo: unsubscribe+{token}@{BOUNCE_DOMAIN}\nSubject: unsubscribe\n\nunsubscribe\n")
        assert deliver(s, f"unsubscribe+{token}@{BOUNCE_DOMAIN}", plain, mail_from=mail["address"])[0] == 250
        row = db.execute("SELECT reason, stream FROM mailroom.suppressions WHERE address = %s", (mail["address"],)).fetchone()
        assert (row["reason"], row["stream"]) == ("unsubscribed", "transactional")
        before = state(db)
        assert deliver(s, f"unsubscribe+{token}@{BOUNCE_DOMAIN}", plain, mail_from=mail["address"])[0] == 250
        assert state(db) == before, "the same unsubscribe again changes nothing"
        forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        assert deliver(s, f"unsubscribe+{forged}@{BOUNCE_DOMAIN}", plain)[0] == 250
        assert last_unparsed(db)["reason"] == "bad_unsubscribe_token"
        assert state(db) == {**before, "unparsed": before["unparsed"] + 1}
    finally:
        s.stop()


@pytest.mark.parametrize("role, env, code, message", [
    (FEEDBACK_ROLE, {}, exitcodes.USAGE, "no signing keys"),
    (NO_FEEDBACK_ROLE, {"MAILROOM_SIGNING_KEYS": "k1=" + "a" * 43}, exitcodes.REFUSED,
     "cannot execute feedback_message_id_matches, keep_unparsed_inbound, record_feedback (grant mailroom_feedback)"),
])
def test_the_command_refuses_a_bad_configuration_at_start(role, env, code, message, module_db_url, login_roles):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MAILROOM_")}
    done = subprocess.run([sys.executable, "-m", "mailroom.cli", "inbound", "--dsn", _role_url(module_db_url, role),
                           "--port", "0"], capture_output=True, text=True, env={**clean, **env}, timeout=60)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
