"""Outcome classification of each transport against a real aiosmtpd sink (no database)."""

from __future__ import annotations

import json
import mailbox
import signal
import subprocess
import sys
import time

import pytest

from mailroom.send.render import Renderer
from mailroom.dev.sink import Rule, Sink
from mailroom.net import free_port
from mailroom.send.transport import Transport, TransportConfigError, classify_reply, parse_url, redact_url

ROW = {"id": 1, "delivery_key": "k-1", "to_address": "to@example.com", "subject": "s", "body_text": "b"}


def _built():
    return Renderer("noreply@example.com").build(ROW)


def _send(url: str):
    b = _built()
    conn = Transport(url).connection()
    try:
        return conn.send(b.envelope_from, b.rcpt, b.data)
    finally:
        conn.close()


@pytest.mark.parametrize("code,text,outcome,enhanced", [
    (250, "2.0.0 Ok: queued as 4F2", "sent", "2.0.0"),
    (451, "4.7.1 Greylisted", "retry", "4.7.1"),
    (421, "Service not available", "retry", None),
    (552, "5.3.4 Message too big", "failed", "5.3.4"),
    (550, "5.1.1 User unknown", "failed", "5.1.1"),
])
def test_classify_reply(code, text, outcome, enhanced):
    o = classify_reply(code, text)
    assert (o.outcome, o.smtp_code, o.smtp_enhanced) == (outcome, code, enhanced)
    # the code and the enhanced status have their own fields: the detail (and
    # so last_error, "code enhanced detail") says each once
    assert o.detail == "data: " + text.removeprefix(f"{enhanced} " if enhanced else "")


def test_outcomes_against_the_sink():
    rules = [
        Rule(452, "4.2.2 Mailbox full", stage="rcpt", rcpt_contains="full@"),
        Rule(554, "5.7.1 Rejected as spam", rcpt_contains="spam@"),
    ]
    b = _built()
    with Sink(keep=True, rules=rules) as sink:
        conn = Transport(sink.url()).connection()
        assert conn.send(b.envelope_from, "full@example.com", b.data).outcome == "retry"
        spam = conn.send(b.envelope_from, "spam@example.com", b.data)
        ok = conn.send(b.envelope_from, "ok@example.com", b.data)
        conn.close()
        assert sink.stats()["received"] == 1
    assert (spam.outcome, spam.smtp_code, spam.smtp_enhanced) == ("failed", 554, "5.7.1")
    assert ok.outcome == "sent" and ok.provider_id == "SINK00000001"


def test_utf8_local_part_needs_smtputf8():
    """A UTF-8 local part goes out with SMTPUTF8 when the relay offers it and
    fails permanently, naming SMTPUTF8, when it does not; ASCII mail on the
    same session is unaffected."""
    r = Renderer("noreply@example.com")
    utf8 = r.build({**ROW, "to_address": "jürgen@bücher.example"})
    plain = _built()
    with Sink(keep=True, smtputf8=False) as sink:
        conn = Transport(sink.url()).connection()
        refused = conn.send(utf8.envelope_from, utf8.rcpt, utf8.data)
        ok = conn.send(plain.envelope_from, plain.rcpt, plain.data)
        conn.close()
        assert [m["rcpt_tos"] for m in sink.messages] == [["to@example.com"]]
    assert (refused.outcome, refused.detail) == (
        "failed", "mail: a non-ASCII local part needs SMTPUTF8, which the relay does not offer")
    assert ok.outcome == "sent"
    with Sink(keep=True) as sink:
        conn = Transport(sink.url()).connection()
        sent = conn.send(utf8.envelope_from, utf8.rcpt, utf8.data)
        ok = conn.send(plain.envelope_from, plain.rcpt, plain.data)
        conn.close()
        assert [m["rcpt_tos"] for m in sink.messages] == [["jürgen@xn--bcher-kva.example"], ["to@example.com"]]
        assert b"To: j\xc3\xbcrgen@xn--bcher-kva.example\r\n" in sink.messages[0]["data"]
    assert sent.outcome == "sent" and ok.outcome == "sent"


def test_connection_refused_is_retry():
    o = _send(f"smtp://127.0.0.1:{free_port()}?timeout=2")
    assert o.outcome == "retry" and o.detail.startswith("connect:")


def test_timeout_before_data_is_retry():
    with Sink(rules=[Rule(250, "late", stage="rcpt", delay=1.0)]) as sink:
        o = _send(sink.url(query="timeout=0.3"))
    assert o.outcome == "retry" and "rcpt: timeout" in o.detail


def test_timeout_after_data_is_ambiguous():
    with Sink(delay=1.0) as sink:
        o = _send(sink.url(query="timeout=0.3"))
    assert o.outcome == "ambiguous" and "after data" in o.detail


def test_connection_lost_after_data_is_ambiguous():
    with Sink(rules=[Rule(drop=True)]) as sink:
        o = _send(sink.url())
        assert sink.stats()["dropped"] == 1
    assert o.outcome == "ambiguous"


def test_a_session_is_reused_and_reopened_after_the_server_drops_it():
    b = _built()
    with Sink(keep=True) as sink:
        conn = Transport(sink.url()).connection()
        assert conn.send(b.envelope_from, b.rcpt, b.data).outcome == "sent"
        conn.smtp.sock.close()  # the far end went away while idle
        assert conn.send(b.envelope_from, b.rcpt, b.data).outcome == "sent"
        conn.close()
        assert sink.stats()["received"] == 2
        assert sink.stats()["duplicates"] == 1  # same Message-ID twice


def test_null_and_file_transports(tmp_path):
    assert _send("null://").outcome == "sent"
    o = _send(f"file://{tmp_path}/box")
    assert o.outcome == "sent"
    (msg,) = mailbox.Maildir(str(tmp_path / "box"), create=False)
    assert msg["Message-ID"].endswith("@example.com>")


def test_null_builds_nothing_and_render_1_builds_and_discards():
    plain, render = Transport("null://"), Transport("null://?render=1")
    assert not plain.needs_message
    assert plain.url.redacted() == "null://"
    assert render.needs_message
    assert render.url.redacted() == "null://?render=1"
    assert Transport("null://?render=0").needs_message is False
    assert Transport("smtp://localhost:2525").needs_message


@pytest.mark.parametrize("url,problem", [
    ("null://?bogus=1", "unknown parameter"),
    ("ftp://host", "unknown scheme"),
    ("smtp://", "no host"),
    ("smtp://u:pw@host?bogus=1", "unknown parameter"),
    ("smtps://host?starttls", "already TLS"),
    ("smtp://host:x", "port"),
])
def test_bad_urls(url, problem):
    with pytest.raises(TransportConfigError, match=problem) as e:
        parse_url(url)
    assert "pw" not in str(e.value)


def test_redaction():
    u = parse_url("smtp://me%40x.org:p%40ss@mail.example.com:587?starttls")
    assert (u.username, u.password, u.port, u.starttls) == ("me@x.org", "p@ss", 587, True)
    assert str(u) == repr(u.redacted()).strip("'") == "smtp://me%40x.org:***@mail.example.com:587?starttls"
    assert "p@ss" not in repr(u)
    assert redact_url("smtp://a:b@h:25") == "smtp://a:***@h:25"


def test_sink_command_writes_stats_and_reports_duplicates(tmp_path):
    port = free_port()
    stats = tmp_path / "stats.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mailroom.cli", "sink", "--port", str(port), "--stats-file", str(stats),
         "--store", str(tmp_path / "box"), "--reply", "451 4.3.0 Later", "--reply-times", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while not stats.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        url = f"smtp://127.0.0.1:{port}"
        assert [_send(url).outcome for _ in range(3)] == ["retry", "sent", "sent"]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    final = json.loads(out.strip().splitlines()[-1])
    written = json.loads(stats.read_text())
    assert {k: v for k, v in final.items() if k != "updated_at"} == {
        k: v for k, v in written.items() if k != "updated_at"}
    assert (final["received"], final["duplicates"], final["rejected"]) == (2, 1, {"451": 1})
    assert len(list(mailbox.Maildir(str(tmp_path / "box"), create=False))) == 2
