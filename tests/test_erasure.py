"""Erasure (issue 30, item 5): mailroom.forget(address) removes a person's
address and what names them from every mailroom table, keeps only a keyed
hash, and that hash still stops new mail at enqueue, enqueue_campaign and
claim_batch's gate."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.conftest import connect
from tests.operatorkit import as_user, run
from tests.runnerkit import enqueue

PERSON = "Erin.Erased@Example.org"
OTHER = "otto@example.org"


def as_role(conn, role: str, sql: str, params=None):
    conn.execute(f"SET ROLE {role}")
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.execute("RESET ROLE")


def claim(conn, n: int = 50) -> list[dict]:
    return as_role(conn, "mailroom_runner", "SELECT id, lease_token FROM mailroom.claim_batch('w', %s)", (n,))


def forget(conn, address: str) -> dict[str, int]:
    rows = as_role(conn, "mailroom_operator", "SELECT part, rows FROM mailroom.forget(%s)", (address,))
    return {r["part"]: r["rows"] for r in rows}


def tables_naming(conn, needle: str) -> list[str]:
    """Every column of every mailroom table (text, varchar, jsonb, bytea, arrays
    of those: found in the catalog, so a future table is covered) whose value
    contains needle, ignoring case: 'table.column' for each."""
    columns = conn.execute(
        """
        SELECT c.relname AS tab, a.attname AS col, t.typname AS typ
        FROM pg_class c
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        JOIN pg_type t ON t.oid = a.atttypid
        WHERE c.relnamespace = 'mailroom'::regnamespace AND c.relkind IN ('r', 'p')
          AND t.typname IN ('text', 'varchar', 'bpchar', 'jsonb', 'json', 'bytea', '_text', 'name', 'citext')
        ORDER BY 1, 2
        """
    ).fetchall()
    assert len(columns) > 40, "the catalog query found too few columns to be searching anything"
    found = []
    for c in columns:
        value = f"encode(x.{c['col']}, 'escape')" if c["typ"] == "bytea" else f"x.{c['col']}::text"
        hit = conn.execute(
            f"SELECT EXISTS (SELECT FROM mailroom.{c['tab']} x WHERE strpos(lower({value}), lower(%s)) > 0) AS hit",
            (needle,),
        ).fetchone()["hit"]
        if hit:
            found.append(f"{c['tab']}.{c['col']}")
    return found


def integrity(conn) -> list[dict]:
    return conn.execute("SELECT * FROM mailroom.integrity_problems()").fetchall()


@pytest.fixture
def person_everywhere(conn) -> dict:
    """The person in every place mailroom keeps an address: sent mail with a
    relay answer quoting them, live mail, mail in review, a campaign (queued
    chunk and not), a schedule, suppressions, feedback, unparsed inbound
    mail, the cache. And someone else, who must stay."""
    conn.execute("SELECT mailroom.upsert_template('news', 'News for {{name}}', 'Hello {{name}}')")
    sent = enqueue(conn, PERSON, subject="Your order, Erin", body_text=f"Sent to {PERSON}",
                   delivery_key=f"order:{PERSON.lower()}", headers={"X-Customer": PERSON})
    [lease] = claim(conn, 1)
    as_role(conn, "mailroom_runner", "SELECT mailroom.mark_outcomes(%s)", (Jsonb([{
        "id": lease["id"], "token": str(lease["lease_token"]), "outcome": "sent", "smtp_code": 250,
        "detail": f"2.0.0 Ok: queued as 12345 <{PERSON}>"}]),))
    live = enqueue(conn, PERSON.lower(), subject="Reset", body_text="Your code", vars={"email": PERSON})
    kept = enqueue(conn, OTHER, subject="For Otto", body_text="Body")
    recipients = ("SELECT r::text AS recipient_id, r || '@example.org' AS email, jsonb_build_object('name', r) AS vars"
                  " FROM generate_series(1, 3) r"
                  f" UNION ALL SELECT 'erin', '{PERSON}', jsonb_build_object('name', 'Erin', 'email', '{PERSON}')")
    campaign = as_role(conn, "mailroom_app", "SELECT mailroom.enqueue_campaign('spring', 'news', %s) AS id",
                       (recipients,))[0]["id"]
    conn.execute(
        "INSERT INTO mailroom.schedules (schedule_key, recipient_id, to_address, time_zone, rule, template_key, vars)"
        " VALUES (%s, 'erin', %s, 'UTC', 'FREQ=DAILY', 'news', %s)",
        (f"digest:{PERSON}", PERSON, Jsonb({"name": "Erin"})))
    as_role(conn, "mailroom_operator", "SELECT mailroom.suppress(%s, 'manual')", (PERSON,))
    as_role(conn, "mailroom_feedback",
            "SELECT mailroom.record_feedback('complaint', NULL, %s, NULL, %s, 'test', %s)",
            (PERSON, f"abuse report about {PERSON}", f"arf:{PERSON}"))
    as_role(conn, "mailroom_feedback",
            "SELECT mailroom.record_feedback('delivered', %s, NULL, NULL, 'delivered', 'test', 'dlv-1')", (sent,))
    as_role(conn, "mailroom_feedback", "SELECT mailroom.keep_unparsed_inbound(%s, 'no match', %s, 'bounces@ours')",
            (f"From: {PERSON}\r\n\r\nplease stop".encode(), PERSON))
    as_role(conn, "mailroom_app", "SELECT mailroom.cache_set(%s, %s, interval '1 hour')",
            (f"profile:{PERSON.lower()}", Jsonb({"email": PERSON})))
    as_role(conn, "mailroom_app", "SELECT mailroom.cache_set('other', %s, interval '1 hour')", (Jsonb({"n": 1}),))
    assert {"contents.to_address", "suppressions.address", "schedules.to_address", "feedback_events.address",
            "inbound_unparsed.raw", "cache.value", "attempts.smtp_text"} <= set(tables_naming(conn, PERSON))
    return {"sent": sent, "live": live, "kept": kept, "campaign": campaign}


def test_forget_leaves_no_trace_and_keeps_the_counts(conn, person_everywhere):
    before = conn.execute(
        "SELECT (SELECT count(*) FROM mailroom.contents) AS contents, (SELECT count(*) FROM mailroom.attempts) AS attempts,"
        " (SELECT count(*) FROM mailroom.feedback_events) AS feedback,"
        " (SELECT mails FROM mailroom.campaign_mail_counts WHERE campaign_id = %s) AS campaign_mails",
        (person_everywhere["campaign"],)).fetchone()
    removed = forget(conn, PERSON)

    assert tables_naming(conn, PERSON) == []
    assert tables_naming(conn, "erin.erased") == []
    assert integrity(conn) == []
    assert removed["forgotten_addresses"] == 1
    assert removed["contents"] == 3  # the sent mail, the live one, the campaign's
    assert removed["cancelled"] == 2  # the live mail and the campaign's, not queued yet or queued
    assert removed["suppressions"] == 1 and removed["schedules"] == 1 and removed["cache"] == 1
    assert removed["inbound_unparsed"] == 1 and removed["feedback_events"] == 2 and removed["attempts"] >= 1
    assert removed["in_flight"] == 0

    after = conn.execute(
        "SELECT (SELECT count(*) FROM mailroom.contents) AS contents, (SELECT count(*) FROM mailroom.attempts) AS attempts,"
        " (SELECT count(*) FROM mailroom.feedback_events) AS feedback,"
        " (SELECT mails FROM mailroom.campaign_mail_counts WHERE campaign_id = %s) AS campaign_mails",
        (person_everywhere["campaign"],)).fetchone()
    assert after["contents"] == before["contents"] and after["feedback"] == before["feedback"]
    assert after["campaign_mails"] == before["campaign_mails"] == 4
    assert after["attempts"] == before["attempts"] + removed["cancelled"]  # one cancelled row each, nothing gone
    status = conn.execute("SELECT id, status, status_reason FROM mailroom.messages WHERE id = ANY (%s)",
                          ([person_everywhere["sent"], person_everywhere["live"], person_everywhere["kept"]],)).fetchall()
    assert {r["id"]: (r["status"], r["status_reason"]) for r in status} == {
        person_everywhere["sent"]: ("sent", None), person_everywhere["live"]: ("cancelled", "erased"),
        person_everywhere["kept"]: ("queued", None)}
    # Otto and the rest of the campaign are untouched.
    assert conn.execute("SELECT count(*) AS n FROM mailroom.contents WHERE to_address LIKE '%%@example.org'"
                        ).fetchone()["n"] == 4
    assert conn.execute("SELECT count(*) AS n FROM mailroom.cache").fetchone()["n"] == 1

    again = forget(conn, PERSON.upper())
    assert set(again.values()) == {0}, again
    assert integrity(conn) == []


def test_the_hash_still_stops_new_mail(conn, person_everywhere):
    forget(conn, PERSON)
    # enqueue: recorded cancelled, like a suppressed address, in any case of the local part.
    refused = enqueue(conn, PERSON.lower(), subject="Again", body_text="Body")
    assert conn.execute("SELECT status, status_reason FROM mailroom.messages WHERE id = %s",
                        (refused,)).fetchone() == {"status": "cancelled", "status_reason": "suppressed"}
    # enqueue_campaign: the forgotten recipient is never written.
    added = as_role(conn, "mailroom_app", "SELECT mailroom.enqueue_campaign('summer', 'news', %s) AS id",
                    (f"SELECT 'a' AS recipient_id, 'ann@example.org' AS email UNION ALL SELECT 'e', '{PERSON}'",))
    campaign = added[0]["id"]
    assert conn.execute("SELECT count(*) AS n, bool_and(to_address = 'ann@example.org') AS ann_only"
                        " FROM mailroom.contents WHERE campaign_id = %s", (campaign,)).fetchone() == {
        "n": 1, "ann_only": True}
    claimed = {r["id"] for r in claim(conn)}
    assert refused not in claimed
    assert integrity(conn) == []
    assert conn.execute("SELECT mailroom.is_forgotten(%s) AS f", (PERSON,)).fetchone()["f"] is True
    assert conn.execute("SELECT mailroom.is_forgotten(%s) AS f", (OTHER,)).fetchone()["f"] is False


def test_the_gate_refuses_mail_written_while_forget_ran(db_url, conn):
    """Mail an application wrote in a transaction forget could not see (it
    committed after forget's snapshot) is refused when a runner claims it.
    Fails on the claim_batch before forget (the mail was claimed)."""
    with connect(db_url) as app:
        app.execute("BEGIN")
        racing = enqueue(app, PERSON, subject="Hello", body_text="Body")
        assert forget(conn, PERSON)["contents"] == 0  # it cannot see the mail yet
        app.execute("COMMIT")
    assert claim(conn) == []
    assert conn.execute("SELECT status, status_reason FROM mailroom.messages WHERE id = %s",
                        (racing,)).fetchone() == {"status": "cancelled", "status_reason": "suppressed"}
    assert integrity(conn) == []
    # And forget again erases what that mail left.
    assert forget(conn, PERSON)["contents"] == 1
    assert tables_naming(conn, PERSON) == []


def test_mail_being_sent_is_reported_in_flight(conn):
    leased = enqueue(conn, PERSON, subject="Hello", body_text="Body")
    [lease] = claim(conn)
    removed = forget(conn, PERSON)
    assert removed["in_flight"] == 1 and removed["cancelled"] == 0 and removed["contents"] == 1
    # Its outcome still lands; then forget again erases the relay's answer.
    as_role(conn, "mailroom_runner", "SELECT mailroom.mark_outcomes(%s)", (Jsonb([{
        "id": leased, "token": str(lease["lease_token"]), "outcome": "sent", "smtp_code": 250,
        "detail": f"Ok <{PERSON}>"}]),))
    assert forget(conn, PERSON)["attempts"] == 1
    assert tables_naming(conn, PERSON) == []
    assert integrity(conn) == []


def test_unknown_address_is_fine_and_bad_input_is_refused(conn):
    assert forget(conn, "nobody@example.net")["forgotten_addresses"] == 1
    assert forget(conn, "nobody@example.net")["forgotten_addresses"] == 0
    for bad, says in [(None, "an email address is required"), ("", "an email address is required"),
                      ("no-at-sign", "not an email address"), ("Erin <erin@example.org>", "display names")]:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            forget(conn, bad)
        assert e.value.diag.message_primary.startswith("mailroom: address:") and says in str(e.value)
    # nobody's hash, and the placeholder erased content is addressed to (never mailed either)
    assert conn.execute("SELECT count(*) AS n FROM mailroom.forgotten_addresses").fetchone()["n"] == 2
    assert conn.execute("SELECT mailroom.is_forgotten('erased@erased.invalid') AS f").fetchone()["f"] is True


def test_only_operators_may_forget_and_nobody_reads_the_pepper(db_url, conn):
    for role in ("mailroom_app", "mailroom_runner", "mailroom_feedback", "mailroom_unsubscribe"):
        for sql in ("SELECT mailroom.forget('x@example.org')", "SELECT * FROM mailroom.erasure_pepper",
                    "SELECT * FROM mailroom.forgotten_addresses", "SELECT mailroom.is_forgotten('x@example.org')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                as_role(conn, role, sql)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        as_role(conn, "mailroom_operator", "SELECT * FROM mailroom.erasure_pepper")


def test_the_hash_is_hmac_sha256_under_the_pepper(conn):
    """The hash is the standard HMAC (so it can be reproduced and audited)."""
    pads = conn.execute("SELECT inner_pad, outer_pad FROM mailroom.erasure_pepper").fetchone()
    key = bytes(b ^ 0x36 for b in pads["inner_pad"])
    assert bytes(b ^ 0x5C for b in pads["outer_pad"]) == key
    assert len(set(key)) > 16  # random, not a constant
    ours = conn.execute("SELECT mailroom._forgotten_hash(%s) AS h", ("Erin@example.org",)).fetchone()["h"]
    assert bytes(ours) == hmac.new(key, b"erin@example.org", hashlib.sha256).digest()


def test_cli_forget_asks_for_confirmation(db_url, conn):
    enqueue(conn, PERSON, subject="Hello", body_text="Body")
    code, out, err = run("forget", PERSON, "--dsn", db_url)
    assert code == 2 and "--yes" in err
    assert conn.execute("SELECT count(*) AS n FROM mailroom.forgotten_addresses").fetchone()["n"] == 0
    code, out, err = run("forget", PERSON, "--dsn", as_user(db_url, "postgres"), "--yes", "--json")
    assert code == 0, err
    assert json.loads(out)["contents"] == 1
    assert tables_naming(conn, PERSON) == []
    code, out, err = run("forget", "not-an-address", "--dsn", db_url, "--yes")
    assert code == 2 and "mailroom: address:" in err


def test_the_console_forgets_behind_its_csrf_token(conn, db_url):
    """The console's Forget (Suppressions page), as a mailroom_operator login:
    refused without the page's CSRF token or the confirmation, done with both."""
    import re
    import uuid

    from mailroom.web.console import create_app
    from mailroom.web.console.db import Database

    name = f"t_console_{uuid.uuid4().hex[:8]}"
    conn.execute(f'CREATE ROLE "{name}" LOGIN IN ROLE mailroom_operator')
    db = Database(as_user(db_url, name))
    db.open()
    try:
        enqueue(conn, PERSON, subject="Hello", body_text="Body")
        client = create_app(database=db, trust_header="X-Remote-User", secret_key="test").test_client()
        who = {"X-Remote-User": "ops"}
        page = client.get("/suppressions", headers=who).get_data(as_text=True)
        assert 'id="forget-form"' in page
        token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
        assert client.post("/suppressions/forget", data={"address": PERSON, "confirm": "yes"},
                           headers=who).status_code == 400
        client.post("/suppressions/forget", data={"address": PERSON, "csrf_token": token}, headers=who)
        assert tables_naming(conn, PERSON) != []  # not confirmed: nothing erased
        done = client.post("/suppressions/forget", data={"address": PERSON, "csrf_token": token, "confirm": "yes"},
                           headers=who, follow_redirects=True)
        assert done.status_code == 200 and "forgot an address" in done.get_data(as_text=True)
        assert PERSON.lower() not in done.get_data(as_text=True).lower()
        assert tables_naming(conn, PERSON) == []
    finally:
        db.close()
        conn.execute(f'DROP ROLE IF EXISTS "{name}"')


def test_forget_finds_the_feed_events_by_key_not_by_reading_the_feed(conn):
    """forget's update of mailroom.events goes through events_message_idx and
    events_address_idx: on a feed of 50,000 events the table is never read
    whole (its seq_scan count stays put; the indexes are scanned)."""
    enqueue(conn, PERSON, subject="Hello", body_text="Body")
    conn.execute("SELECT mailroom.suppress(%s)", (PERSON,))
    # Other people's events, as the triggers write them (ledger events carry
    # a mail id, suppressions an address).
    conn.execute("INSERT INTO mailroom.events (kind, message_id, detail)"
                 " SELECT 'sent', 1000000 + g, '250 2.0.0 queued' FROM generate_series(1, 40000) g")
    conn.execute("INSERT INTO mailroom.events (kind, address, reason)"
                 " SELECT 'suppressed', 'someone' || g || '@example.com', 'manual' FROM generate_series(1, 10000) g")
    conn.execute("ANALYZE mailroom.events")

    def scans():
        conn.execute("SELECT pg_stat_force_next_flush()")
        return conn.execute("SELECT seq_scan, coalesce(idx_scan, 0) AS idx_scan FROM pg_stat_user_tables"
                            " WHERE relid = 'mailroom.events'::regclass").fetchone()

    conn.execute("SELECT pg_stat_clear_snapshot()")
    before = scans()
    assert forget(conn, PERSON)["events"] == 1  # the suppression's event (the cancel's names nobody)
    conn.execute("SELECT pg_stat_clear_snapshot()")
    after = scans()
    assert after["seq_scan"] == before["seq_scan"]
    assert after["idx_scan"] > before["idx_scan"]
    assert tables_naming(conn, PERSON) == []


# Others forgotten as forget leaves them (hash and filter bit), many at once: the bench's loader.
FORGET_OTHERS = (Path(__file__).resolve().parent.parent / "bench" / "erasure" / "forgotten.sql").read_text()


def filter_bit(conn, address: str) -> int:
    return conn.execute("SELECT get_bit(f.bits, mailroom._forgotten_bit(mailroom._address_key(%s))) AS b"
                        " FROM mailroom.forgotten_filter f", (address,)).fetchone()["b"]


def test_the_gate_refuses_a_forgotten_address_on_every_stream_among_many_forgotten(db_url, conn):
    """With 10,000 other addresses forgotten (their hashes and filter bits, as
    forget leaves them; analysed, so the claim plans for a big table), mail
    to the person written on every stream and in three spellings, in a
    transaction forget could not see, is refused when a runner claims it.
    Mail to others is claimed, also to an address whose filter bit is set
    although nobody forgot it (the filter only decides whether to work out
    the HMAC)."""
    conn.execute("SET mailroom_bench.forgotten = 10000")
    conn.execute(FORGET_OTHERS)
    streams = [r["name"] for r in conn.execute("SELECT name FROM mailroom.streams ORDER BY name").fetchall()]
    assert len(streams) >= 2
    flagged = conn.execute(
        "SELECT a FROM (SELECT 'flagged' || g || '@example.net' AS a FROM generate_series(1, 1000) g) x,"
        " mailroom.forgotten_filter f WHERE get_bit(f.bits, mailroom._forgotten_bit(mailroom._address_key(a))) = 1"
        " LIMIT 1").fetchone()["a"]
    spellings = [PERSON, PERSON.lower(), PERSON.upper()]
    with connect(db_url) as app:
        app.execute("BEGIN")
        racing = [enqueue(app, to, subject="Hello", body_text="Body", stream=s) for s in streams for to in spellings]
        others = [enqueue(app, f"other{i}@example.org", subject="Hello", body_text="Body", stream=s)
                  for i, s in enumerate(streams)]
        others.append(enqueue(app, flagged, subject="Hello", body_text="Body"))
        assert forget(conn, PERSON)["contents"] == 0  # it cannot see the mail yet
        app.execute("COMMIT")
    assert {r["id"] for r in claim(conn, 100)} == set(others)
    refused = conn.execute("SELECT status, status_reason, count(*) AS n FROM mailroom.messages WHERE id = ANY (%s)"
                           " GROUP BY 1, 2", (racing,)).fetchall()
    assert refused == [{"status": "cancelled", "status_reason": "suppressed", "n": len(racing)}]
    assert integrity(conn) == []
    assert filter_bit(conn, PERSON.upper()) == 1


def test_the_filter_is_keyed_and_every_bit_counts_when_its_check_fails(conn):
    """forget sets the bit of the address (any spelling) and of the erased
    placeholder, under a random seed; on a server whose hash function gives
    other values than at deploy (seed_check differs), the gate works out the
    HMAC of every mail, as if every bit were set."""
    seeds = conn.execute("SELECT seed, seed_check, bits FROM mailroom.forgotten_filter").fetchall()
    assert len(seeds) == 1 and seeds[0]["seed"] != 0 and set(bytes(seeds[0]["bits"])) == {0}
    forget(conn, PERSON)
    assert filter_bit(conn, PERSON.lower()) == 1 and filter_bit(conn, "erased@erased.invalid") == 1
    assert sum(bin(b).count("1") for b in bytes(conn.execute(
        "SELECT bits FROM mailroom.forgotten_filter").fetchone()["bits"])) <= 2
    # Mail to someone whose hash is written with no bit (as v0.5.0's forget
    # did), every bit cleared and the check broken: the mail is refused.
    queued = enqueue(conn, "Olga@example.net", subject="Hello", body_text="Body")
    conn.execute("INSERT INTO mailroom.forgotten_addresses (key_hash)"
                 " VALUES (mailroom._forgotten_hash(mailroom._address_key('olga@example.net')))")
    conn.execute("UPDATE mailroom.forgotten_filter SET bits = decode(repeat('00', 8192), 'hex'),"
                 " seed_check = seed_check + 1")
    assert claim(conn) == []
    assert conn.execute("SELECT status, status_reason FROM mailroom.messages WHERE id = %s",
                        (queued,)).fetchone() == {"status": "cancelled", "status_reason": "suppressed"}
