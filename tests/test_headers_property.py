"""Property tests (hypothesis) of the mail render builds: whatever the subject,
header values, display names and bodies, the mail is one the standard library
parses back to the same values, whose lines stay within RFC 5322 and RFC 2047,
and which a real SMTP server (aiosmtpd, mailroom's sink) takes byte for byte.

HEADER_EXAMPLES=5000 for a longer hunt; the defaults keep `make test` quick.
"""

from __future__ import annotations

import os
import re
from email import message_from_bytes, policy
from email.header import decode_header, make_header
from email.utils import getaddresses

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mailroom.send.render import Renderer
from mailroom.dev.sink import Sink
from mailroom.send.transport import Transport

EXAMPLES = int(os.environ.get("HEADER_EXAMPLES", "300"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
# Delivery costs an SMTP round trip per mail: a sample of the same inputs.
DELIVERY = settings(max_examples=max(10, EXAMPLES // 10), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

ROW = {"id": 1, "delivery_key": "prop-1", "to_address": "zoe@example.com"}
ENCODED_WORD = re.compile(rb"=\?[^?\s]+\?[bBqQ]\?[^?\s]*\?=")

# Text of every kind a header meets: ASCII, non-ASCII (2-, 3- and 4-byte
# UTF-8), unbreakable tokens of 70 to 1,200 characters, whitespace runs and
# TABs, text that looks like an RFC 2047 encoded-word, punctuation that
# means something in structured headers.
WORDS = st.one_of(
    st.text(st.sampled_from("abcXYZ019"), min_size=1, max_size=12),
    st.text(st.sampled_from("äöüßéЖ日本€😀"), min_size=1, max_size=8),
    st.integers(70, 1200).map(lambda n: "x" * n),
    st.sampled_from(["=?utf-8?q?hi?=", "=?iso-8859-1?b?SGk=?=", "=?", "?=", "=?utf-8?q?", '"quoted"',
                     "(comment)", "a,b", "<id@x.example>", ";", ":", "\\", "_", "=3D"]),
)
GAPS = st.sampled_from([" ", " ", " ", "  ", "\t", " \t ", "     "])


@st.composite
def texts(draw, max_words=12):
    words = draw(st.lists(WORDS, min_size=1, max_size=max_words))
    out = words[0]
    for w in words[1:]:
        out += draw(GAPS) + w
    return out


URL_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-._~%/?=&"
urls = st.builds(lambda path: f"<https://example.com/u/{path}>",
                 st.text(st.sampled_from(URL_CHARS), min_size=0, max_size=900))
display_names = st.one_of(
    st.just(""),
    st.text(st.sampled_from("abc XYZ.,;:\"()<>@\\'"), min_size=1, max_size=40).map(str.strip).filter(bool),
    st.text(st.sampled_from("äöüßé Жx日本"), min_size=1, max_size=120).map(str.strip).filter(bool),
    st.sampled_from(["=?utf-8?q?Zo=C3=AB?=", "Zoë’s Shop", "a" * 100]),
)
bodies = st.one_of(
    st.text(min_size=1, max_size=300),                          # anything, NUL and lone CR/LF included
    st.text(st.sampled_from("ab .\r\n\x00\t"), min_size=1, max_size=200),  # line ends, lone dots, NUL
    st.integers(990, 2500).map(lambda n: "y" * n + "\nend"),    # lines over 998
    st.text(st.sampled_from("äö€😀 \n"), min_size=1, max_size=200),
)


def normal_body(body: str) -> str:
    """What render promises of a body: line ends are CRLF on the wire (LF once
    parsed), and the body ends with one."""
    body = body.replace("\r\n", "\n").replace("\r", "\n")
    return body if body.endswith("\n") else body + "\n"


def check_wire_format(data: bytes) -> None:
    assert b"\r" not in data.replace(b"\r\n", b"") and b"\n" not in data.replace(b"\r\n", b""), "bare CR or LF"
    head = data.split(b"\r\n\r\n", 1)[0]
    for line in data.split(b"\r\n"):
        assert len(line) <= 998, f"a line of {len(line)} octets"
    for line in head.split(b"\r\n"):
        words = ENCODED_WORD.findall(line)
        if words:
            assert max(map(len, words)) <= 75, f"an encoded-word over 75 characters: {line!r}"
            assert len(line) <= 76, f"a line with an encoded-word over 76 characters: {line!r}"
        elif len(line) > 78:
            # Folded at 78 wherever it can be: a longer line holds one word.
            text = line if line[:1] in (b" ", b"\t") else line.split(b":", 1)[1]
            assert len(text.split()) == 1, f"a line of {len(line)} that could have been folded: {line!r}"


def parse(data: bytes):
    return message_from_bytes(data, policy=policy.default)


def quoted(display: str) -> str:
    """A display name as an application writes it: an RFC 5322 quoted-string."""
    return '"' + display.replace("\\", "\\\\").replace('"', '\\"') + '"'


@st.composite
def rows(draw):
    headers = {"X-Note": draw(texts()), "Comments": draw(texts(4)),
               "List-Unsubscribe": draw(urls) + ", <mailto:u@example.com?subject=unsubscribe>",
               "References": " ".join(f"<{n}.{'r' * draw(st.integers(1, 60))}@example.com>"
                                      for n in range(draw(st.integers(1, 12))))}
    if draw(st.booleans()):
        headers["Reply-To"] = ", ".join(f"{quoted(n)} <help{i}@example.com>" if n else f"help{i}@example.com"
                                        for i, n in enumerate(draw(st.lists(display_names, min_size=1, max_size=3))))
    if draw(st.booleans()):
        headers[draw(st.sampled_from(["From", "FROM", "from"]))] = "Sales <sales@example.com>"
    body_text, body_html = draw(st.one_of(
        st.tuples(bodies, st.none()), st.tuples(st.none(), bodies), st.tuples(bodies, bodies)))
    return {**ROW, "subject": draw(texts(20)), "body_text": body_text or None,
            "body_html": body_html or None, "headers": headers}


def check_parses_back(row: dict, data: bytes) -> None:
    m = parse(data)
    assert not m.defects, m.defects
    for name in ("From", "To", "Subject", "Date", "Message-ID", "MIME-Version"):
        assert len(m.get_all(name)) == 1, name
    assert m["Subject"] == " ".join(row["subject"].split())
    for name in ("X-Note", "Comments", "List-Unsubscribe", "References"):
        assert str(m[name]) == row["headers"][name].strip(" \t"), name
    if "Reply-To" in row["headers"]:
        # render writes a display name's whitespace runs as one space, as a phrase reads them
        want = [(" ".join(n.split()), a) for n, a in getaddresses([row["headers"]["Reply-To"]])]
        # The one named exception: a display name too long for one encoded-word
        # goes as several, and RFC 2047 6.2 ignores the whitespace between
        # adjacent encoded-words. email.header.decode_header reads it so;
        # email.headerregistry (policy.default) puts a space there in a phrase
        # (it does not in unstructured text), so its display names are compared
        # without whitespace, and decode_header's exactly.
        got = [(a.display_name, a.addr_spec) for a in m["Reply-To"].addresses]
        raw = dict(m.raw_items())["Reply-To"].replace("\r\n", "")
        if "=?" not in raw:
            assert got == want
        else:
            assert getaddresses([str(make_header(decode_header(raw)))]) == want
            assert [("".join(n.split()), a) for n, a in got] == [("".join(n.split()), a) for n, a in want]
    from_given = [v for k, v in row["headers"].items() if k.lower() == "from"]
    assert m["From"].addresses[0].addr_spec == ("sales@example.com" if from_given else "shop@example.com")
    if row["body_text"]:
        assert m.get_body(("plain",)).get_content().replace("\r\n", "\n") == normal_body(row["body_text"])
    if row["body_html"]:
        assert m.get_body(("html",)).get_content().replace("\r\n", "\n") == normal_body(row["body_html"])


RENDERER = Renderer("Zoë’s Shop <shop@example.com>")


@PROPERTY
@given(rows())
@example({**ROW, "subject": "x" * 1200, "body_text": "a\x00b", "body_html": None,
          "headers": {"X-Note": "=?utf-8?q?hi?=", "Comments": "y" * 80, "References": "<a@example.com>",
                      "List-Unsubscribe": "<https://example.com/u/" + "z" * 900 + ">"}})
def test_every_built_mail_parses_back_within_the_rfcs(row):
    built = RENDERER.build(row)
    check_wire_format(built.data)
    check_parses_back(row, built.data)


def test_a_sample_delivers_through_aiosmtpd_byte_for_byte():
    """The same inputs through a real SMTP server (mailroom's sink, aiosmtpd,
    which refuses lines over 1,000 octets): accepted, and what it stored is
    what was built."""
    with Sink(keep=True) as sink:
        conn = Transport(sink.url()).connection()

        @DELIVERY
        @given(rows())
        def deliver(row):
            built = RENDERER.build(row)
            before = len(sink.messages)
            outcome = conn.send(built.envelope_from, built.rcpt, built.data)
            assert outcome.outcome == "sent", outcome
            got = sink.messages[before]
            assert got["rcpt_tos"] == ["zoe@example.com"]
            assert got["data"] == built.data

        try:
            deliver()
        finally:
            conn.close()
