"""STARTTLS + AUTH and implicit TLS against a sink with a certificate made here."""

from __future__ import annotations

import datetime
import ipaddress
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mailroom.sink import Sink
from tests.runnerkit import RunnerProcess, enqueue, statuses

PASSWORD = "s3cret p@ss/word"
QUOTED = "s3cret%20p%40ss%2Fword"


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    """A self-signed certificate for localhost and 127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    d = tmp_path_factory.mktemp("tls")
    (d / "cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (d / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(d / "cert.pem", d / "key.pem")
    return ctx, str(d / "cert.pem")


def test_starttls_and_auth(db_url, conn, cert):
    ctx, cafile = cert
    enqueue(conn, "secure@example.com", subject="over TLS", body_text="hello")
    with Sink(keep=True, starttls_context=ctx, require_starttls=True, auth=("mailer", PASSWORD)) as sink:
        url = f"smtp://mailer:{QUOTED}@localhost:{sink.port}?starttls&cafile={cafile}&timeout=5"
        with RunnerProcess(db_url, url, "--exit-when-idle", "--log-level", "debug") as r:
            assert r.wait() == 0, r.log()
            log = r.log()
    assert statuses(conn) == {"sent": 1}
    assert sink.stats()["received"] == 1 and sink.stats()["auth_failures"] == 0
    assert "smtp://mailer:***@localhost" in log
    assert PASSWORD not in log and QUOTED not in log


def test_wrong_password_is_retried_and_never_logged(db_url, conn, cert):
    ctx, cafile = cert
    enqueue(conn, "secure@example.com", subject="over TLS", body_text="hello")
    with Sink(keep=True, starttls_context=ctx, require_starttls=True, auth=("mailer", "right")) as sink:
        url = f"smtp://mailer:{QUOTED}@localhost:{sink.port}?starttls&cafile={cafile}&timeout=5"
        with RunnerProcess(db_url, url, "--exit-when-idle", "--log-format", "json") as r:
            assert r.wait() == 0, r.log()
            log = r.log()
    assert sink.stats()["received"] == 0 and sink.stats()["auth_failures"] >= 1
    row = conn.execute("SELECT status, last_error FROM mailroom.messages").fetchone()
    assert row["status"] == "queued" and "535" in row["last_error"]
    assert '"event": "smtp.down"' in log
    assert PASSWORD not in log and QUOTED not in log


def test_implicit_tls(db_url, conn, cert):
    ctx, cafile = cert
    enqueue(conn, "tls@example.com", subject="smtps", body_text="hello")
    with Sink(keep=True, tls_context=ctx) as sink:
        with RunnerProcess(db_url, f"smtps://127.0.0.1:{sink.port}?cafile={cafile}", "--exit-when-idle") as r:
            assert r.wait() == 0, r.log()
    assert statuses(conn) == {"sent": 1}
