"""Hostile input against every public function of schema mailroom (issue 8).

Each case is one call with a hostile argument and one of two expectations:

- refused: a SQLSTATE and a message that names the field (`mailroom: <field>: ...`),
  and every mailroom table unchanged (row counts and content, see `snapshot`);
- accepted and handled safely: stored verbatim, matched literally, delivered
  correctly; its check says what "safely" means for that case.

Cases that show a bug in a function this suite does not own are written with
the behaviour they SHOULD have and marked `xfail(strict=True)` with the fix in
the reason: the suite stays green, and turns red the day the fix lands so the
mark is removed.

`pytest -k hostile` runs this file and tests/test_hostile_properties.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable

import psycopg
import pytest
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types.json import Jsonb

from mailroom.dev.sink import Sink
from tests.conftest import connect
from tests.runnerkit import RunnerProcess, enqueue, parse, runners_message_id, statuses

# Every table a public function writes (mail: contents, queue and the ledger
# attempts; messages is their read-only view); time_zones is read-only.
TABLES = ("contents", "queue", "attempts", "templates", "suppressions", "schedules", "campaigns",
          "cache", "rate_limits", "settings", "senders", "domain_limits")


def snapshot(conn) -> dict[str, tuple[int, str]]:
    """Row count and a digest of the content of every mailroom table."""
    out = {}
    for t in TABLES:
        row = conn.execute(
            f"SELECT count(*)::int AS n, md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) AS h"
            f" FROM mailroom.{t} x").fetchone()
        out[t] = (row["n"], row["h"])
    return out


def seed(conn) -> dict:
    """A small world every case can aim at: a template, queued and leased mail,
    a schedule, a campaign, a suppression, cache entries."""
    conn.execute("SELECT mailroom.upsert_template('welcome', 'Welcome {{ name }}', 'Hello {{ name }}')")
    queued = enqueue(conn, "ann@example.com", subject="Hi", body_text="Body", delivery_key="seed-queued")
    enqueue(conn, "bob@example.com", subject="Hi", body_text="Body", delivery_key="seed-leased", priority=50)
    claimed = conn.execute("SELECT id, lease_token FROM mailroom.claim_batch('seed-worker', 1)").fetchone()
    conn.execute("SELECT mailroom.schedule_upsert('seed-schedule', 'cy@example.com', '0 8 * * 1', 'Europe/Berlin',"
                 " 'welcome', '{\"name\": \"Cy\"}')")
    campaign = conn.execute(
        "SELECT mailroom.enqueue_campaign('seed campaign', 'welcome',"
        " $q$SELECT 'r1' AS recipient_id, 'dee@example.com' AS email$q$) AS id").fetchone()["id"]
    conn.execute("SELECT mailroom.suppress('blocked@example.com', 'unsubscribed')")
    for key in ("courses:list:1", "courses:list:2", "courses%x", "courses_x", "coursesXlist", "other"):
        conn.execute("SELECT mailroom.cache_set(%s, '1')", [key])
    return {"queued": queued, "leased": claimed["id"], "token": str(claimed["lease_token"]),
            "campaign": campaign}


# ---------------------------------------------------------------------------
# The matrix


@dataclass
class Case:
    id: str
    sql: str                       # str.format(**seed) then psycopg params
    params: dict = field(default_factory=dict)
    sqlstate: str | None = None    # refused with this SQLSTATE ...
    message: str | None = None     # ... and a message matching this regex (from the start)
    check: Callable | None = None  # accepted: check(conn, ctx, rows)
    bug: str | None = None         # xfail(strict): the fix someone else owes
    role: str | None = None        # SET ROLE before the call


def refused(id, sql, sqlstate, message, bug=None, role=None, **params):
    return Case(id, sql, params, sqlstate=sqlstate, message=message, bug=bug, role=role)


def accepted(id, sql, check, **params):
    return Case(id, sql, params, check=check)


def stored(table: str, column: str, where: str, expected):
    """Check: exactly one row of table matches `where` and holds `expected` verbatim."""
    def check(conn, ctx, rows):
        got = conn.execute(f"SELECT {column} AS v FROM mailroom.{table} WHERE {where.format(**ctx)}").fetchall()
        assert [r["v"] for r in got] == [expected]
    return check


def _fail(got):
    pytest.fail(repr(got))


def returns(expected):
    def check(conn, ctx, rows):
        assert [list(r.values())[0] for r in rows] == [expected]
    return check


ENQ = "SELECT mailroom.enqueue(p_to => %(to)s, p_subject => %(subject)s, p_body_text => %(body)s"
CRLF = {"CR": "\r", "LF": "\n"}

CASES: list[Case] = []

# -- CR and LF in every text field ------------------------------------------
for tag, brk in CRLF.items():
    b = brk
    CASES += [
        refused(f"enqueue-to-{tag}", ENQ + ")", "22023", r"mailroom: to: contains CR or LF",
                to=f"ann@example.com{b}Bcc: all@example.com", subject="s", body="b"),
        refused(f"enqueue-subject-{tag}", ENQ + ")", "22023", r"mailroom: subject: contains CR or LF",
                to="ann@example.com", subject=f"Hi{b}Bcc: all@example.com", body="b"),
        accepted(f"enqueue-body_text-{tag}", ENQ + ", p_delivery_key => 'k-body') AS id",
                 stored("messages", "body_text", "delivery_key = 'k-body'", f"line 1{b}line 2{b}.{b}"),
                 to="ann@example.com", subject="s", body=f"line 1{b}line 2{b}.{b}"),
        accepted(f"enqueue-body_html-{tag}",
                 "SELECT mailroom.enqueue('ann@example.com', 's', NULL, %(html)s, p_delivery_key => 'k-html')",
                 stored("messages", "body_html", "delivery_key = 'k-html'", f"<p>a</p>{b}<p>b</p>"),
                 html=f"<p>a</p>{b}<p>b</p>"),
        refused(f"enqueue-header-value-{tag}", ENQ + ", p_headers => %(h)s)", "22023",
                r"mailroom: headers\.X-Tag: contains CR or LF", to="ann@example.com", subject="s", body="b",
                h=Jsonb({"X-Tag": f"a{b}Bcc: all@example.com"})),
        refused(f"enqueue-header-name-{tag}", ENQ + ", p_headers => %(h)s)", "22023",
                r"mailroom: headers: \"X-Tag.*\" is not a valid header field name", to="ann@example.com",
                subject="s", body="b", h=Jsonb({f"X-Tag{b}Bcc": "all@example.com"})),
        refused(f"enqueue-delivery_key-{tag}", ENQ + ", p_delivery_key => %(k)s)", "22023",
                r"mailroom: delivery_key: must be 1 to 255 characters without control characters",
                to="ann@example.com", subject="s", body="b", k=f"order-1{b}"),
        refused(f"enqueue-sender-{tag}", ENQ + ", p_sender => %(s)s)", "22023", r"mailroom: sender: ",
                to="ann@example.com", subject="s", body="b", s=f"billing{b}"),
        refused(f"enqueue-template-{tag}", "SELECT mailroom.enqueue('ann@example.com', p_template => %(t)s)",
                "22023", r"mailroom: template: no template named", t=f"welcome{b}"),
        refused(f"enqueue-on_ambiguous-{tag}", ENQ + ", p_on_ambiguous => %(o)s)", "22023",
                r"mailroom: on_ambiguous: must be retry or review", to="ann@example.com", subject="s",
                body="b", o=f"retry{b}"),
        refused(f"upsert_template-key-{tag}", "SELECT mailroom.upsert_template(%(k)s, 's', 'b')", "22023",
                r"mailroom: key: .* is not a template key", k=f"news{b}letter"),
        refused(f"upsert_template-subject-{tag}", "SELECT mailroom.upsert_template('news', %(s)s, 'b')",
                "22023", r"mailroom: subject: must be given and must not contain CR or LF",
                s=f"Hi {{{{ name }}}}{b}Bcc: all@example.com"),
        accepted(f"upsert_template-body-{tag}", "SELECT mailroom.upsert_template('news', 's', %(t)s, %(h)s)",
                 stored("templates", "body_text || '|' || body_html", "key = 'news'", f"a{b}b|<p>{b}</p>"),
                 t=f"a{b}b", h=f"<p>{b}</p>"),
        refused(f"schedule_upsert-key-{tag}",
                "SELECT mailroom.schedule_upsert(%(k)s, 'ann@example.com', '0 8 * * 1', 'UTC', 'welcome')",
                "22023", r"mailroom: key: a schedule key of 1 to 200 characters without control characters",
                k=f"digest{b}1"),
        refused(f"schedule_upsert-to-{tag}",
                "SELECT mailroom.schedule_upsert('digest-1', %(to)s, '0 8 * * 1', 'UTC', 'welcome')",
                "22023", r"mailroom: to: contains CR or LF", to=f"ann@example.com{b}"),
        refused(f"schedule_upsert-zone-{tag}",
                "SELECT mailroom.schedule_upsert('digest-1', 'ann@example.com', '0 8 * * 1', %(z)s, 'welcome')",
                "22023", r"mailroom: zone: \".*\" is not a known IANA time zone", z=f"Europe/Berlin{b}"),
        refused(f"schedule_upsert-channel-{tag}",
                "SELECT mailroom.schedule_upsert('digest-1', 'ann@example.com', '0 8 * * 1', 'UTC', 'welcome',"
                " p_channel => %(c)s)", "22023", r"mailroom: channel: ", c=f"email{b}"),
        refused(f"schedule_upsert-recipient_id-{tag}",
                "SELECT mailroom.schedule_upsert('digest-1', 'ann@example.com', '0 8 * * 1', 'UTC', 'welcome',"
                " p_recipient_id => %(r)s)", "22023",
                r"mailroom: recipient_id: must be NULL or 1 to 200 characters without control characters",
                r=f"user-1{b}"),
        refused(f"schedule_set_active-key-{tag}", "SELECT mailroom.schedule_set_active(%(k)s, false)", "22023",
                r"mailroom: key: no schedule named", k=f"seed-schedule{b}"),
        refused(f"suppress-address-{tag}", "SELECT mailroom.suppress(%(a)s)", "22023",
                r"mailroom: address: contains CR or LF", a=f"x@example.com{b}"),
        refused(f"suppress-reason-{tag}", "SELECT mailroom.suppress('x@example.com', %(r)s)", "22023",
                r"mailroom: reason: must be unsubscribed", r=f"manual{b}"),
        refused(f"suppress-source-{tag}", "SELECT mailroom.suppress('x@example.com', 'manual', %(s)s)", "22023",
                r"mailroom: source: at most 200 characters without control characters", s=f"crm{b}"),
        refused(f"unsuppress-address-{tag}", "SELECT mailroom.unsuppress(%(a)s)", "22023",
                r"mailroom: address: contains CR or LF", a=f"blocked@example.com{b}"),
        refused(f"enqueue_campaign-name-{tag}",
                "SELECT mailroom.enqueue_campaign(%(n)s, 'welcome', $q$SELECT 'r' AS recipient_id,"
                " 'e@example.com' AS email$q$)", "22023",
                r"mailroom: name: at most 200 characters without control characters", n=f"spring{b}sale"),
        refused(f"enqueue_campaign-time_zone-{tag}",
                "SELECT mailroom.enqueue_campaign('spring', 'welcome', $q$SELECT 'r' AS recipient_id,"
                " 'e@example.com' AS email$q$, p_window_start => '08:00', p_window_end => '20:00',"
                " p_time_zone => %(z)s)", "22023", r"mailroom: time_zone: ", z=f"UTC{b}"),
        accepted(f"enqueue_campaign-recipient-email-{tag}",
                 "SELECT mailroom.enqueue_campaign('spring', 'welcome', 'SELECT ''r'' AS recipient_id, '"
                 " || quote_literal(%(e)s) || ' AS email')",
                 stored("messages", "status || ':' || status_reason",
                        "recipient_id = 'r' AND campaign_id <> {campaign}", "cancelled:invalid_address"),
                 e=f"e@example.com{b}Bcc: all@example.com"),
        refused(f"next_occurrence-zone-{tag}", "SELECT mailroom.next_occurrence('0 8 * * *', %(z)s)", "22023",
                r"mailroom: zone: \".*\" is not a known IANA time zone", z=f"UTC{b}"),
        # cron fields are separated by any whitespace, as in a crontab line
        accepted(f"next_occurrence-rule-{tag}",
                 "SELECT mailroom.next_occurrence(%(r)s, 'UTC', '2026-01-01Z') AS t",
                 lambda conn, ctx, rows: str(rows[0]["t"]) == "2026-01-01 08:00:00+00:00" or
                 _fail(rows), r=f"0{b}8 * * *"),
        refused(f"next_window_opening-zone-{tag}",
                "SELECT mailroom.next_window_opening(%(z)s, '08:00', '20:00')", "22023",
                r"mailroom: zone: \".*\" is not a known IANA time zone", z=f"UTC{b}"),
        accepted(f"cache_set-key-{tag}", "SELECT mailroom.cache_set(%(k)s, '42')",
                 stored("cache", "value::text", f"key = 'a' || chr({ord(b)}) || 'b'", "42"), k=f"a{b}b"),
        accepted(f"cache_get-key-{tag}", "SELECT mailroom.cache_get(%(k)s) AS v", returns(None), k=f"other{b}"),
        accepted(f"cache_delete-key-{tag}", "SELECT mailroom.cache_delete(%(k)s) AS v", returns(False),
                 k=f"other{b}"),
        accepted(f"cache_delete_prefix-{tag}", "SELECT mailroom.cache_delete_prefix(%(k)s) AS v", returns(0),
                 k=f"courses{b}"),
        accepted(f"rate_limit-key-{tag}", "SELECT allowed FROM mailroom.rate_limit(%(k)s, 1, '1 minute')",
                 stored("rate_limits", "hits", f"key = 'login:' || chr({ord(b)})", 1),
                 k=f"login:{b}"),
        accepted(f"claim_batch-sender-{tag}", "SELECT * FROM mailroom.claim_batch('w', 10, p_sender => %(s)s)",
                 lambda conn, ctx, rows: rows == [] or _fail(rows), s=f"default{b}"),
        accepted(f"mark_outcome-detail-{tag}",
                 "SELECT mailroom.mark_outcome({leased}, '{token}', 'sent', %(d)s, 250, '2.0.0', %(p)s) AS v",
                 stored("attempts", "smtp_text || '|' || provider_id", "message_id = {leased}",
                        f"queued{b}as 1|id{b}2"), d=f"queued{b}as 1", p=f"id{b}2"),
        refused(f"mark_outcome-outcome-{tag}",
                "SELECT mailroom.mark_outcome({leased}, '{token}', %(o)s)", "22023",
                r"mailroom: outcome: unknown outcome", o=f"sent{b}"),
        refused(f"resolve_review-decision-{tag}", "SELECT mailroom.resolve_review({queued}, %(d)s)", "22023",
                r"mailroom: decision: must be sent, retry or cancel", d=f"sent{b}"),
        accepted(f"inspect-ref-{tag}", "SELECT mailroom.inspect(%(r)s) AS v", returns(None), r=f"seed-queued{b}"),
        refused(f"set_setting-key-{tag}", "SELECT mailroom.set_setting(%(k)s, '1')", "22023",
                r"mailroom: key: no setting named", k=f"max_body_bytes{b}"),
    ]

# -- NUL: PostgreSQL text cannot hold it, so no function ever sees one --------
NUL_FIELDS = [
    ("enqueue-to", "SELECT mailroom.enqueue(%(v)s, 's', 'b')"),
    ("enqueue-subject", "SELECT mailroom.enqueue('ann@example.com', %(v)s, 'b')"),
    ("enqueue-body_text", "SELECT mailroom.enqueue('ann@example.com', 's', %(v)s)"),
    ("upsert_template-body", "SELECT mailroom.upsert_template('news', 's', %(v)s)"),
    ("schedule_upsert-rule", "SELECT mailroom.schedule_upsert('d', 'ann@example.com', %(v)s, 'UTC', 'welcome')"),
    ("suppress-address", "SELECT mailroom.suppress(%(v)s)"),
    ("cache_set-key", "SELECT mailroom.cache_set(%(v)s, '1')"),
    ("cache_delete_prefix", "SELECT mailroom.cache_delete_prefix(%(v)s)"),
    ("rate_limit-key", "SELECT mailroom.rate_limit(%(v)s, 1, '1 minute')"),
    ("next_occurrence-zone", "SELECT mailroom.next_occurrence('0 8 * * *', %(v)s)"),
]
for name, sql in NUL_FIELDS:
    # chr(0) on the server: 54000; a NUL escaped in JSON: 22P05 (jsonb has no NUL either).
    CASES.append(refused(f"{name}-NUL", sql.replace("%(v)s", "(%(v)s || chr(0))"), "54000",
                         r"null character not permitted", v="x@example.com"))
CASES.append(refused("enqueue-header-NUL-json", ENQ + ", p_headers => %(h)s::jsonb)", "22P05",
                     r"unsupported Unicode escape sequence", to="ann@example.com", subject="s", body="b",
                     h='{"X-Tag": "a\\u0000b"}'))
CASES.append(refused("cache_set-value-NUL-json", "SELECT mailroom.cache_set('k', %(v)s::jsonb)", "22P05",
                     r"unsupported Unicode escape sequence", v='{"a": "\\u0000"}'))

# -- header injection beyond CR/LF -------------------------------------------
CASES += [
    refused("enqueue-subject-vertical-tab", ENQ + ")", "22023", r"mailroom: subject: contains a control character",
            to="ann@example.com", subject="Hi\x0bBcc: x", body="b"),
    refused("enqueue-subject-unicode-line-separator", ENQ + ")", "22023",
            r"mailroom: subject: contains a control character", to="ann@example.com",
            subject="Hi\u2028Bcc: x@example.com", body="b"),
    refused("enqueue-header-value-NEL", ENQ + ", p_headers => %(h)s)", "22023",
            r"mailroom: headers\.X-Tag: contains a control character", to="ann@example.com", subject="s",
            body="b", h=Jsonb({"X-Tag": "a\u0085Bcc: x@example.com"})),
    refused("enqueue-header-name-colon", ENQ + ", p_headers => %(h)s)", "22023",
            r"mailroom: headers: \"Bcc: x@example.com\" is not a valid header field name",
            to="ann@example.com", subject="s", body="b", h=Jsonb({"Bcc: x@example.com": "v"})),
    refused("enqueue-header-name-To", ENQ + ", p_headers => %(h)s)", "22023",
            r"mailroom: headers: \"tO\" is set by mailroom \(the recipient is p_to\)", to="ann@example.com", subject="s",
            body="b", h=Jsonb({"tO": "x@example.com"})),
    refused("upsert_template-subject-control", "SELECT mailroom.upsert_template('news', %(s)s, 'b')", "22023",
            r"mailroom: subject: contains a control character", s="Hi\x1b[31m"),
]
# One mail, one recipient: a Bcc or Cc in the headers reached no envelope and
# showed every To recipient the list; a second Subject or a From under two
# names left the runner to guess (issue 14).
CASES += [
    refused(f"enqueue-header-{tag}", ENQ + ", p_headers => %(h)s)", "22023", message,
            to="ann@example.com", subject="s", body="b", h=Jsonb(headers))
    for tag, headers, message in [
        ("Bcc", {"Bcc": "all@example.com"}, r'mailroom: headers: "Bcc" is set by mailroom \(one mail, one recipient: '),
        ("cC", {"cC": "all@example.com"}, r'mailroom: headers: "cC" is set by mailroom \(one mail, one recipient: '),
        ("Subject-twice", {"Subject": "free money"}, r'mailroom: headers: "Subject" is set by mailroom'),
        ("From-twice", {"from": "a@example.com", "From": "b@example.com"},
         r'mailroom: headers: "From" and "from" are the same header'),
    ]
] + [
    refused("enqueue_campaign-header-Bcc",
            "SELECT mailroom.enqueue_campaign('spring', 'welcome', $q$SELECT 'r' AS recipient_id,"
            " 'a@example.com' AS email$q$, p_headers => %(h)s)", "22023",
            r'mailroom: headers: "BCC" is set by mailroom \(one mail, one recipient: ', h=Jsonb({"BCC": "all@example.com"})),
]

# -- addresses -----------------------------------------------------------------
ADDR = "SELECT mailroom.enqueue(%(to)s, 's', 'b', p_delivery_key => 'k-addr') AS id"
CASES += [
    refused("address-quoted-local-part", ADDR, "22023", r"mailroom: to: \".*\" has an invalid local part",
            to='"ann.lee"@example.com'),
    refused("address-quoted-local-part-with-space", ADDR, "22023",
            r"mailroom: to: contains whitespace or a control character", to='"ann lee"@example.com'),
    refused("address-quoted-local-part-with-at", ADDR, "22023", r"mailroom: to: \".*\" has more than one @",
            to='"a@b"@example.com'),
    accepted("address-idn-unicode", ADDR, stored("messages", "to_address || '|' || to_domain",
                                                 "delivery_key = 'k-addr'", "user@xn--nicode-2ya.de|xn--nicode-2ya.de"),
             to="user@ünicode.de"),
    accepted("address-idn-punycode", ADDR, stored("messages", "to_address", "delivery_key = 'k-addr'",
                                                  "user@xn--nicode-2ya.de"), to="user@xn--nicode-2ya.de"),
    accepted("address-idn-uppercase-domain", ADDR, stored("messages", "to_domain", "delivery_key = 'k-addr'",
                                                          "xn--nicode-2ya.de"), to="user@ÜNICODE.DE"),
    refused("address-trailing-dot", ADDR, "22023", r"mailroom: to: \".*\" has an invalid domain",
            to="ann@example.com."),
    refused("address-trailing-dot-local", ADDR, "22023", r"mailroom: to: \".*\" has an invalid local part",
            to="ann.@example.com"),
    refused("address-255-characters", ADDR, "22023", r"mailroom: to: longer than 254 characters",
            to="a" * 60 + "@" + ("b" * 60 + ".") * 3 + "c" * 11),
    accepted("address-254-characters", ADDR, stored("messages", "length(to_address)", "delivery_key = 'k-addr'",
                                                    254), to="a" * 60 + "@" + ("b" * 60 + ".") * 3 + "c" * 10),
    refused("address-over-254-bytes-in-utf8", ADDR, "22023", r"mailroom: to: longer than 254 bytes in UTF-8",
            to="a" * 60 + "@" + ("ü" * 40 + ".") * 3 + "de"),
    refused("address-local-part-over-64-bytes", ADDR, "22023",
            r"mailroom: to: local part longer than 64 bytes in UTF-8", to="ü" * 40 + "@example.com"),
    refused("address-zero-width-space", ADDR, "22023",
            r"mailroom: to: contains an invisible, format or private-use character \(U\+200B\)",
            to="ann@exam\u200bple.com"),
    refused("address-no-break-space", ADDR, "22023",
            r"mailroom: to: contains an invisible, format or private-use character \(U\+00A0\)",
            to="ann\u00a0lee@example.com"),
    refused("address-dotless-domain", ADDR, "22023", r"mailroom: to: \".*\" has no dot in its domain",
            to="root@localhost"),
    refused("address-ip-literal", ADDR, "22023", r"mailroom: to: \".*\" has an invalid domain",
            to="ann@[192.0.2.1]"),
    refused("address-numeric-tld", ADDR, "22023",
            r"mailroom: to: \".*\" has a top-level domain that does not end in a letter",
            to="ann@192.0.2.1"),
    refused("address-reserved-label", ADDR, "22023", r"mailroom: to: \".*\" has a domain label with \"--\"",
            to="ann@ab--cd.example.com"),
    accepted("address-xn-label", ADDR, stored("messages", "to_domain", "delivery_key = 'k-addr'", "xn--p1ai.xn--p1ai"),
             to="ann@XN--P1AI.xn--p1ai"),
    refused("address-digit-ending-tld", ADDR, "22023",
            r"mailroom: to: \".*\" has a top-level domain that does not end in a letter", to="ann@example.com1"),
    refused("address-display-name", ADDR, "22023",
            r"mailroom: to: display names and angle brackets are not accepted \(\"Ann <ann@example.com>\"\):"
            r" pass the bare address, ann@example.com", to="Ann <ann@example.com>"),
    refused("address-angle-only", ADDR, "22023",
            r"mailroom: to: display names and angle brackets are not accepted .*: pass the bare address, ann@example.com",
            to="<ann@example.com>"),
    refused("address-comma-list", ADDR, "22023", r"mailroom: to: \".*\" has more than one @",
            to="ann@example.com,eve@example.com"),
    Case("enqueue_campaign-recipients-checked-like-enqueue",
         "SELECT mailroom.enqueue_campaign('spring', 'welcome', $q$SELECT v.* FROM (VALUES"
         " ('r1', 'root@localhost'), ('r2', E'ann@exam\\u200Bple.com'), ('r3', 'ann@192.0.2.1'),"
         " ('r4', repeat('ü', 40) || '@example.com')) AS v(recipient_id, email)$q$)",
         check=lambda conn, ctx, rows: _campaign_reasons(conn) == ["invalid_address"] * 4 or _fail(_campaign_reasons(conn))),
    refused("suppress-address-dotless", "SELECT mailroom.suppress(%(a)s)", "22023",
            r"mailroom: address: \".*\" has no dot in its domain", a="root@localhost"),
    accepted("suppress-idn-then-enqueue",
             "SELECT mailroom.suppress('user@ÜNICODE.de'), mailroom.enqueue('user@ünicode.DE', 's', 'b',"
             " p_delivery_key => 'k-addr')",
             stored("messages", "status || ':' || status_reason", "delivery_key = 'k-addr'", "cancelled:suppressed")),
]

# -- giant bodies and headers ----------------------------------------------------
MB = 1024 * 1024
CASES += [
    refused("enqueue-body-over-max_body_bytes", ENQ + ")", "22023",
            r"mailroom: body_text: 1048577 bytes is over the maximum of 1048576 bytes",
            to="ann@example.com", subject="s", body="x" * (MB + 1)),
    refused("enqueue-html-over-max_body_bytes-multibyte",
            "SELECT mailroom.enqueue('ann@example.com', 's', NULL, %(h)s)", "22023",
            r"mailroom: body_html: 1048578 bytes is over the maximum", h="ü" * (MB // 2 + 1)),
    accepted("enqueue-body-at-max_body_bytes", ENQ + ", p_delivery_key => 'k-big')",
             stored("messages", "octet_length(body_text)", "delivery_key = 'k-big'", MB),
             to="ann@example.com", subject="s", body="x" * MB),
    refused("enqueue-header-value-1MB", ENQ + ", p_headers => %(h)s)", "22023",
            r"mailroom: headers: \d+ bytes in all is over the maximum of 65536 bytes",
            to="ann@example.com", subject="s", body="b", h=Jsonb({"X-Big": "y" * MB})),
    refused("enqueue-subject-1MB", ENQ + ")", "22023",
            r"mailroom: subject: 1048576 bytes is over the maximum of 65536 bytes for a header",
            to="ann@example.com", subject="y" * MB, body="b"),
    refused("enqueue-header-many-names", ENQ + ", p_headers => %(h)s)", "22023",
            r"mailroom: headers: \d+ bytes in all is over the maximum",
            to="ann@example.com", subject="s", body="b", h=Jsonb({f"X-H{i}": "v" * 20 for i in range(3000)})),
    refused("upsert_template-body-over-max_body_bytes", "SELECT mailroom.upsert_template('news', 's', %(b)s)",
            "22023", r"mailroom: body_text: 3145728 bytes is over the maximum of 1048576 bytes", b="x" * 3 * MB),
    refused("cache_set-key-over-1000-bytes", "SELECT mailroom.cache_set(%(k)s, '1')", "22023",
            r"mailroom: key: longer than 1000 bytes", k="k" * 1001),
    refused("rate_limit-key-over-1000-bytes", "SELECT mailroom.rate_limit(%(k)s, 1, '1 minute')", "22023",
            r"mailroom: key: longer than 1000 bytes", k="ü" * 501),
    refused("enqueue-delivery_key-256", ENQ + ", p_delivery_key => %(k)s)", "22023",
            r"mailroom: delivery_key: must be 1 to 255 characters", to="ann@example.com", subject="s",
            body="b", k="k" * 256),
]

# -- jsonb of the wrong shape ----------------------------------------------------
RESULT = {"id": 1, "token": "00000000-0000-0000-0000-000000000000", "outcome": "sent"}
CASES += [
    refused("enqueue-headers-array", ENQ + ", p_headers => %(h)s)", "22023", r"mailroom: headers: must be a JSON object",
            to="ann@example.com", subject="s", body="b", h=Jsonb([["X-Tag", "a"]])),
    refused("enqueue-headers-string", ENQ + ", p_headers => %(h)s)", "22023", r"mailroom: headers: must be a JSON object",
            to="ann@example.com", subject="s", body="b", h=Jsonb("X-Tag: a")),
    refused("enqueue-header-value-object", ENQ + ", p_headers => %(h)s)", "22023",
            r"mailroom: headers\.X-Tag: value must be a string, got object", to="ann@example.com",
            subject="s", body="b", h=Jsonb({"X-Tag": {"nested": "a"}})),
    refused("enqueue-header-value-null", ENQ + ", p_headers => %(h)s)", "22023",
            r"mailroom: headers\.X-Tag: value must be a string, got null", to="ann@example.com",
            subject="s", body="b", h=Jsonb({"X-Tag": None})),
    refused("enqueue-vars-array", "SELECT mailroom.enqueue('ann@example.com', p_template => 'welcome', p_vars => %(v)s)",
            "22023", r"mailroom: vars: must be a JSON object", v=Jsonb(["name", "Ann"])),
    refused("enqueue-vars-scalar", "SELECT mailroom.enqueue('ann@example.com', p_template => 'welcome', p_vars => %(v)s)",
            "22023", r"mailroom: vars: must be a JSON object", v=Jsonb(42)),
    refused("schedule_upsert-vars-array",
            "SELECT mailroom.schedule_upsert('d', 'ann@example.com', '0 8 * * *', 'UTC', 'welcome', %(v)s)",
            "22023", r"mailroom: vars: must be a JSON object", v=Jsonb([1, 2])),
    refused("enqueue_campaign-vars-string",
            "SELECT mailroom.enqueue_campaign('spring', 'welcome', $q$SELECT 'r' AS recipient_id,"
            " 'e@example.com' AS email$q$, p_vars => %(v)s)", "22023", r"mailroom: vars: must be a JSON object",
            v=Jsonb("name")),
    refused("enqueue_campaign-recipient-vars-array",
            "SELECT mailroom.enqueue_campaign('spring', 'welcome', $q$SELECT 'r' AS recipient_id,"
            " 'e@example.com' AS email, '[1]'::jsonb AS vars$q$)", "22023",
            r"mailroom: recipients: vars of recipient \"r\" must be a JSON object"),
    refused("mark_outcomes-object", "SELECT mailroom.mark_outcomes(%(r)s)", "22023",
            r"mailroom: results: must be a JSON array of outcome objects", r=Jsonb(RESULT)),
    refused("mark_outcomes-scalar-element", "SELECT mailroom.mark_outcomes(%(r)s)", "22023",
            r"mailroom: results\[1\]: must be an object", r=Jsonb([RESULT, 7])),
    refused("mark_outcomes-nested-array", "SELECT mailroom.mark_outcomes(%(r)s)", "22023",
            r"mailroom: results\[0\]: must be an object", r=Jsonb([[RESULT]])),
    refused("mark_outcomes-id-string", "SELECT mailroom.mark_outcomes(%(r)s)", "22023",
            r"mailroom: results\[0\]\.id: must be a positive integer", r=Jsonb([{**RESULT, "id": "1"}])),
    refused("mark_outcomes-id-huge", "SELECT mailroom.mark_outcomes(%(r)s::jsonb)", "22023",
            r"mailroom: results\[0\]\.id: must be a positive integer",
            r='[{"id": 1e300, "token": "00000000-0000-0000-0000-000000000000", "outcome": "sent"}]'),
    refused("mark_outcomes-token-object", "SELECT mailroom.mark_outcomes(%(r)s)", "22023",
            r"mailroom: results\[0\]\.token: must be a UUID string", r=Jsonb([{**RESULT, "token": {"a": 1}}])),
    refused("mark_outcomes-detail-object", "SELECT mailroom.mark_outcomes(%(r)s)", "22023",
            r"mailroom: results\[0\]\.detail: must be a string", r=Jsonb([{**RESULT, "detail": {"a": 1}}])),
    refused("mark_outcomes-smtp_code-string", "SELECT mailroom.mark_outcomes(%(r)s)", "22023",
            r"mailroom: results\[0\]\.smtp_code: must be a number from 200 to 599",
            r=Jsonb([{**RESULT, "smtp_code": "250; DROP"}])),
    refused("mark_outcomes-duplicate-id", "SELECT mailroom.mark_outcomes(%(r)s)", "22023",
            r"mailroom: results: id 1 appears more than once", r=Jsonb([RESULT, RESULT])),
    refused("mark_outcomes-bad-element-after-50000", "SELECT mailroom.mark_outcomes(%(r)s)", "22023",
            r"mailroom: results\[50000\]\.outcome: unknown outcome",
            r=Jsonb([{**RESULT, "id": i + 1} for i in range(50000)] + [{**RESULT, "id": 10**9, "outcome": "x"}])),
    accepted("mark_outcomes-50000-unknown-ids", "SELECT mailroom.mark_outcomes(%(r)s) AS v", returns(0),
             r=Jsonb([{**RESULT, "id": 10**6 + i} for i in range(50000)])),
    refused("cache_set-value-null", "SELECT mailroom.cache_set('k', NULL)", "22023", r"mailroom: value: must not be null"),
    accepted("cache_set-value-deep-nesting", "SELECT mailroom.cache_set('deep', %(v)s::jsonb)",
             stored("cache", "jsonb_typeof(value)", "key = 'deep'", "array"), v="[" * 5000 + "]" * 5000),
]

# -- invalid UTF-8 (server side; the psycopg dumper path is its own test) -------
for name, sql in [("enqueue-to", "SELECT mailroom.enqueue(convert_from(%(b)s, 'UTF8'), 's', 'b')"),
                  ("enqueue-subject", "SELECT mailroom.enqueue('ann@example.com', convert_from(%(b)s, 'UTF8'), 'b')"),
                  ("cache_set-key", "SELECT mailroom.cache_set(convert_from(%(b)s, 'UTF8'), '1')")]:
    CASES.append(refused(f"{name}-invalid-utf8-convert_from", sql, "22021",
                         r"invalid byte sequence for encoding \"UTF8\": 0xff", b=b"ann\xff@example.com"))
CASES.append(refused("cache_set-value-lone-surrogate-json", "SELECT mailroom.cache_set('k', %(v)s::jsonb)", "22P02",
                     r"invalid input syntax for type json", v='"\\udc80"'))

# -- negative and huge limits -----------------------------------------------------
CASES += [
    refused("claim_batch-limit-negative", "SELECT * FROM mailroom.claim_batch('w', -1)", "22023",
            r"mailroom: limit: must be between 1 and 10000, got -1"),
    refused("claim_batch-limit-huge", "SELECT * FROM mailroom.claim_batch('w', 2147483647)", "22023",
            r"mailroom: limit: must be between 1 and 10000, got 2147483647"),
    refused("claim_batch-lease-negative", "SELECT * FROM mailroom.claim_batch('w', 1, '-5 minutes')", "22023",
            r"mailroom: lease: must be more than 0 and at most 1 day"),
    refused("claim_batch-lease-huge", "SELECT * FROM mailroom.claim_batch('w', 1, '100000000 years')", "22023",
            r"mailroom: lease: must be more than 0 and at most 1 day"),
    refused("claim_batch-worker-huge", "SELECT * FROM mailroom.claim_batch(repeat('w', 201), 1)", "22023",
            r"mailroom: worker: must be 1 to 200 characters"),
    refused("extend_lease-negative", "SELECT mailroom.extend_lease(ARRAY[{leased}]::bigint[], '{token}', '-1 hour')",
            "22023", r"mailroom: lease: must be more than 0 and at most 1 day"),
    refused("extend_lease-huge", "SELECT mailroom.extend_lease(ARRAY[{leased}]::bigint[], '{token}', '1000 years')",
            "22023", r"mailroom: lease: must be more than 0 and at most 1 day"),
    refused("reclaim-limit-negative", "SELECT mailroom.reclaim(-1)", "22023",
            r"mailroom: limit: must be between 1 and 1000000"),
    refused("materialize_schedules-limit-huge", "SELECT mailroom.materialize_schedules(2147483647)", "22023",
            r"mailroom: limit: must be between 1 and 1000000"),
    refused("prune-older_than-negative", "SELECT mailroom.prune('-1 day')", "22023",
            r"mailroom: older_than: must be at least 1 day"),
    refused("prune-older_than-huge", "SELECT mailroom.prune('1000000 years')", "22023",
            r"mailroom: older_than: must be at most 100 years, got 1000000 years"),
    refused("prune-batch-setting-zero", "SELECT mailroom.set_setting('prune_batch_size', '0'), mailroom.prune()",
            "22023", r"mailroom: prune_batch_size: must be between 1 and 1000000"),
    refused("cache_sweep-negative", "SELECT mailroom.cache_sweep(-1)", "22023",
            r"mailroom: max_entries: must not be negative"),
    refused("cache_set-ttl-negative", "SELECT mailroom.cache_set('k', '1', '-1 second')", "22023",
            r"mailroom: ttl: must be positive"),
    refused("cache_set-ttl-huge", "SELECT mailroom.cache_set('k', '1', '100000000 years')", "22023",
            r"mailroom: ttl: must be at most 100 years, or NULL for no expiry \(got 100000000 years\)"),
    refused("cache_get_or_lock-wait-negative", "SELECT * FROM mailroom.cache_get_or_lock('k', '-1 second')", "22023",
            r"mailroom: wait: must be zero or positive"),
    refused("rate_limit-limit-zero", "SELECT * FROM mailroom.rate_limit('k', 0, '1 minute')", "22023",
            r"mailroom: limit: must be at least 1"),
    refused("rate_limit-limit-negative", "SELECT * FROM mailroom.rate_limit_sliding('k', -5, '1 minute')", "22023",
            r"mailroom: limit: must be at least 1"),
    refused("rate_limit-window-negative", "SELECT * FROM mailroom.rate_limit('k', 5, '-1 minute')", "22023",
            r"mailroom: window: must be at least 1 millisecond"),
    refused("rate_limit-window-huge", "SELECT * FROM mailroom.rate_limit('k', 5, '1000000 years')", "22023",
            r"mailroom: window: must be at most 366 days \(got 1000000 years\)"),
    accepted("rate_limit-limit-max-int", "SELECT allowed, remaining FROM mailroom.rate_limit_sliding('k', 2147483647, '1 second')",
             lambda conn, ctx, rows: rows == [{"allowed": True, "remaining": 2147483646}] or _fail(rows)),
    refused("set_sender_limits-negative", "SELECT mailroom.set_sender_limits('default', -1)", "22023",
            r"mailroom: max_per_second: must be between 1 and 1000000"),
    refused("set_domain_limits-huge", "SELECT mailroom.set_domain_limits('example.com', NULL, 2147483647)", "22023",
            r"mailroom: max_per_minute: must be between 1 and 60000000"),
    refused("delivery_metrics-window-huge", "SELECT * FROM mailroom.delivery_metrics('1000 years')", "22023",
            r"mailroom: window: must be more than 0 and at most 366 days"),
    refused("retry-ids-too-many", "SELECT * FROM mailroom.retry(array(SELECT generate_series(1, 10001)::bigint))",
            "22023", r"mailroom: ids: at most 10000 ids per call"),
    refused("cancel-ids-with-null", "SELECT * FROM mailroom.cancel(ARRAY[{queued}, NULL]::bigint[])", "22023",
            r"mailroom: ids: must not contain NULL"),
    refused("enqueue-priority-huge", ENQ + ", p_priority => 2147483647)", "22023",
            r"mailroom: priority: must be between -100 and 100", to="ann@example.com", subject="s", body="b"),
    refused("enqueue-max_attempts-zero", ENQ + ", p_max_attempts => 0)", "22023",
            r"mailroom: max_attempts: must be between 1 and 100", to="ann@example.com", subject="s", body="b"),
    refused("set_setting-max_body_bytes-not-a-number", "SELECT mailroom.set_setting('max_body_bytes', 'lots')",
            "22023", r"mailroom: max_body_bytes: must be a whole number, got \"lots\""),
    refused("set_setting-backoff-not-an-interval", "SELECT mailroom.set_setting('retry_backoff_base', 'soon')",
            "22023", r"mailroom: retry_backoff_base: must be an interval such as '30 seconds', got \"soon\""),
]

# -- invalid zones and cron expressions ------------------------------------------
NEXT = "SELECT mailroom.next_occurrence(%(r)s, %(z)s, '2026-06-01Z')"
CASES += [
    refused("cron-minute-61", NEXT, "22023", r"mailroom: rule: minute: 61 is out of range 0-59", r="61 * * * *", z="UTC"),
    refused("cron-feb-31", NEXT, "22023", r"mailroom: rule: day-of-month \"31\" never occurs in month \"2\"",
            r="* * 31 2 *", z="UTC"),
    refused("cron-zone-mars", NEXT, "22023", r"mailroom: zone: \"Mars/Olympus\" is not a known IANA time zone",
            r="0 8 * * *", z="Mars/Olympus"),
    refused("cron-zone-empty", NEXT, "22023", r"mailroom: zone: must be an IANA time zone name, got nothing",
            r="0 8 * * *", z=""),
    refused("cron-zone-500", NEXT, "22023", r"mailroom: zone: \"x{500}\" is not a known IANA time zone",
            r="0 8 * * *", z="x" * 500),
    refused("cron-zone-posix-offset", NEXT, "22023", r"mailroom: zone: \"UTC\+3\" is not a known IANA time zone",
            r="0 8 * * *", z="UTC+3"),
    refused("cron-zone-case", NEXT, "22023", r"mailroom: zone: \"europe/berlin\" is not a known IANA time zone",
            r="0 8 * * *", z="europe/berlin"),
    refused("cron-empty", NEXT, "22023", r"mailroom: rule: must be a 5-field cron expression, got nothing",
            r="", z="UTC"),
    refused("cron-500-chars", NEXT, "22023", r"mailroom: rule: expected 5 fields", r="* " * 250, z="UTC"),
    refused("cron-2000-chars", NEXT, "22023", r"mailroom: rule: longer than 1000 characters",
            r="0," * 1000 + "0 * * * *", z="UTC"),
    refused("cron-6-fields", NEXT, "22023", r"mailroom: rule: expected 5 fields", r="0 0 8 * * *", z="UTC"),
    refused("cron-step-zero", NEXT, "22023", r"mailroom: rule: minute: step \"0\" must be a positive integer",
            r="*/0 * * * *", z="UTC"),
    refused("cron-range-backwards", NEXT, "22023", r"mailroom: rule: hour: range \"20-8\" runs backwards",
            r="0 20-8 * * *", z="UTC"),
    refused("cron-unknown-macro", NEXT, "22023", r"mailroom: rule: unknown macro \"@reboot\"", r="@reboot", z="UTC"),
    refused("cron-sql-looking", NEXT, "22023", r"mailroom: rule: ",
            r="0 8 * * 1; DROP TABLE mailroom.messages; --", z="UTC"),
    refused("cron-huge-number", NEXT, "22023", r"mailroom: rule: hour: \"99999999999\" is not a number",
            r="0 99999999999 * * *", z="UTC"),
    refused("next_occurrence-after-infinity", "SELECT mailroom.next_occurrence('0 8 * * *', 'UTC', 'infinity')",
            "22023", r"mailroom: after: must be an instant from 1900 to 8999"),
    refused("next_occurrence-after-year-294276",
            "SELECT mailroom.next_occurrence('0 8 * * *', 'UTC', '294276-12-31Z')", "22023",
            r"mailroom: after: must be an instant from 1900 to 8999"),
    refused("schedule_upsert-zone-mars",
            "SELECT mailroom.schedule_upsert('d', 'ann@example.com', '0 8 * * 1', 'Mars/Olympus', 'welcome')",
            "22023", r"mailroom: zone: \"Mars/Olympus\" is not a known IANA time zone"),
    refused("schedule_upsert-rule-61",
            "SELECT mailroom.schedule_upsert('seed-schedule', 'cy@example.com', '61 8 * * 1', 'Europe/Berlin', 'welcome')",
            "22023", r"mailroom: rule: minute: 61 is out of range 0-59"),
    refused("schedule_upsert-window-end-25h",
            "SELECT mailroom.schedule_upsert('d', 'ann@example.com', '0 8 * * 1', 'UTC', 'welcome',"
            " p_window_start => '08:00', p_window_end => %(e)s::time)", "22008",
            r"date/time field value out of range", e="25:00"),
    refused("enqueue_campaign-zone-mars",
            "SELECT mailroom.enqueue_campaign('spring', 'welcome', $q$SELECT 'r' AS recipient_id,"
            " 'e@example.com' AS email$q$, p_window_start => '08:00', p_window_end => '20:00',"
            " p_time_zone => 'Mars/Olympus')", "22023", r"mailroom: time_zone: \"Mars/Olympus\" is not a known"),
]

# -- SQL-looking strings in keys, prefixes and names ------------------------------
DROP = "'; DROP TABLE mailroom.messages; --"
CASES += [
    accepted("sql-delivery_key", ENQ + ", p_delivery_key => %(k)s) AS id",
             stored("messages", "subject", "delivery_key = $k${}$k$".format(DROP), "s"),
             to="ann@example.com", subject="s", body="b", k=DROP),
    accepted("sql-cache-key", "SELECT mailroom.cache_set(%(k)s, '\"v\"'), mailroom.cache_get(%(k)s) AS v",
             lambda conn, ctx, rows: rows[0]["v"] == "v" or _fail(rows), k=DROP),
    accepted("sql-rate-limit-key", "SELECT allowed FROM mailroom.rate_limit(%(k)s, 1, '1 minute')",
             returns(True), k=DROP),
    accepted("sql-schedule-key",
             "SELECT mailroom.schedule_upsert(%(k)s, 'ann@example.com', '0 8 * * 1', 'UTC', 'welcome')",
             stored("schedules", "to_address", "schedule_key = $k${}$k$".format(DROP), "ann@example.com"), k=DROP),
    accepted("sql-campaign-name",
             "SELECT mailroom.enqueue_campaign(%(n)s, 'welcome', $q$SELECT 'r' AS recipient_id,"
             " 'e@example.com' AS email$q$)",
             stored("campaigns", "name", "id <> {campaign}", DROP), n=DROP),
    accepted("sql-cancel-reason", "SELECT * FROM mailroom.cancel(ARRAY[{queued}]::bigint[], %(r)s)",
             stored("messages", "status_reason", "id = {queued}", DROP), r=DROP),
    accepted("sql-inspect-ref", "SELECT mailroom.inspect(%(r)s) AS v", returns(None), r=DROP),
    refused("sql-template-key", "SELECT mailroom.upsert_template(%(k)s, 's', 'b')", "22023",
            r"mailroom: key: .* is not a template key", k=DROP),
    refused("sql-sender", ENQ + ", p_sender => %(s)s)", "22023", r"mailroom: sender: ",
            to="ann@example.com", subject="s", body="b", s=DROP),
    refused("sql-address", ADDR, "22023", r"mailroom: to: contains whitespace", to="a@example.com" + DROP),
    refused("sql-set_setting-key", "SELECT mailroom.set_setting(%(k)s, '1')", "22023", r"mailroom: key: no setting named",
            k=DROP),
    refused("sql-campaign-recipients-as-app",
            "SELECT mailroom.enqueue_campaign('spring', 'welcome', %(q)s)", "42501",
            r"mailroom: recipients: the query does not run: must be owner of table contents", role="mailroom_app",
            q="SELECT 'r' AS recipient_id, 'e@example.com' AS email) AS q; DROP TABLE mailroom.contents;"
              " SELECT * FROM (SELECT 1"),
    refused("sql-campaign-recipients-reads-mailroom-as-app",
            "SELECT mailroom.enqueue_campaign('spring', 'welcome', %(q)s)", "42501",
            r"mailroom: recipients: the query does not run: permission denied for table", role="mailroom_app",
            q="SELECT id::text AS recipient_id, to_address AS email FROM mailroom.contents"),
    # LIKE metacharacters in a prefix match only themselves
    accepted("cache_delete_prefix-percent", "SELECT mailroom.cache_delete_prefix(%(p)s) AS v",
             lambda conn, ctx, rows: (rows[0]["v"] == 1 and _cache_keys(conn) == [
                 "courses:list:1", "courses:list:2", "coursesXlist", "courses_x", "other"]) or _fail(
                 (rows, _cache_keys(conn))), p="courses%"),
    accepted("cache_delete_prefix-only-percent", "SELECT mailroom.cache_delete_prefix(%(p)s) AS v", returns(0), p="%"),
    accepted("cache_delete_prefix-underscore", "SELECT mailroom.cache_delete_prefix(%(p)s) AS v",
             lambda conn, ctx, rows: (rows[0]["v"] == 1 and "coursesXlist" in _cache_keys(conn)) or _fail(rows),
             p="courses_"),
    accepted("cache_delete_prefix-backslash", "SELECT mailroom.cache_delete_prefix(%(p)s) AS v", returns(0),
             p="courses\\"),
    accepted("cache_delete_prefix-sql", "SELECT mailroom.cache_delete_prefix(%(p)s) AS v", returns(0), p=DROP),
    refused("cache_delete_prefix-empty", "SELECT mailroom.cache_delete_prefix('')", "22023",
            r"mailroom: prefix: must not be empty"),
    accepted("get_templates-sql", "SELECT count(*)::int AS v FROM mailroom.get_templates(ARRAY[%(k)s, '%%', 'w_lcome'])",
             returns(0), k=DROP),
    accepted("send_rate_retry_after-sql", "SELECT mailroom.send_rate_retry_after(%(s)s) AS v", returns(None), s=DROP),
]


def _campaign_reasons(conn) -> list[str]:
    return [r["status_reason"] for r in conn.execute(
        "SELECT status_reason FROM mailroom.messages m JOIN mailroom.campaigns c ON c.id = m.campaign_id"
        " WHERE c.name = 'spring' ORDER BY recipient_id")]


def _cache_keys(conn) -> list[str]:
    return [r["key"] for r in conn.execute("SELECT key FROM mailroom.cache ORDER BY key COLLATE \"C\"")]


def _param(case: Case):
    marks = [pytest.mark.xfail(strict=True, reason=case.bug)] if case.bug else []
    return pytest.param(case, id=case.id, marks=marks)


assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"


@pytest.fixture(scope="module")
def world(module_db_url):
    """One seeded database for the whole matrix; every case rolls back."""
    with connect(module_db_url) as c:
        ctx = seed(c)
        yield c, ctx


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_hostile(world, case: Case):
    conn, ctx = world
    sql = case.sql.format(**ctx)
    with conn.transaction(force_rollback=True):
        before = snapshot(conn)
        if case.role:
            conn.execute(f"SET ROLE {case.role}")
        if case.sqlstate:
            with pytest.raises(psycopg.Error) as info:
                with conn.transaction():
                    conn.execute(sql, case.params or None)
            err = info.value
            conn.execute("RESET ROLE")
            assert err.sqlstate == case.sqlstate, (err.sqlstate, str(err))
            assert re.match(case.message, err.diag.message_primary, re.S), err.diag.message_primary
            assert snapshot(conn) == before, "a refused call changed a table"
        else:
            cur = conn.execute(sql, case.params or None)
            rows = cur.fetchall() if cur.description else []
            conn.execute("RESET ROLE")
            case.check(conn, ctx, rows)


# ---------------------------------------------------------------------------
# Invalid UTF-8 straight from psycopg: bytes that are not UTF-8, sent as a
# text parameter. (psycopg itself refuses to encode a str with lone surrogates,
# so the bytes go through a dumper that passes them on unchanged.)


class RawText(bytes):
    """Bytes sent as a text parameter, unchanged."""


class RawTextDumper(Dumper):
    format = Format.TEXT
    oid = psycopg.adapters.types["text"].oid

    def dump(self, obj):
        return bytes(obj)


def test_hostile_str_with_lone_surrogate_never_leaves_psycopg(conn):
    before = snapshot(conn)
    with pytest.raises(UnicodeEncodeError):
        conn.execute("SELECT mailroom.enqueue(%s, 's', 'b')", ["ann\udcff@example.com"])
    assert snapshot(conn) == before


@pytest.mark.parametrize("field,sql", [
    ("to", "SELECT mailroom.enqueue(%s, 's', 'b')"),
    ("subject", "SELECT mailroom.enqueue('ann@example.com', %s, 'b')"),
    ("body_text", "SELECT mailroom.enqueue('ann@example.com', 's', %s)"),
    ("template-key", "SELECT mailroom.upsert_template(%s, 's', 'b')"),
    ("cache-key", "SELECT mailroom.cache_set(%s, '1')"),
    ("rate-limit-key", "SELECT mailroom.rate_limit(%s, 1, '1 minute')"),
    ("suppress", "SELECT mailroom.suppress(%s)"),
])
def test_hostile_invalid_utf8_bytes_refused_with_22021(conn, field, sql):
    seed(conn)
    conn.adapters.register_dumper(RawText, RawTextDumper)
    before = snapshot(conn)
    for raw in (b"ann\xff@example.com", b"\xc3\x28", b"\xed\xa0\x80x@example.com", b"a\xe2\x82"):
        with pytest.raises(psycopg.Error) as info:
            conn.execute(sql, [RawText(raw)])
        assert info.value.sqlstate == "22021", str(info.value)
        assert "invalid byte sequence for encoding \"UTF8\"" in info.value.diag.message_primary
    assert snapshot(conn) == before, "invalid UTF-8 wrote something"


def test_hostile_client_encoding_latin1_arrives_as_utf8(conn):
    """With client_encoding LATIN1, the server converts: 'ü' arrives as U+00FC,
    stored as valid UTF-8, not as the byte 0xFC."""
    conn.execute("SET client_encoding = 'LATIN1'")
    conn.execute("SELECT mailroom.enqueue('jürgen@bücher.example', 'Grüße', 'b', p_delivery_key => 'k-latin1')")
    conn.execute("SET client_encoding = 'UTF8'")
    row = conn.execute("SELECT to_address, subject, octet_length(subject) AS n FROM mailroom.messages"
                       " WHERE delivery_key = 'k-latin1'").fetchone()
    assert row == {"to_address": "jürgen@xn--bcher-kva.example", "subject": "Grüße", "n": 7}


# ---------------------------------------------------------------------------
# Through a real runner and SMTP sink: what a hostile value becomes on the wire

FAST = ("--poll-interval", "0.2", "--concurrency", "2", "--batch", "20")


def test_hostile_values_on_the_wire(db_url, conn):
    """Template variables cannot add header lines: the rendered subject is one
    line; bodies full of header-looking lines and lone dots stay body; a
    punycode domain is delivered as is."""
    conn.execute("SELECT mailroom.upsert_template('inj', 'Order {{ order }} for {{ name }}',"
                 " 'Hello {{ name }}', '<p>{{ name }}</p>')")
    evil = "Ann\r\nBcc: victim@evil.example\r\nX-Injected: yes\r\n\r\nfake body"
    enqueue(conn, "ann@example.com", template="inj", vars={"order": "42\nSubject: free money", "name": evil},
            delivery_key="inj-vars")
    enqueue(conn, "bob@xn--nicode-2ya.de", subject="Plain", body_text="Bcc: x@evil.example\r\n.\r\n..\r\nend",
            headers={"X-Tag": "tag\tvalue", "Reply-To": "help@example.com"}, delivery_key="inj-body")
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle", *FAST) as r:
        assert r.wait() == 0, r.log()
        got = {m["data"].split(b"Message-ID: ")[1].split(b"\r\n")[0].decode(): m for m in sink.messages}
    assert statuses(conn) == {"sent": 2}
    assert len(got) == 2

    m = got[runners_message_id(conn, "inj-vars")]
    assert m["rcpt_tos"] == ["ann@example.com"]
    mail = parse(m["data"])
    assert mail["Subject"] == ("Order 42 Subject: free money for Ann Bcc: victim@evil.example"
                               " X-Injected: yes fake body")
    assert mail["Bcc"] is None and mail["X-Injected"] is None
    assert mail.get_body(("plain",)).get_content().replace("\r\n", "\n") == "Hello " + evil.replace("\r\n", "\n") + "\n"
    assert "&lt;" not in mail.get_body(("html",)).get_content()  # nothing to escape, but still one body

    m = got[runners_message_id(conn, "inj-body")]
    assert m["rcpt_tos"] == ["bob@xn--nicode-2ya.de"]
    mail = parse(m["data"])
    assert mail["To"] == "bob@xn--nicode-2ya.de"
    assert mail["Bcc"] is None and mail["X-Tag"] == "tag\tvalue"
    assert mail.get_content().replace("\r\n", "\n") == "Bcc: x@evil.example\n.\n..\nend\n"


def test_hostile_idn_domain_delivered_as_punycode(db_url, conn):
    enqueue(conn, "user@ünicode.de", subject="IDN", body_text="b", delivery_key="idn-1")
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle", *FAST) as r:
        assert r.wait() == 0, r.log()
        rcpts = [m["rcpt_tos"] for m in sink.messages]
    row = conn.execute("SELECT status, last_error FROM mailroom.messages WHERE delivery_key = 'idn-1'").fetchone()
    assert row["status"] == "sent", row
    assert rcpts == [["user@xn--nicode-2ya.de"]]


def test_hostile_utf8_local_part_needs_smtputf8(db_url, conn):
    """enqueue accepts a non-ASCII local part. A relay without SMTPUTF8 cannot
    take it: that one mail fails at once, saying so; the rest flows. A relay
    with SMTPUTF8 gets it, domain as A-label, local part as UTF-8."""
    enqueue(conn, "jürgen@bücher.example", subject="UTF-8", body_text="b", delivery_key="utf8-1")
    enqueue(conn, "ann@example.com", subject="ASCII", body_text="b", delivery_key="ascii-1")
    with Sink(keep=True, smtputf8=False) as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle", *FAST) as r:
        assert r.wait() == 0, r.log()
        assert [m["rcpt_tos"] for m in sink.messages] == [["ann@example.com"]]
    rows = {row["delivery_key"]: row for row in conn.execute(
        "SELECT delivery_key, status, attempts, last_error FROM mailroom.messages")}
    assert rows["ascii-1"]["status"] == "sent"
    assert (rows["utf8-1"]["status"], rows["utf8-1"]["attempts"]) == ("failed", 1)
    assert rows["utf8-1"]["last_error"] == "mail: a non-ASCII local part needs SMTPUTF8, which the relay does not offer"

    enqueue(conn, "jürgen@bücher.example", subject="UTF-8", body_text="b", delivery_key="utf8-2")
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle", *FAST) as r:
        assert r.wait() == 0, r.log()
        assert [m["rcpt_tos"] for m in sink.messages] == [["jürgen@xn--bcher-kva.example"]]
        assert parse(sink.messages[0]["data"])["To"] == "jürgen@xn--bcher-kva.example"
    assert conn.execute("SELECT status FROM mailroom.messages WHERE delivery_key = 'utf8-2'").fetchone()["status"] == "sent"


def test_hostile_json_too_deep_for_python_fails_its_own_mail(db_url, conn):
    """jsonb nests deeper than Python's json can read (its recursion limit,
    about 1,000 levels): such template variables fail their own mail at
    build time, saying so; the rest of the same claim is sent and every
    outcome reported. (When the claim parsed the JSON, the RecursionError
    came out of the claim itself and stopped the runner.)"""
    deep = "[" * 5000 + "]" * 5000
    conn.execute("SELECT mailroom.upsert_template('deep', 'Hi {{ name }}', 'Hello {{ name }}', NULL)")
    enqueue(conn, "ann@example.com", template="deep", vars={"name": "Ann"}, delivery_key="deep-ok-1")
    conn.execute("SELECT mailroom.enqueue(p_to => 'bob@example.com', p_template => 'deep', p_vars => %s::jsonb,"
                 " p_delivery_key => 'deep-vars')", (f'{{"name": "Bob", "deep": {deep}}}',))
    enqueue(conn, "dan@example.com", template="deep", vars={"name": "Dan"}, delivery_key="deep-ok-2")
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle", *FAST) as r:
        assert r.wait() == 0, r.log()
        assert sorted(m["rcpt_tos"][0] for m in sink.messages) == ["ann@example.com", "dan@example.com"]
    rows = {row["delivery_key"]: row for row in conn.execute(
        "SELECT delivery_key, status, attempts, last_error FROM mailroom.messages")}
    assert {k: (v["status"], v["attempts"]) for k, v in rows.items()} == {
        "deep-ok-1": ("sent", 1), "deep-ok-2": ("sent", 1), "deep-vars": ("failed", 1)}
    assert rows["deep-vars"]["last_error"].startswith("render: template_vars: cannot be read (RecursionError"), rows
