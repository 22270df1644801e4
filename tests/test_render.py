"""Building mail: parsed back with Python's email parser, which must agree."""

from __future__ import annotations

import hashlib
from email import message_from_bytes, policy
from email.utils import parseaddr

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailroom.send.render import Renderer, RenderError, message_id

ROW = {"id": 1, "delivery_key": "order-7", "to_address": "zoe@example.com"}


def _parse(data: bytes):
    assert b"\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")  # CRLF only
    return message_from_bytes(data, policy=policy.default)


@pytest.fixture
def r():
    r = Renderer("Zoë’s Shop <shop@example.com>")
    r.load([{"key": "t", "updated_at": 1, "subject": "Hi {{ name }}", "body_text": "Hello {{ name }}",
             "body_html": "<p>{{ name }}</p>"}])
    return r


def test_literal_text_and_html(r):
    long_subject = "Ünïcödé subject " * 12
    b = r.build({**ROW, "subject": long_subject, "body_text": "x" * 1200 + "\nZoë\n", "body_html": "<b>ok</b>",
                 "headers": {"Reply-To": "Zoë Support <help@example.com>", "X-Tag": "a"}})
    m = _parse(b.data)
    assert m["Subject"] == " ".join(long_subject.split())
    assert m["From"].addresses[0].display_name == "Zoë’s Shop"
    assert m["Reply-To"].addresses[0].addr_spec == "help@example.com"
    assert m["Message-ID"] == message_id("order-7", 1, "example.com") == b.message_id
    assert m.get_body(("plain",)).get_content().replace("\r\n", "\n") == "x" * 1200 + "\nZoë\n"
    assert m.get_body(("html",)).get_content().strip() == "<b>ok</b>"
    assert max(len(line) for line in b.data.split(b"\r\n")) <= 998
    assert b.envelope_from == "shop@example.com" and b.rcpt == "zoe@example.com"


def test_same_delivery_key_same_message_id(r):
    a = r.build({**ROW, "subject": "a", "body_text": "a"})
    b = r.build({**ROW, "subject": "b", "body_text": "b"})
    c = r.build({**ROW, "delivery_key": "order-8", "subject": "a", "body_text": "a"})
    assert a.message_id == b.message_id != c.message_id


def test_message_id_is_the_key_digest_and_the_id():
    """<40 hex digits of sha256(key).id@domain>: mailroom.message_by_message_id
    finds the mail by the id and checks the digest (tests/pgtap/message_lookup.sql)."""
    assert message_id("order-7", 42, "example.com") == (
        "<" + hashlib.sha256(b"order-7").hexdigest()[:40] + ".42@example.com>")


@pytest.mark.parametrize("body", [{"body_text": "only text"}, {"body_html": "<p>only html</p>"}])
def test_single_part(r, body):
    m = _parse(r.build({**ROW, "subject": "s", **body}).data)
    assert not m.is_multipart()
    assert m.get_content_type() == ("text/plain" if "body_text" in body else "text/html")


def test_template_renders_escapes_html_and_caches_by_version(r):
    m = _parse(r.build({**ROW, "template_key": "t", "template_vars": {"name": "<Zoë>"}}).data)
    assert m["Subject"] == "Hi <Zoë>"
    assert m.get_body(("html",)).get_content().strip() == "<p>&lt;Zoë&gt;</p>"
    r.load([{"key": "t", "updated_at": 2, "subject": "v2 {{ name }}", "body_text": "x", "body_html": None}])
    assert r.cached_version("t") == 2
    assert _parse(r.build({**ROW, "template_key": "t", "template_vars": {"name": "n"}}).data)["Subject"] == "v2 n"


@pytest.mark.parametrize("row,problem", [
    ({"template_key": "t", "template_vars": {}}, "'name' is undefined"),
    ({"template_key": "missing"}, "not found"),
    ({"subject": "s", "body_text": "b", "headers": {"X-Evil": "a\r\nBcc: victim@example.com"}}, "line break"),
    ({"subject": "s", "body_text": "b", "headers": {"Bad Name": "x"}}, "not a valid header name"),
    ({"subject": "s"}, "neither a text nor an HTML body"),
])
def test_render_errors(r, row, problem):
    with pytest.raises(RenderError, match=problem):
        r.build({**ROW, **row})


def test_sandbox_blocks_unsafe_attributes(r):
    r.load([{"key": "evil", "updated_at": 1, "subject": "{{ ''.__class__.__mro__ }}", "body_text": "x",
             "body_html": None}])
    with pytest.raises(RenderError, match="evil"):
        r.build({**ROW, "template_key": "evil", "template_vars": {}})


def test_template_syntax_error_fails_the_message(r):
    r.load([{"key": "broken", "updated_at": 1, "subject": "{% if %}", "body_text": "x", "body_html": None}])
    with pytest.raises(RenderError, match="syntax error"):
        r.build({**ROW, "template_key": "broken"})


def test_idn_domains_become_a_labels_in_envelope_and_headers():
    """IDNA 2008 with UTS 46 mapping (the idna package): upper case is mapped,
    and ß stays a letter of its own (IDNA 2003, the stdlib codec, made it 'ss')."""
    r = Renderer("Shop <shop@BÜCHER.example>")
    b = r.build({**ROW, "to_address": "user@ünicode.de", "subject": "s", "body_text": "b",
                 "headers": {"Reply-To": "Help <help@faß.de>"}})
    m = _parse(b.data)
    assert b.data.isascii()
    assert (b.envelope_from, b.rcpt) == ("shop@xn--bcher-kva.example", "user@xn--nicode-2ya.de")
    assert m["To"] == "user@xn--nicode-2ya.de"
    assert m["Reply-To"].addresses[0].addr_spec == "help@xn--fa-hia.de"
    assert m["From"].addresses[0].addr_spec == "shop@xn--bcher-kva.example"
    assert b.message_id.endswith("@xn--bcher-kva.example>")


def test_utf8_local_part_stays_utf8_for_smtputf8(r):
    b = r.build({**ROW, "to_address": "jürgen@bücher.example", "subject": "s", "body_text": "b"})
    assert b.rcpt == "jürgen@xn--bcher-kva.example"
    assert b"\r\nTo: j\xc3\xbcrgen@xn--bcher-kva.example\r\n" in b.data
    assert not b.data.isascii()  # the transport sends it with SMTPUTF8 or fails it


def test_invalid_idn_domain_fails_the_message(r):
    with pytest.raises(RenderError, match=r"To: '☃\.example' is not a valid internationalised domain name"):
        r.build({**ROW, "to_address": "user@☃.example", "subject": "s", "body_text": "b"})


def test_a_template_set_stays_in_that_template(r):
    # The three templates of a mail share one context dict (Template.render):
    # a {% set %} in the subject must not change what the bodies see.
    r.load([{"key": "s", "updated_at": 1, "subject": "{% set name = 'Subject' %}{{ name }}",
             "body_text": "{{ name }} {{ to_address }}", "body_html": "<p>{{ name }}</p>"}])
    m = _parse(r.build({**ROW, "template_key": "s", "template_vars": {"name": "Zoë"}}).data)
    assert m["Subject"] == "Subject"
    assert m.get_body(("plain",)).get_content().strip() == "Zoë zoe@example.com"
    assert m.get_body(("html",)).get_content().strip() == "<p>Zoë</p>"


def test_boundaries_and_dates_differ_where_they_must(r):
    a, b = (r.build({**ROW, "subject": "s", "body_text": "t", "body_html": "<p>h</p>"}).data for _ in range(2))
    boundary = lambda data: _parse(data).get_boundary()  # noqa: E731
    assert boundary(a) != boundary(b) and boundary(a).startswith("=_mailroom_")
    assert _parse(a)["Date"].datetime.tzinfo is not None


@given(st.from_regex(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.()<>\" ,-]{1,20}@[A-Za-z0-9.()<> -]{1,20}", fullmatch=True))
def test_the_envelope_recipient_is_what_parseaddr_reads(address):
    # The fast path (a dot-atom address taken as is) and parseaddr agree,
    # also next to comments, quotes, angle brackets and blanks.
    r = Renderer("shop@example.com")
    try:
        rcpt = r.build({**ROW, "to_address": address, "subject": "s", "body_text": "t"}).rcpt
    except RenderError:
        return
    assert rcpt == (parseaddr(address)[1] or address)


def test_jinja_globals_reach_all_three_templates(r):
    # Template.render builds the context itself: the environment's globals
    # (range, namespace, ...) must still be there, and a variable may shadow one.
    r.load([{"key": "g", "updated_at": 1, "subject": "{{ range(3) | list | length }} {{ cycler }}",
             "body_text": "{% for i in range(2) %}{{ i }}{% endfor %}",
             "body_html": "{% set ns = namespace(n=1) %}<p>{{ ns.n }}</p>"}])
    m = _parse(r.build({**ROW, "template_key": "g", "template_vars": {"cycler": "shadowed"}}).data)
    assert m["Subject"] == "3 shadowed"
    assert m.get_body(("plain",)).get_content().strip() == "01"
    assert m.get_body(("html",)).get_content().strip() == "<p>1</p>"
