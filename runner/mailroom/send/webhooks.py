"""Webhook delivery: the event feed POSTed to HTTPS endpoints (docs/events.md).

Endpoints are rows of mailroom.webhook_endpoints; each has a cursor into the
feed that one runner at a time leases (webhook_claim), delivers in order and
moves (webhook_report). This runs on threads and a database connection of its
own, never the send pool's or the claimer's: a slow or dead endpoint costs the
mail nothing.

Each event is one POST of its JSON, signed like Stripe's and Postmark's
webhooks:

    Mailroom-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>
    Mailroom-Event-Id: <event id>          (also Idempotency-Key)

The secret is the runner's, named by the endpoint's secret_name: a line
`NAME=BASE64URL_SECRET` in the --webhook-secrets file (or
MAILROOM_WEBHOOK_SECRETS_FILE, MAILROOM_WEBHOOK_SECRETS), the format of
mailroom.signing's keyring (`mailroom signing-key NAME` prints one); the HMAC
key is the decoded bytes. A runner claims only endpoints whose secret it holds.
Delivery is at least once: a receiver drops a repeated Mailroom-Event-Id.
"""

from __future__ import annotations

import hmac
import http.client
import json
import logging
import ssl
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from urllib.parse import urlsplit

import psycopg
from prometheus_client import Counter
from psycopg.rows import dict_row

from mailroom.backoff import Backoff
from mailroom.logs import event
from mailroom.signing import Keyring, SigningKeyError

SIGNATURE_HEADER = "Mailroom-Signature"
EVENT_ID_HEADER = "Mailroom-Event-Id"
ENV_FILE = "MAILROOM_WEBHOOK_SECRETS_FILE"
ENV_SECRETS = "MAILROOM_WEBHOOK_SECRETS"

DELIVERED = Counter("mailroom_webhook_events_total", "Events delivered to webhook endpoints.", ["endpoint"])
FAILURES = Counter("mailroom_webhook_failures_total", "Failed webhook deliveries (after which the endpoint waits).",
                   ["endpoint"])
PAUSED = Counter("mailroom_webhook_paused_total", "Webhook endpoints this runner paused after failures in a row.",
                 ["endpoint"])


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The Mailroom-Signature header of `body` sent at `timestamp`."""
    mac = hmac.digest(secret, str(timestamp).encode("ascii") + b"." + body, "sha256")
    return f"t={timestamp},v1={mac.hex()}"


def verify(secret: bytes, header: str, body: bytes, tolerance: float = 300.0, now: float | None = None) -> bool:
    """What a receiver checks: a v1 HMAC of "t.body" under the secret, and t
    within `tolerance` seconds of now (a replayed old request fails)."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    expected = signature(secret, timestamp, body).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))


def load_secrets(path: str | None = None, environ: Mapping[str, str] | None = None) -> Keyring | None:
    """The runner's webhook secrets, or None when none are configured (the
    runner then delivers no webhooks)."""
    import os

    env = os.environ if environ is None else environ
    if not (path or env.get(ENV_FILE) or env.get(ENV_SECRETS)):
        return None
    return Keyring.load(path, env, env_file=ENV_FILE, env_inline=ENV_SECRETS, what="webhook secrets")


def payload(e: dict) -> bytes:
    """The JSON body of one event."""
    return json.dumps({
        "id": e["id"], "type": e["kind"], "cursor": e["cursor"], "occurred_at": e["occurred_at"],
        "message_id": e["message_id"], "address": e["address"], "stream": e["stream"],
        "campaign_id": e["campaign_id"], "sender": e["sender"], "attempt": e["attempt"], "reason": e["reason"],
        "smtp": {"code": e["smtp_code"], "enhanced": e["smtp_enhanced"], "text": e["detail"]},
    }, separators=(",", ":")).encode("utf-8")


class WebhookDeliverer:
    """One database's webhook delivery: a thread that claims endpoints and a
    small pool that delivers to several at once."""

    def __init__(self, dsn: str, secrets: Keyring, worker: str, stopping: threading.Event, *,
                 ca_file: str | None = None, timeout: float = 10.0, poll_interval: float = 1.0,
                 batch: int = 100, lease: float = 60.0, endpoints: int = 4,
                 backoff_base: float = 1.0, backoff_cap: float = 300.0, label: str = "db"):
        self.dsn, self.secrets, self.worker, self.stopping = dsn, secrets, worker, stopping
        self.timeout, self.poll_interval, self.batch, self.lease = timeout, poll_interval, batch, lease
        self.endpoints, self.backoff_base, self.backoff_cap, self.label = endpoints, backoff_base, backoff_cap, label
        # The system's trust store unless told otherwise; never unverified.
        self.tls = ssl.create_default_context(cafile=ca_file)
        self._pool = ThreadPoolExecutor(endpoints, thread_name_prefix="webhook")
        self.thread = threading.Thread(target=self.run, name="webhooks", daemon=True)

    def start(self) -> None:
        self.thread.start()

    # -- the loop -----------------------------------------------------------------
    def run(self) -> None:
        backoff = Backoff(base=0.5, cap=30.0)
        conn = None
        down = False
        while not self.stopping.is_set():
            try:
                if conn is None or conn.closed:
                    # Its own connection: no prepared statements, so a
                    # transaction-mode pooler serves it too.
                    conn = psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row, connect_timeout=10,
                                           prepare_threshold=None)
                rows = self._claim(conn)
                if down:
                    event(logging.INFO, "webhooks.db_up", database=self.label)
                    down = False
                backoff.reset()
            except psycopg.Error as e:
                if not down:
                    event(logging.WARNING, "webhooks.db_down", database=self.label, error=str(e).strip())
                    down = True
                if conn is not None:
                    conn.close()
                conn = None
                self.stopping.wait(backoff.next())
                continue
            if not rows:
                self.stopping.wait(self.poll_interval)
                continue
            results = list(self._pool.map(self._deliver, rows))
            for row, (through, delivered, error) in zip(rows, results):
                self._report(conn, row, through, delivered, error)
        if conn is not None:
            conn.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _claim(self, conn) -> list[dict]:
        with conn.transaction():
            conn.execute("SET LOCAL statement_timeout = '10s'")
            return conn.execute(
                "SELECT * FROM mailroom.webhook_claim(%s, %s, %s, %s, %s)",
                (self.worker, self.secrets.key_ids, self.endpoints, self.batch, timedelta(seconds=self.lease)),
            ).fetchall()

    def _report(self, conn, row: dict, through: str | None, delivered: int, error: str | None) -> None:
        retry_in = None
        if error is not None:
            backoff = Backoff(base=self.backoff_base, cap=self.backoff_cap)
            backoff.n = min(row["failures"], 30)
            retry_in = timedelta(seconds=backoff.next())
        name = row["endpoint"]
        try:
            with conn.transaction():
                conn.execute("SET LOCAL statement_timeout = '10s'")
                status = conn.execute(
                    "SELECT mailroom.webhook_report(%s, %s, %s, %s, %s, %s) AS s",
                    (name, row["lease_token"], through, delivered, error, retry_in)).fetchone()["s"]
        except psycopg.Error as e:
            # The lease runs out and the batch goes again: at least once.
            event(logging.WARNING, "webhooks.report_failed", endpoint=name, error=str(e).strip())
            conn.close()  # the next claim connects again
            return
        if delivered:
            DELIVERED.labels(name).inc(delivered)
        if error is not None:
            FAILURES.labels(name).inc()
            if status == "paused":
                PAUSED.labels(name).inc()
                event(logging.ERROR, "webhooks.endpoint_paused", endpoint=name, failures=row["failures"] + 1,
                      error=error, hint="SELECT mailroom.webhook_endpoint_resume(name) once it is fixed")
            else:
                event(logging.WARNING, "webhooks.delivery_failed", endpoint=name, delivered=delivered, error=error,
                      retry_in=round(retry_in.total_seconds(), 2))
        elif status == "lost":
            event(logging.WARNING, "webhooks.lease_lost", endpoint=name,
                  note="delivered after the lease ran out: these events go again")

    # -- one endpoint's batch -----------------------------------------------------------
    def _deliver(self, row: dict) -> tuple[str | None, int, str | None]:
        """POST the batch's events in order until one fails or half the lease
        is gone: (cursor the endpoint has taken, events delivered, error)."""
        url = urlsplit(row["url"])
        key_ids = self.secrets.key_ids
        if row["secret_name"] not in key_ids:  # the claim asked only for these
            return None, 0, f"secret {row['secret_name']} is not held by this runner"
        secret = self.secrets.secret(row["secret_name"])
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        deadline = time.monotonic() + self.lease / 2
        events = row["events"]
        through, delivered = None, 0
        conn = http.client.HTTPSConnection(url.hostname, url.port or 443, timeout=self.timeout, context=self.tls)
        try:
            for e in events:
                if self.stopping.is_set() or time.monotonic() > deadline:
                    return through, delivered, None
                body = payload(e)
                headers = {
                    "Content-Type": "application/json",
                    "User-Agent": "mailroom-webhooks",
                    SIGNATURE_HEADER: signature(secret, int(time.time()), body),
                    EVENT_ID_HEADER: str(e["id"]),
                    "Idempotency-Key": str(e["id"]),
                }
                conn.request("POST", path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                if not 200 <= response.status < 300:
                    return through, delivered, f"HTTP {response.status} {response.reason}"[:300]
                through, delivered = e["cursor"], delivered + 1
        except (OSError, http.client.HTTPException) as e:  # ssl.SSLError is an OSError
            return through, delivered, f"{type(e).__name__}: {e}"[:300]
        finally:
            conn.close()
        # All taken: the cursor moves to the batch's end, past events the
        # endpoint's filters passed over.
        return row["batch_end"], delivered, None
