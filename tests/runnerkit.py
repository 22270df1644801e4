"""Helpers for the runner tests: start `mailroom run` as a real process, wait
for database conditions, read what a sink received."""

from __future__ import annotations

import datetime
import ipaddress
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from email import message_from_bytes, policy
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

from mailroom.send.render import message_id

FROM = "Mailroom Tests <noreply@tests.mailroom.invalid>"
MID_DOMAIN = FROM.rsplit("@", 1)[1].rstrip(">")  # the runners' Message-ID domain


class RunnerProcess:
    """`mailroom run` in a subprocess; stderr (the log) and stdout go to one temp file."""

    def __init__(self, dsn: str, smtp: str, *args: str, env: dict | None = None,
                 without_unsubscribe: bool = True):
        """without_unsubscribe: unless the runner is given --unsubscribe-url,
        pass --no-unsubscribe-headers (most tests send broadcast mail and do
        not care for its headers; without either the runner refuses to start)."""
        self.log_file = tempfile.NamedTemporaryFile("w+", prefix="runner-", suffix=".log", delete=False)
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        configured = "--unsubscribe-url" in args or full_env.get("MAILROOM_UNSUBSCRIBE_URL")
        opt_out = ["--no-unsubscribe-headers"] if without_unsubscribe and not configured else []
        cmd = [sys.executable, "-m", "mailroom.cli", "run", "--dsn", dsn, "--smtp", smtp,
               "--from", FROM, *opt_out, *args]
        self.proc = subprocess.Popen(cmd, stdout=self.log_file, stderr=subprocess.STDOUT, env=full_env)

    def log(self) -> str:
        with open(self.log_file.name) as f:
            return f.read()

    def signal(self, sig=signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("runner did not exit in time; log:\n" + self.log())

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log_file.close()
        os.unlink(self.log_file.name)

    def __enter__(self) -> "RunnerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def statuses(conn: psycopg.Connection) -> dict[str, int]:
    rows = conn.execute("SELECT status, count(*)::int AS n FROM mailroom.messages GROUP BY 1").fetchall()
    return {r["status"]: r["n"] for r in rows}


def settled(conn: psycopg.Connection, total: int, final=("sent", "failed", "cancelled")) -> bool:
    s = statuses(conn)
    return sum(s.get(k, 0) for k in final) == total


def enqueue(conn, to: str, **kw) -> int:
    cols = ", ".join(f"p_{k} => %({k})s" for k in kw)
    sql = "SELECT mailroom.enqueue(p_to => %(to)s" + (", " + cols if cols else "") + ") AS id"
    params = {"to": to}
    for k, v in kw.items():
        params[k] = Jsonb(v) if isinstance(v, dict) else v
    return conn.execute(sql, params).fetchone()["id"]


def runners_message_id(conn, delivery_key: str, domain: str = MID_DOMAIN) -> str:
    """The Message-ID runners give the mail with this delivery key (render.message_id of its key and id)."""
    row = conn.execute("SELECT id FROM mailroom.contents WHERE delivery_key = %s", (delivery_key,)).fetchone()
    assert row is not None, f"no mail with delivery key {delivery_key!r}"
    return message_id(delivery_key, row["id"], domain)


def enqueue_many(conn, prefix: str, n: int, *, on_ambiguous: str = "retry", due_ago: str = "0 seconds",
                 max_attempts: int = 5) -> list[str]:
    """n mails with delivery keys prefix-1..prefix-n (to the key @example.com),
    enqueued in one statement; returns the keys."""
    keys = [f"{prefix}-{i}" for i in range(1, n + 1)]
    conn.execute(
        """
        SELECT mailroom.enqueue(k || '@example.com', 'Drill', 'Body', p_delivery_key => k,
                                p_on_ambiguous => %(policy)s, p_send_at => now() - %(ago)s::interval,
                                p_max_attempts => %(attempts)s)
        FROM unnest(%(keys)s::text[]) AS k
        """,
        {"keys": keys, "policy": on_ambiguous, "ago": due_ago, "attempts": max_attempts},
    )
    return keys


def parse(data: bytes):
    return message_from_bytes(data, policy=policy.default)



def self_signed_cert(directory: Path) -> tuple[ssl.SSLContext, str]:
    """A self-signed certificate for localhost and 127.0.0.1 written to `directory`:
    the server's SSL context and the path of the PEM file to use as a client's cafile."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

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
    d = Path(directory)
    (d / "cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (d / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(d / "cert.pem", d / "key.pem")
    return ctx, str(d / "cert.pem")
