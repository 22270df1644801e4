"""One test per header defect of issue 14 ("Why", item 6), each of which the
v0.3.0 runner and schema got wrong: the mail is built by render.py, parsed
back with the standard library, and where it says "delivered", sent by a real
`mailroom run` to a real SMTP server (aiosmtpd, which refuses lines over 1,000
octets with "500 Line too long").

The properties behind them (any subject, header value, display name or body)
are in tests/test_headers_property.py.
"""

from __future__ import annotations

import re

import psycopg
import pytest
from psycopg.types.json import Jsonb

from mailroom.send.render import OWNED, Renderer, RenderError
from mailroom.dev.sink import Sink
from tests.runnerkit import RunnerProcess, enqueue, parse, runners_message_id

ROW = {"id": 1, "delivery_key": "hdr-1", "to_address": "zoe@example.com"}
ENCODED_WORD = re.compile(rb"=\?[^?\s]+\?[bBqQ]\?[^?\s]*\?=")
FAST = ("--poll-interval", "0.2", "--concurrency", "2", "--batch", "20", "--exit-when-idle")


def _build(**row):
    return Renderer("Shop <shop@example.com>").build({**ROW, "subject": "s", "body_text": "b", **row})


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\r\n")


def _written(conn) -> int:
    return conn.execute("SELECT (SELECT count(*) FROM mailroom.messages)"
                        " + (SELECT count(*) FROM mailroom.campaigns) AS n").fetchone()["n"]


def _refused(conn, sql: str, params: dict, message: str) -> None:
    """The call fails with 22023 and exactly this message, and writes nothing."""
    before = _written(conn)
    with pytest.raises(psycopg.Error) as info:
        conn.execute(sql, params)
    assert (info.value.sqlstate, info.value.diag.message_primary) == ("22023", message)
    assert _written(conn) == before


ENQ = "SELECT mailroom.enqueue('ann@example.com', 'Hi', 'Body', p_headers => %(h)s)"
CAMPAIGN = ("SELECT mailroom.enqueue_campaign('c', 't', $q$SELECT 'r1' AS recipient_id, 'dee@example.com' AS email$q$,"
            " p_headers => %(h)s)")
ONE_RECIPIENT = "one mail, one recipient: enqueue one mail per recipient"


# -- Bcc, Cc and a second Subject: refused at enqueue, and a row from before fails

@pytest.mark.parametrize("name,reason", [
    ("Bcc", ONE_RECIPIENT), ("BCC", ONE_RECIPIENT), ("Cc", ONE_RECIPIENT), ("cc", ONE_RECIPIENT),
    ("Subject", "the subject is p_subject or the template's"), ("subject", "the subject is p_subject or the template's"),
])
def test_bcc_cc_and_a_second_subject_are_refused_at_enqueue(conn, name, reason):
    """v0.3.0 took them: a Bcc went into the header every To recipient reads
    and never into the envelope (the Cc likewise), a Subject gave the mail two."""
    conn.execute("SELECT mailroom.upsert_template('t', 'Hi', 'Body')")
    message = f'mailroom: headers: "{name}" is set by mailroom ({reason})'
    _refused(conn, ENQ, {"h": Jsonb({name: "all@example.com"})}, message)
    _refused(conn, CAMPAIGN, {"h": Jsonb({"X-Tag": "a", name: "all@example.com"})}, message)


def test_enqueue_and_the_runner_refuse_the_same_headers_for_the_same_reasons(conn):
    """mailroom._check_headers and render.OWNED are one list in two places
    (the runner fails rows queued before the check): they must not drift."""
    in_sql = {r["name"] for r in conn.execute(
        "SELECT (regexp_matches(pg_get_functiondef('mailroom._check_headers(jsonb)'::regprocedure),"
        " $$WHEN '([a-z-]+)'$$, 'g'))[1] AS name")}
    assert in_sql == set(OWNED)
    for name, reason in OWNED.items():
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT mailroom._check_headers(%s)", [Jsonb({name.title(): "x"})])
        assert info.value.diag.message_primary == f'mailroom: headers: "{name.title()}" is set by mailroom ({reason})'


def test_from_under_two_names_is_refused_at_enqueue(conn):
    _refused(conn, ENQ, {"h": Jsonb({"From": "a@example.com", "FROM": "b@example.com"})},
             'mailroom: headers: "FROM" and "From" are the same header (header names are case-insensitive)')


@pytest.mark.parametrize("headers,problem", [
    ({"Bcc": "all@example.com"}, f'headers: "Bcc" is set by mailroom ({ONE_RECIPIENT})'),
    ({"cc": "all@example.com"}, f'headers: "cc" is set by mailroom ({ONE_RECIPIENT})'),
    ({"SUBJECT": "second"}, "headers: \"SUBJECT\" is set by mailroom (the subject is p_subject or the template's)"),
    ({"From": "a@example.com", "from": "b@example.com"},
     'headers: "From" and "from" are the same header (header names are case-insensitive)'),
])
def test_a_row_queued_with_an_owned_header_fails_instead_of_going_out_wrong(headers, problem):
    """Rows enqueued before the check exist: the runner fails that mail, saying why."""
    with pytest.raises(RenderError) as info:
        _build(headers=headers)
    assert str(info.value) == problem


# -- FROM is From -------------------------------------------------------------

def test_an_upper_case_from_header_is_the_from_header():
    """v0.3.0 looked for "From" and "from" only: "FROM" was dropped and --from used."""
    m = parse(_build(headers={"FROM": "Sales <sales@example.com>"}).data)
    assert m.get_all("From") == ["Sales <sales@example.com>"]
    assert m["From"].addresses[0].addr_spec == "sales@example.com"


# -- long words ---------------------------------------------------------------

@pytest.mark.parametrize("length", [70, 75, 200, 900, 980])
def test_a_token_of_70_to_998_characters_folds_without_a_leading_space(length):
    """v0.3.0 folded before such a token ("X-Token:\\r\\n aaa..."), which unfolds
    to the value with a leading space; it parses back exactly now, on lines
    of at most 998 (at most 76 where it became encoded-words)."""
    token = "a" * length
    list_id = f"<{token[:900]}.example.com>"  # a structured header: kept whole while its line fits 998
    built = _build(subject=token, headers={"X-Token": token, "List-Id": list_id})
    m = parse(built.data)
    assert (m["Subject"], m["X-Token"], m["List-Id"]) == (token, token, list_id)
    head = built.data.split(b"\r\n\r\n")[0]
    assert not re.search(rb"^(Subject|X-Token|List-Id):[ \t]*\r\n", head, re.M)
    assert max(map(len, _lines(built.data))) <= 998


def test_encoded_words_are_at_most_75_characters():
    """v0.3.0 (email.header at 78) wrote encoded-words of 76 characters; RFC 2047
    allows 75, and 76 for a line that holds one."""
    for subject in ("Ünïcödé subject " * 12, "ä" * 300, "a " * 50 + "é", "日本語" * 40):
        for name in ("X", "X-Mailroom-Note", "Subject"):
            built = _build(subject=subject, headers={"X-Note": subject} if name != "Subject" else {})
            head = built.data.split(b"\r\n\r\n")[0]
            for line in _lines(head):
                words = ENCODED_WORD.findall(line)
                if words:
                    assert max(map(len, words)) <= 75, line
                    assert len(line) <= 76, line
            m = parse(built.data)
            assert m["Subject"] == " ".join(subject.split())


# -- NUL in a body ------------------------------------------------------------

def test_a_nul_in_a_body_is_never_sent_as_7bit():
    """PostgreSQL text cannot hold NUL, but a template can make one: 7bit may
    not carry it (RFC 2045 2.7), so the part goes quoted-printable."""
    r = Renderer("shop@example.com")
    r.load([{"key": "nul", "updated_at": 1, "subject": "s", "body_text": 'a{{ "\\x00" }}b', "body_html": None}])
    built = r.build({**ROW, "template_key": "nul", "template_vars": {}})
    assert b"\0" not in built.data
    assert b"Content-Transfer-Encoding: quoted-printable\r\n" in built.data
    assert parse(built.data).get_content().replace("\r\n", "\n") == "a\0b\n"


# -- long lines delivered -----------------------------------------------------

def test_a_1200_character_subject_and_a_long_list_unsubscribe_url_are_delivered(db_url, conn):
    """v0.3.0 wrote each on one line of over 1,000 octets: the SMTP server
    answered "500 Line too long" and the mail failed for good."""
    url = "https://example.com/unsubscribe?token=" + "t0K3n" * 240
    enqueue(conn, "ann@example.com", subject="x" * 1200, body_text="b", delivery_key="long-subject")
    enqueue(conn, "bob@example.com", subject="Newsletter", body_text="b", delivery_key="long-unsubscribe",
            headers={"List-Unsubscribe": f"<{url}>, <mailto:unsubscribe@example.com>",
                     "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"})
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), *FAST) as r:
        assert r.wait() == 0, r.log()
        got = {m["message_id"]: m["data"] for m in sink.messages}
    rows = conn.execute("SELECT delivery_key, status, last_error FROM mailroom.messages ORDER BY 1").fetchall()
    assert [(row["delivery_key"], row["status"]) for row in rows] == [("long-subject", "sent"),
                                                                      ("long-unsubscribe", "sent")], rows
    subject_mail = got[runners_message_id(conn, "long-subject")]
    assert parse(subject_mail)["Subject"] == "x" * 1200
    list_mail = got[runners_message_id(conn, "long-unsubscribe")]
    assert max(map(len, _lines(subject_mail + list_mail))) <= 998
    # RFC 2369 2: whitespace inside the angle brackets (the folds) is ignored.
    unsubscribe = parse(list_mail)["List-Unsubscribe"]
    assert re.sub(r"\s+", "", unsubscribe) == f"<{url}>,<mailto:unsubscribe@example.com>"
    assert parse(list_mail)["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
