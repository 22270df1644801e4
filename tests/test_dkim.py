"""DKIM signing and Feedback-ID end to end: a real `mailroom run` process, an
aiosmtpd sink on loopback (mailroom.dev.sink.Sink, keep=True), keys made here with
`cryptography`, and dkimpy verifying what arrived against the public key
served by a DNS stub (the TXT record one would publish at
<selector>._domainkey.<domain>).

- Every mail of a configured sender verifies, for rsa-sha256 and
  ed25519-sha256 alike; the same mail with its body or a second From added
  after signing does not (so these tests can fail).
- The signature covers From (twice), Subject and Feedback-ID; Feedback-ID
  says campaign, stream, sender and the Message-ID domain.
- Mail of a sender without a profile arrives unsigned.
- A key that cannot be read or used, or an RSA key under 2048 bits, stops the
  runner at start with exit code 2 and one line, before it claims anything.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from psycopg.types.json import Jsonb

from mailroom.dev.sink import Sink
from tests.runnerkit import MID_DOMAIN, RunnerProcess, enqueue, statuses

DOMAIN = "mail.tests.mailroom.invalid"


class Key:
    """A private key in a PEM file, and the DNS TXT record of its public half."""

    def __init__(self, directory: Path, name: str, private_key):
        self.path = directory / f"{name}.pem"
        self.pem = private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption())
        self.path.write_bytes(self.pem)
        self.path.chmod(0o600)
        public = private_key.public_key()
        if isinstance(private_key, rsa.RSAPrivateKey):
            der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
            self.record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(der)
        else:
            raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            self.record = b"v=DKIM1; k=ed25519; p=" + base64.b64encode(raw)


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Key]:
    d = tmp_path_factory.mktemp("dkim-keys")
    return {
        "rsa": Key(d, "rsa", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        "ed25519": Key(d, "ed25519", ed25519.Ed25519PrivateKey.generate()),
        "rsa1024": Key(d, "rsa1024", rsa.generate_private_key(public_exponent=65537, key_size=1024)),
    }


def dns_stub(records: dict[str, bytes]):
    """dkimpy's dnsfunc: the TXT record of a name, or None (no such record)."""
    def lookup(name: bytes, timeout: int = 5):
        return records.get(name.decode("ascii").rstrip(".").lower())
    return lookup


def signature_tags(data: bytes) -> dict[str, str]:
    """The tags of the mail's first DKIM-Signature field, whitespace removed."""
    m = re.search(rb"^DKIM-Signature:(.*?)\r\n(?![ \t])", data, re.S | re.M | re.I)
    assert m, "no DKIM-Signature field"
    value = re.sub(rb"\s+", b"", m.group(1)).decode("ascii")
    return dict(tag.split("=", 1) for tag in value.split(";") if tag)


def header(data: bytes, name: str) -> list[str]:
    head = data.split(b"\r\n\r\n", 1)[0].decode("utf-8")
    return [line.split(":", 1)[1].strip() for line in re.split(r"\r\n(?![ \t])", head)
            if line.lower().startswith(name.lower() + ":")]


def by_recipient(sink: Sink) -> dict[str, bytes]:
    return {m["rcpt_tos"][0]: m["data"] for m in list(sink.messages)}


def test_signed_mail_verifies_for_both_algorithms_and_fails_when_altered(db_url, conn, keys):
    conn.execute("SELECT mailroom.upsert_template('news', 'News for {{ name }}', 'Hello {{ name }}')")
    conn.execute("CREATE TABLE public.readers AS SELECT 1 AS id, 'reader@example.org' AS email")
    conn.execute("GRANT SELECT ON public.readers TO mailroom_app")
    unsubscribe = {"List-Unsubscribe": "<https://u.example/u/T0KEN>, <mailto:unsubscribe+T0KEN@u.example>",
                   "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}
    enqueue(conn, "ann@example.org", subject="Your receipt", body_text="Thank you.\n", body_html="<p>Thank you.</p>")
    enqueue(conn, "bob@example.org", subject="Weekly", body_text="Read on.\n", sender="newsletter",
            headers=unsubscribe)
    # No profile; and a colon in its name would split a Feedback-ID field.
    enqueue(conn, "cy@example.org", subject="Elsewhere", body_text="Unsigned.\n", sender="shop:eu")
    conn.execute("SET ROLE mailroom_app")
    campaign = conn.execute(
        "SELECT mailroom.enqueue_campaign('spring', 'news', 'SELECT id AS recipient_id, email,"
        " jsonb_build_object(''name'', ''Reader'') AS vars FROM public.readers', p_sender => 'newsletter',"
        " p_headers => %s, p_send_at => now() - interval '1 second') AS id", (Jsonb(unsubscribe),)).fetchone()["id"]
    conn.execute("RESET ROLE")
    # Both profiles through the environment variable: ';' separates its entries.
    profiles = (f"default={DOMAIN}:rsa2026:{keys['rsa'].path};"
                f"newsletter={DOMAIN}:ed2026:{keys['ed25519'].path}")
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle",
                                                env={"MAILROOM_DKIM": profiles}) as r:
        assert r.wait() == 0, r.log()
        log = r.log()
    assert statuses(conn) == {"sent": 4}
    got = by_recipient(sink)
    assert sorted(got) == ["ann@example.org", "bob@example.org", "cy@example.org", "reader@example.org"]
    verify = dns_stub({f"rsa2026._domainkey.{DOMAIN}": keys["rsa"].record,
                       f"ed2026._domainkey.{DOMAIN}": keys["ed25519"].record})

    expected = {"ann@example.org": ("rsa-sha256", "rsa2026", f"tx:transactional:default:{MID_DOMAIN}"),
                "bob@example.org": ("ed25519-sha256", "ed2026", f"tx:transactional:newsletter:{MID_DOMAIN}"),
                "reader@example.org": ("ed25519-sha256", "ed2026", f"{campaign}:broadcast:newsletter:{MID_DOMAIN}")}
    for rcpt, (algorithm, selector, feedback) in expected.items():
        data = got[rcpt]
        assert dkim.verify(data, dnsfunc=verify), f"{rcpt}: the signature does not verify"
        tags = signature_tags(data)
        assert (tags["a"], tags["d"], tags["s"], tags["c"]) == (algorithm, DOMAIN, selector, "relaxed/relaxed")
        signed = tags["h"].lower().split(":")
        assert signed.count("from") == 2, "From is oversigned: a second From cannot be added"
        assert {"subject", "feedback-id", "to", "date", "message-id"} <= set(signed)
        assert header(data, "Feedback-ID") == [feedback]
        # Altered after signing: the verifier must say no.
        head, body = data.split(b"\r\n\r\n", 1)
        assert not dkim.verify(head + b"\r\n\r\n" + body.replace(b"e", b"E", 1), dnsfunc=verify), \
            f"{rcpt}: a changed body still verifies"
        assert not dkim.verify(head + b"\r\nFrom: Mallory <m@evil.example>\r\n\r\n" + body, dnsfunc=verify), \
            f"{rcpt}: a second From still verifies"

    for rcpt in ("bob@example.org", "reader@example.org"):  # RFC 8058: both unsubscribe fields signed
        signed = signature_tags(got[rcpt])["h"].lower().split(":")
        assert {"list-unsubscribe", "list-unsubscribe-post"} <= set(signed)

    unsigned = got["cy@example.org"]
    assert not header(unsigned, "DKIM-Signature"), "a sender without a profile is not signed"
    assert header(unsigned, "Feedback-ID") == [f"tx:transactional:shop-eu:{MID_DOMAIN}"]

    # The key's path is logged, the key never.
    assert "rsa=openssl" in log, "the RSA step runs in OpenSSL, not dkimpy's pure Python"
    assert f"key={keys['rsa'].path}" in log and f"key={keys['ed25519'].path}" in log
    for key in (keys["rsa"], keys["ed25519"]):
        for line in key.pem.decode().splitlines()[1:-1]:
            assert line not in log, "a line of the private key reached the log"


@pytest.mark.parametrize("case", ["missing", "rsa1024", "not_a_key"])
def test_a_bad_key_stops_the_runner_at_start(db_url, conn, keys, tmp_path, case):
    paths = {"missing": tmp_path / "nowhere.pem", "rsa1024": keys["rsa1024"].path,
             "not_a_key": tmp_path / "notes.pem"}
    (tmp_path / "notes.pem").write_text("-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n")
    reasons = {"missing": "cannot read it: No such file or directory",
               "rsa1024": "an RSA key of 1024 bits is too weak; at least 2048 bits are required",
               "not_a_key": "not a PEM private key"}
    for i in range(3):
        enqueue(conn, f"user{i}@example.org", subject="Held", body_text="Not yet.\n")
    # A good profile first: the bad one after it still stops the runner.
    with Sink(keep=True) as sink, RunnerProcess(db_url, sink.url(), "--exit-when-idle",
                                                "--dkim", f"default={DOMAIN}:rsa2026:{keys['rsa'].path}",
                                                "--dkim", f"news={DOMAIN}:s1:{paths[case]}") as r:
        assert r.wait() == 2, r.log()
        lines = r.log().strip().splitlines()
    assert lines == [f"mailroom: --dkim news: key file {paths[case]}: " + lines[0].split(": ", 3)[3]]
    assert reasons[case] in lines[0]
    assert statuses(conn) == {"queued": 3}, "nothing was claimed"
    assert conn.execute("SELECT count(*) AS n FROM mailroom.attempts").fetchone()["n"] == 0
    assert not sink.messages
