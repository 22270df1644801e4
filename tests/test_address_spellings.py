"""One mailbox, one key, whatever the spelling of its domain (issue 32, item 1).

The runner puts a domain on the wire as IDNA 2008 with the UTS 46 mapping
does; the gate, the suppression list and the domain limits must see the same
form, computed once in SQL (deploy/address_wire_form.sql):

- suppress ann@example.com, then mail ann@ｅｘａｍｐｌｅ.com (fullwidth
  letters): refused at enqueue, and refused at claim time when it was queued
  before the suppression;
- bob@ünicode.de suppressed stops bob@xn--nicode-2ya.de, and the reverse;
- the stored address, its domain (the domain limits' key) and what the
  runner puts in RCPT TO are the wire form; local parts stay as given;
- the SQL mapping agrees with the Python idna package the runner uses, on
  a spread of scripts and spellings;
- an upgrade re-keys suppressions and mail stored under the old keys.
"""

from __future__ import annotations

import subprocess
import uuid

import idna
import psycopg
import pytest
from psycopg import sql

from mailroom.dev.embedded import project_root
from mailroom.dev.sink import Sink
from tests.conftest import with_database
from tests.runnerkit import RunnerProcess, enqueue

FULLWIDTH_EXAMPLE = "\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com"   # ｅｘａｍｐｌｅ.com

DOMAINS = [
    "ünicode.de", "ÜNICODE.DE", FULLWIDTH_EXAMPLE, "bücher.example", "例え.テスト", "xn--nicode-2ya.de",
    "Straße.de", "ΕΛΛΆΔΑ.gr", "münchen\u3002de", "домен.рф", "ｍüｎｃｈｅｎ.de", "日本語。ＪＰ", "ἀρχή.gr",
    "Bücher-Straße.example", "παράδειγμα.δοκιμή", "مثال.إختبار", "a.b.c.ü", "Example.COM",
]


def _claimed(conn, n: int = 100) -> list[str]:
    return [r["to_address"] for r in conn.execute(
        "SELECT to_address FROM mailroom.claim_batch('spellings', %s)", (n,))]


def _status(conn, key: str) -> tuple[str, str | None]:
    row = conn.execute("SELECT status, status_reason FROM mailroom.messages WHERE delivery_key = %s",
                       (key,)).fetchone()
    return row["status"], row["status_reason"]


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_sql_mapping_is_the_runners(conn, domain):
    assert conn.execute("SELECT mailroom._idna_domain(%s) AS d", (domain,)).fetchone()["d"] == \
        idna.encode(domain, uts46=True).decode("ascii")


@pytest.mark.parametrize("suppressed, mailed", [
    ("ann@example.com", f"ann@{FULLWIDTH_EXAMPLE}"),
    ("bob@ünicode.de", "bob@xn--nicode-2ya.de"),
    ("bob@xn--nicode-2ya.de", "bob@ÜNICODE.de"),
    ("carol@例え.テスト", "carol@xn--r8jz45g.xn--zckzah"),
])
def test_a_suppression_holds_for_every_spelling_of_the_domain(conn, suppressed, mailed):
    conn.execute("SELECT mailroom.suppress(%s, 'manual')", (suppressed,))
    enqueue(conn, mailed, subject="s", body_text="b", delivery_key="after")
    assert _status(conn, "after") == ("cancelled", "suppressed")
    assert _claimed(conn) == []


def test_mail_queued_before_the_suppression_is_refused_at_claim_time(conn):
    enqueue(conn, f"ann@{FULLWIDTH_EXAMPLE}", subject="s", body_text="b", delivery_key="before")
    enqueue(conn, "bob@ünicode.de", subject="s", body_text="b", delivery_key="before-2")
    conn.execute("SELECT mailroom.suppress('ann@example.com', 'manual')")
    conn.execute("SELECT mailroom.suppress('bob@xn--nicode-2ya.de', 'manual')")
    assert _claimed(conn) == []
    assert _status(conn, "before")[1] == "suppressed"
    assert _status(conn, "before-2")[1] == "suppressed"


def test_unsuppress_takes_any_spelling(conn):
    conn.execute("SELECT mailroom.suppress('bob@ünicode.de', 'manual')")
    conn.execute("SELECT mailroom.unsuppress('bob@XN--NICODE-2YA.DE')")
    assert conn.execute("SELECT count(*)::int AS n FROM mailroom.suppressions").fetchone()["n"] == 0


def test_stored_address_and_domain_are_the_wire_form_local_parts_as_given(conn):
    enqueue(conn, "Jürgen.X@ÜNICODE.de", subject="s", body_text="b", delivery_key="wire")
    enqueue(conn, "Ann@Example.COM", subject="s", body_text="b", delivery_key="ascii")
    rows = {r["delivery_key"]: r for r in conn.execute(
        "SELECT delivery_key, to_address, to_domain, address_key FROM mailroom.contents")}
    assert (rows["wire"]["to_address"], rows["wire"]["to_domain"], rows["wire"]["address_key"]) == \
        ("Jürgen.X@xn--nicode-2ya.de", "xn--nicode-2ya.de", "Jürgen.X@xn--nicode-2ya.de")
    # An ASCII address is stored as written; its key and domain are lower-cased as before.
    assert (rows["ascii"]["to_address"], rows["ascii"]["to_domain"], rows["ascii"]["address_key"]) == \
        ("Ann@Example.COM", "example.com", "Ann@example.com")


def test_a_domain_limit_counts_every_spelling_as_one_domain(conn):
    conn.execute("SELECT mailroom.set_domain_limits('xn--nicode-2ya.de', 2, NULL)")
    for i, domain in enumerate(["ünicode.de", "ÜNICODE.DE", "xn--nicode-2ya.de", "üｎｉｃｏｄｅ.de"]):
        enqueue(conn, f"r{i}@{domain}", subject="s", body_text="b", delivery_key=f"limit-{i}")
    assert len(_claimed(conn)) == 2, "one budget of 2 a second for the one domain"


def test_a_campaign_recipient_is_keyed_by_the_wire_form_and_an_invalid_one_stays_invalid(conn):
    """Campaign chunks insert contents in bulk: the same mapping holds there, and
    mapping never turns an address the chunk refuses into one it accepts."""
    conn.execute("SELECT mailroom.suppress('ann@example.com', 'manual')")
    conn.execute("SELECT mailroom.upsert_template('news', 'News', 'Hello')")
    conn.execute(
        "SELECT mailroom.enqueue_campaign('spellings', 'news', $q$SELECT v.* FROM (VALUES"
        f" ('r1', 'ann@{FULLWIDTH_EXAMPLE}'), ('r2', 'zoe@ünicode.de'), ('r3', E'eve@exam\\u200Bple.com'))"
        " AS v(recipient_id, email)$q$, p_send_at => now() - interval '1 second')")
    rows = conn.execute("SELECT recipient_id, to_address, status, status_reason FROM mailroom.messages"
                        " ORDER BY recipient_id").fetchall()
    assert [(r["recipient_id"], r["status"], r["status_reason"]) for r in rows] == [
        ("r1", "cancelled", "suppressed"), ("r2", "queued", None), ("r3", "cancelled", "invalid_address")]
    assert rows[1]["to_address"] == "zoe@xn--nicode-2ya.de"
    assert rows[2]["to_address"] == "eve@exam\u200bple.com"


def test_the_runner_sends_to_the_wire_form_and_not_to_a_suppressed_spelling(db_url, conn):
    conn.execute("SELECT mailroom.suppress('ann@example.com', 'manual')")
    enqueue(conn, f"ann@{FULLWIDTH_EXAMPLE}", subject="s", body_text="b", delivery_key="suppressed")
    enqueue(conn, f"zoe@{FULLWIDTH_EXAMPLE}", subject="s", body_text="b", delivery_key="sent")
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle", "--poll-interval", "0.2") as r:
        assert r.wait() == 0, r.log()
        assert [m["rcpt_tos"] for m in sink.messages] == [["zoe@example.com"]]
    assert _status(conn, "sent")[0] == "sent"
    assert _status(conn, "suppressed") == ("cancelled", "suppressed")


def _sqitch(target: str, *args: str) -> None:
    done = subprocess.run(["sqitch", *args, "--target", target], cwd=project_root(), capture_output=True, text=True)
    assert done.returncode == 0, f"sqitch {' '.join(args)} failed:\n{done.stdout}{done.stderr}"


def test_an_upgrade_rekeys_what_was_stored_under_the_old_keys(server_url):
    name = "spellings_" + uuid.uuid4().hex[:10]
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = with_database(server_url, name)
    target = "db:pg:" + url.split(":", 1)[1]
    try:
        _sqitch(target, "deploy", "--to", "address_wire_form^")
        with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as c:
            c.execute("SELECT mailroom.suppress('bob@ünicode.de', 'manual')")
            c.execute("SELECT mailroom.suppress('bob@xn--nicode-2ya.de', 'manual')")   # the same mailbox twice
            c.execute(f"SELECT mailroom.suppress('ann@{FULLWIDTH_EXAMPLE}', 'manual')")
            c.execute("SELECT mailroom.enqueue('ann@example.com', 's', 'b', p_delivery_key => 'queued')")
            c.execute("SELECT mailroom.enqueue('carol@ünicode.de', 's', 'b', p_delivery_key => 'unicode')")
        _sqitch(target, "deploy")
        with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as c:
            keys = sorted(r["address_key"] for r in c.execute("SELECT address_key FROM mailroom.suppressions"))
            assert keys == ["ann@example.com", "bob@xn--nicode-2ya.de"]
            row = c.execute("SELECT to_address, to_domain FROM mailroom.contents WHERE delivery_key = 'unicode'"
                            ).fetchone()
            assert (row["to_address"], row["to_domain"]) == ("carol@xn--nicode-2ya.de", "xn--nicode-2ya.de")
            # ann@example.com was queued before the upgrade; the re-keyed suppression stops it at claim time.
            assert [r["to_address"] for r in c.execute("SELECT to_address FROM mailroom.claim_batch('w', 10)")] == \
                ["carol@xn--nicode-2ya.de"]
            assert c.execute("SELECT * FROM mailroom.integrity_problems()").fetchall() == []
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
