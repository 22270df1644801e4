"""The asyncio SMTP session the runner sends with (mailroom.send.asyncsmtp)
against a real aiosmtpd sink, with and without PIPELINING: the same
classification as transport.SmtpConnection (tests/test_transport.py), above
all the ambiguous-after-body rule. Each test runs on asyncio's own event
loop and on the one the send pool runs its sessions on (uvloop's, when it
is installed)."""

from __future__ import annotations

import asyncio

import pytest

from mailroom.send import sendpool
from mailroom.send.asyncsmtp import AsyncSmtpConnection
from mailroom.send.render import Renderer
from mailroom.dev.sink import Rule, Sink
from mailroom.net import free_port
from mailroom.send.transport import parse_url
from tests.runnerkit import self_signed_cert

ROW = {"id": 1, "delivery_key": "k-1", "to_address": "to@example.com", "subject": "s", "body_text": "b"}
pytestmark = pytest.mark.parametrize("pipelining", [False, True], ids=["plain", "pipelining"])


class _SendPoolLoops(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self):
        return sendpool.new_event_loop()


@pytest.fixture(autouse=True, params=["asyncio-loop", "send-pool-loop"])
def event_loop_kind(request):
    """asyncio.run in these tests runs on the loop named by the param."""
    if request.param == "send-pool-loop":
        asyncio.set_event_loop_policy(_SendPoolLoops())
    try:
        yield request.param
    finally:
        asyncio.set_event_loop_policy(None)


def _built(**row):
    return Renderer("noreply@example.com").build({**ROW, **row})


def _sends(url: str, mails: list[tuple[str, bytes]]):
    """Send (rcpt, data) pairs on one session, in order; the outcomes."""
    async def go():
        conn = AsyncSmtpConnection(parse_url(url))
        try:
            return [await conn.send("noreply@example.com", rcpt, data) for rcpt, data in mails]
        finally:
            await conn.close()
    return asyncio.run(go())


def test_outcomes_against_the_sink(pipelining):
    rules = [Rule(452, "4.2.2 Mailbox full", stage="rcpt", rcpt_contains="full@"),
             Rule(554, "5.7.1 Rejected as spam", rcpt_contains="spam@")]
    data = _built().data
    with Sink(keep=True, rules=rules, pipelining=pipelining) as sink:
        full, spam, ok = _sends(sink.url(), [("full@example.com", data), ("spam@example.com", data),
                                             ("ok@example.com", data)])
        assert sink.stats()["received"] == 1
        assert sink.messages[0]["data"].replace(b"\r\n", b"\n") == data.replace(b"\r\n", b"\n")
    assert (full.outcome, full.smtp_code, full.smtp_enhanced) == ("retry", 452, "4.2.2")
    assert (spam.outcome, spam.smtp_code, spam.smtp_enhanced) == ("failed", 554, "5.7.1")
    assert ok.outcome == "sent" and ok.provider_id == "SINK00000001"


def test_dot_stuffing_and_utf8_local_part(pipelining):
    dotted = _built(body_text=".leading dot\n..two\nend")
    utf8 = _built(to_address="jürgen@bücher.example")
    with Sink(keep=True, pipelining=pipelining) as sink:
        a, b = _sends(sink.url(), [("to@example.com", dotted.data), (utf8.rcpt, utf8.data)])
        assert [m["rcpt_tos"] for m in sink.messages] == [["to@example.com"], ["jürgen@xn--bcher-kva.example"]]
        assert b"\r\n.leading dot\r\n..two\r\n" in sink.messages[0]["data"]
    assert a.outcome == b.outcome == "sent"
    with Sink(smtputf8=False, pipelining=pipelining) as sink:
        (refused,) = _sends(sink.url(), [(utf8.rcpt, utf8.data)])
    assert (refused.outcome, refused.detail) == (
        "failed", "mail: a non-ASCII local part needs SMTPUTF8, which the relay does not offer")


def test_connection_refused_is_retry(pipelining):
    (o,) = _sends(f"smtp://127.0.0.1:{free_port()}?timeout=2", [("to@example.com", _built().data)])
    assert o.outcome == "retry" and o.detail.startswith("connect:")


def test_timeout_before_data_is_retry(pipelining):
    with Sink(rules=[Rule(250, "late", stage="rcpt", delay=1.0)], pipelining=pipelining) as sink:
        (o,) = _sends(sink.url(query="timeout=0.3"), [("to@example.com", _built().data)])
    assert o.outcome == "retry" and "rcpt: timeout" in o.detail


def test_timeout_after_data_is_ambiguous(pipelining):
    with Sink(delay=1.0, pipelining=pipelining) as sink:
        (o,) = _sends(sink.url(query="timeout=0.3"), [("to@example.com", _built().data)])
    assert o.outcome == "ambiguous" and "after data: timeout" in o.detail


def test_connection_lost_after_data_is_ambiguous(pipelining):
    with Sink(rules=[Rule(drop=True)], pipelining=pipelining) as sink:
        (o,) = _sends(sink.url(), [("to@example.com", _built().data)])
        assert sink.stats()["dropped"] == 1
    assert o.outcome == "ambiguous" and "after data: connection lost" in o.detail


def test_a_session_the_server_dropped_while_idle_is_reopened(pipelining):
    data = _built().data

    async def go(url):
        conn = AsyncSmtpConnection(parse_url(url))
        first = await conn.send("noreply@example.com", "to@example.com", data)
        conn.transport.abort()  # the far end went away while idle
        await asyncio.sleep(0.05)
        second = await conn.send("noreply@example.com", "to@example.com", data)
        await conn.close()
        return first, second

    with Sink(pipelining=pipelining) as sink:
        first, second = asyncio.run(go(sink.url()))
        assert sink.stats()["received"] == 2
    assert first.outcome == second.outcome == "sent"


def test_starttls_and_auth(tmp_path, pipelining):
    ctx, cafile = self_signed_cert(tmp_path)
    data = _built().data
    with Sink(starttls_context=ctx, require_starttls=True, auth=("ann", "s3cret"), pipelining=pipelining) as sink:
        (ok,) = _sends(sink.url(userinfo="ann:s3cret", query=f"starttls&cafile={cafile}"),
                       [("to@example.com", data)])
        (bad,) = _sends(sink.url(userinfo="ann:wrong", query=f"starttls&cafile={cafile}"),
                        [("to@example.com", data)])
        (untrusted,) = _sends(sink.url(userinfo="ann:s3cret", query="starttls"), [("to@example.com", data)])
        assert sink.stats()["received"] == 1
    assert ok.outcome == "sent"
    assert bad.outcome == "retry" and bad.detail.startswith("connect:") and bad.smtp_code == 535
    assert untrusted.outcome == "retry" and "CERTIFICATE_VERIFY_FAILED" in untrusted.detail
    with Sink(pipelining=pipelining) as plain:  # ?starttls refuses a server without it
        (o,) = _sends(plain.url(query="starttls"), [("to@example.com", data)])
    assert o.outcome == "retry" and "does not offer STARTTLS" in o.detail
