"""Provider webhooks: what Amazon SES (through SNS), Mailgun and SendGrid
report after a mail left, recorded with `mailroom.record_feedback`.

A Flask app factory (`create_app`), served in development by `mailroom
webhooks` and in production by gunicorn behind a reverse proxy that
terminates TLS (docs/webhooks.md):

    POST /webhooks/ses        SNS: SubscriptionConfirmation, Notification (Bounce, Complaint, Delivery)
    POST /webhooks/mailgun    Mailgun's JSON webhook (HMAC-SHA256 of timestamp + token)
    POST /webhooks/sendgrid   SendGrid's signed Event Webhook (ECDSA P-256 over timestamp + body)
    GET  /healthz

Every request is checked before anything is written: a request without its
signature is answered 401, a bad signature, an unknown SNS topic or a stale
timestamp 403, a body that cannot be read 400 - and none of them writes a
row. A request's events are recorded in one transaction (all or nothing);
each has an event key unique per provider event, so a replayed request
changes nothing twice (`record_feedback` returns false for a known key).
A provider whose key is not configured answers 404.

SNS messages are verified against certificate files the operator installs
(the certificate SNS signs with, downloaded once from the SigningCertURL by
hand): the app never fetches a certificate, nor the SubscribeURL unless told
to (`ses_confirm="fetch"`); by default a subscription confirmation is logged
and returned for the operator to open.

Secrets (the Mailgun signing key) and keys come from files or the
environment and never reach a log line (mailroom.logs redacts them).

The mail is found by the Message-ID the runner wrote (`message_by_message_id`);
an event naming a mail mailroom does not know is recorded by address.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import psycopg_pool
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from flask import Flask, jsonify, request

from mailroom import logs, queries

MAX_BODY_BYTES = 1024 * 1024  # SNS messages are at most 256 KiB; SendGrid batches stay well under 1 MiB

_ENHANCED = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")


class Refused(Exception):
    """A request answered with an error status and nothing written."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Event:
    """One piece of feedback, ready for record_feedback."""

    kind: str                  # bounce, delayed, complaint, delivered, unsubscribe
    event_key: str             # unique per provider event
    source: str                # ses, mailgun, sendgrid
    address: str | None
    message_ref: str | None    # the Message-ID header as the provider quotes it
    message_id: int | None = None  # a mailroom id the provider carried (SendGrid custom args)
    status: str | None = None
    detail: str | None = None


@dataclass
class FeedbackConfig:
    dsn: str
    ses_topic_arns: frozenset[str] = frozenset()
    ses_certificates: tuple = ()          # cryptography x509.Certificate objects
    ses_confirm: str = "log"              # log | fetch
    mailgun_signing_key: bytes | None = None
    sendgrid_public_key: ec.EllipticCurvePublicKey | None = None
    max_age: int = 300                    # seconds a Mailgun or SendGrid timestamp may be off
    pool_size: int = 4

    @classmethod
    def from_env(cls, env: dict | None = None, **overrides) -> "FeedbackConfig":
        """Read the configuration from MAILROOM_* variables (files named by
        *_FILE variables win over inline values). Raises ValueError with a
        message naming the variable when a value is unusable."""
        env = dict(os.environ if env is None else env)
        env.update({k: v for k, v in overrides.items() if v is not None})

        def value(name: str) -> str | None:
            path = env.get(name + "_FILE")
            if path:
                try:
                    return Path(path).read_text().strip()
                except OSError as e:
                    raise ValueError(f"{name}_FILE: cannot read {path}: {e.strerror}") from None
            v = env.get(name)
            return v.strip() if v else None

        dsn = env.get("MAILROOM_DSN")
        if not dsn:
            raise ValueError("MAILROOM_DSN: required (a login role granted mailroom_feedback)")
        certs = []
        for path in filter(None, (env.get("MAILROOM_SES_CERT_FILES") or "").split(os.pathsep)):
            certs.extend(load_certificates(path))
        arns = frozenset(a.strip() for a in (env.get("MAILROOM_SES_TOPIC_ARNS") or "").split(",") if a.strip())
        if bool(certs) != bool(arns):
            raise ValueError("MAILROOM_SES_TOPIC_ARNS and MAILROOM_SES_CERT_FILES: set both or neither")
        confirm = env.get("MAILROOM_SES_CONFIRM", "log")
        if confirm not in ("log", "fetch"):
            raise ValueError(f"MAILROOM_SES_CONFIRM: must be log or fetch, got {confirm!r}")
        mailgun = value("MAILROOM_MAILGUN_SIGNING_KEY")
        if mailgun:
            logs.register_secret(mailgun)
        sendgrid = value("MAILROOM_SENDGRID_PUBLIC_KEY")
        try:
            max_age = int(env.get("MAILROOM_WEBHOOK_MAX_AGE", "300"))
        except ValueError:
            raise ValueError("MAILROOM_WEBHOOK_MAX_AGE: must be a whole number of seconds") from None
        if not 10 <= max_age <= 86400:
            raise ValueError("MAILROOM_WEBHOOK_MAX_AGE: must be between 10 and 86400 seconds")
        return cls(dsn=dsn, ses_topic_arns=arns, ses_certificates=tuple(certs), ses_confirm=confirm,
                   mailgun_signing_key=mailgun.encode() if mailgun else None,
                   sendgrid_public_key=load_sendgrid_key(sendgrid) if sendgrid else None, max_age=max_age)


def load_certificates(path: str) -> list:
    """Every PEM certificate in a file (SNS's signing certificate)."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"MAILROOM_SES_CERT_FILES: cannot read {path}: {e.strerror}") from None
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ValueError(f"MAILROOM_SES_CERT_FILES: {path} holds no PEM certificate") from None
    for c in certs:
        if not isinstance(c.public_key(), rsa.RSAPublicKey):
            raise ValueError(f"MAILROOM_SES_CERT_FILES: {path}: SNS signs with RSA keys")
    return certs


def load_sendgrid_key(text: str) -> ec.EllipticCurvePublicKey:
    """SendGrid's verification key: PEM, or the base64 DER its settings page shows."""
    try:
        if "BEGIN PUBLIC KEY" in text:
            key = serialization.load_pem_public_key(text.encode())
        else:
            key = serialization.load_der_public_key(base64.b64decode(text, validate=True))
    except (ValueError, binascii.Error):
        raise ValueError("MAILROOM_SENDGRID_PUBLIC_KEY: not a PEM or base64 DER public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise ValueError("MAILROOM_SENDGRID_PUBLIC_KEY: SendGrid signs with an ECDSA P-256 key")
    return key


# -- Amazon SES through SNS ----------------------------------------------------------

# The fields of each SNS message type that are signed, in the order of the
# canonical string (AWS: "Verifying the signatures of Amazon SNS messages").
_SNS_SIGNED = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"),
    "UnsubscribeConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"),
}


def sns_canonical(message: dict) -> bytes:
    """The string SNS signs: each signed field present as "name\\nvalue\\n"
    (Subject only when the message has one)."""
    fields = _SNS_SIGNED[message["Type"]]
    return "".join(f"{k}\n{message[k]}\n" for k in fields if k in message and message[k] is not None).encode()


def verify_sns(message: dict, certificates, topic_arns) -> None:
    """Raise Refused unless the message is signed by one of the configured
    certificates (SignatureVersion 1: SHA1withRSA, 2: SHA256withRSA) and
    comes from a configured topic."""
    if not message.get("Signature") or not message.get("SignatureVersion"):
        raise Refused(401, "unsigned SNS message")
    algorithm = {"1": hashes.SHA1(), "2": hashes.SHA256()}.get(str(message["SignatureVersion"]))
    if algorithm is None:
        raise Refused(403, "unknown SNS SignatureVersion")
    missing = [k for k in _SNS_SIGNED[message["Type"]] if k != "Subject" and not isinstance(message.get(k), str)]
    if missing:
        raise Refused(400, f"SNS message without {', '.join(missing)}")
    try:
        signature = base64.b64decode(message["Signature"], validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise Refused(403, "SNS signature is not base64") from None
    canonical = sns_canonical(message)
    for cert in certificates:
        try:
            cert.public_key().verify(signature, canonical, padding.PKCS1v15(), algorithm)
            break
        except InvalidSignature:
            continue
    else:
        raise Refused(403, "bad SNS signature")
    # Checked after the signature: the topic is part of what was signed.
    if message["TopicArn"] not in topic_arns:
        raise Refused(403, "SNS topic not configured")


def _enhanced(text: object, default: str | None = None) -> str | None:
    m = _ENHANCED.search(str(text)) if text is not None else None
    return f"{m.group(1)}.{m.group(2)}.{m.group(3)}" if m else default


def _detail(*parts) -> str | None:
    text = " ".join(str(p) for p in parts if p not in (None, ""))
    return text[:2000] or None


def _ses_message_id(mail: dict) -> str | None:
    common = mail.get("commonHeaders") or {}
    if isinstance(common.get("messageId"), str):
        return common["messageId"]
    for h in mail.get("headers") or []:
        if isinstance(h, dict) and str(h.get("name", "")).lower() == "message-id":
            return h.get("value")
    return None


def ses_events(notification: dict) -> list[Event]:
    """The events of one SES notification (the SNS Message, parsed): a bounce
    or complaint per recipient, a delivery per recipient."""
    kind = notification.get("notificationType") or notification.get("eventType")
    mail = notification.get("mail")
    if not isinstance(mail, dict):
        raise Refused(400, "SES notification without mail")
    ref = _ses_message_id(mail)
    ses_id = mail.get("messageId")
    events = []
    if kind == "Bounce":
        bounce = notification.get("bounce")
        if not isinstance(bounce, dict) or not isinstance(bounce.get("bouncedRecipients"), list):
            raise Refused(400, "SES Bounce without bounce.bouncedRecipients")
        permanent = bounce.get("bounceType") == "Permanent"
        for r in bounce["bouncedRecipients"]:
            if not isinstance(r, dict) or not isinstance(r.get("emailAddress"), str):
                raise Refused(400, "SES bouncedRecipients entry without emailAddress")
            default = "5.0.0" if permanent else "4.0.0"
            status = _enhanced(r.get("status"), default)
            if permanent != status.startswith("5"):
                status = default  # SES says what kind of bounce it is; the status text may disagree
            events.append(Event(
                kind="bounce" if permanent else "delayed",
                event_key=f"ses:{bounce.get('feedbackId') or ses_id}:{r['emailAddress'].lower()}",
                source="ses", address=r["emailAddress"], message_ref=ref, status=status,
                detail=_detail(bounce.get("bounceType"), bounce.get("bounceSubType"), r.get("diagnosticCode"))))
    elif kind == "Complaint":
        complaint = notification.get("complaint")
        if not isinstance(complaint, dict) or not isinstance(complaint.get("complainedRecipients"), list):
            raise Refused(400, "SES Complaint without complaint.complainedRecipients")
        for r in complaint["complainedRecipients"]:
            if not isinstance(r, dict) or not isinstance(r.get("emailAddress"), str):
                raise Refused(400, "SES complainedRecipients entry without emailAddress")
            events.append(Event(
                kind="complaint",
                event_key=f"ses:{complaint.get('feedbackId') or ses_id}:{r['emailAddress'].lower()}",
                source="ses", address=r["emailAddress"], message_ref=ref,
                detail=_detail("complaint", complaint.get("complaintFeedbackType"))))
    elif kind == "Delivery":
        delivery = notification.get("delivery")
        if not isinstance(delivery, dict) or not isinstance(delivery.get("recipients"), list):
            raise Refused(400, "SES Delivery without delivery.recipients")
        for address in delivery["recipients"]:
            if not isinstance(address, str):
                raise Refused(400, "SES delivery.recipients entry is not an address")
            events.append(Event(
                kind="delivered", event_key=f"ses:delivery:{ses_id}:{address.lower()}", source="ses",
                address=address, message_ref=ref, status=_enhanced(delivery.get("smtpResponse")),
                detail=_detail(delivery.get("smtpResponse"))))
    else:
        raise Refused(400, "SES notification of an unknown type")
    if not ses_id:
        raise Refused(400, "SES notification without mail.messageId")
    return events


# -- Mailgun --------------------------------------------------------------------------


def verify_mailgun(payload: dict, key: bytes, max_age: int, now: float) -> None:
    sig = payload.get("signature")
    if not isinstance(sig, dict) or not all(isinstance(sig.get(k), str) for k in ("timestamp", "token", "signature")):
        raise Refused(401, "unsigned Mailgun webhook")
    expected = hmac.new(key, (sig["timestamp"] + sig["token"]).encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, sig["signature"].lower()):
        raise Refused(403, "bad Mailgun signature")
    try:
        stamp = float(sig["timestamp"])
    except ValueError:
        raise Refused(403, "Mailgun timestamp is not a number") from None
    if abs(now - stamp) > max_age:
        raise Refused(403, "stale Mailgun timestamp")


def mailgun_events(payload: dict) -> list[Event]:
    data = payload.get("event-data")
    if not isinstance(data, dict) or not isinstance(data.get("event"), str) or not isinstance(data.get("id"), str):
        raise Refused(400, "Mailgun webhook without event-data.event and id")
    headers = (data.get("message") or {}).get("headers") or {}
    ref = headers.get("message-id") if isinstance(headers, dict) else None
    status_info = data.get("delivery-status") or {}
    address = data.get("recipient")
    if address is not None and not isinstance(address, str):
        raise Refused(400, "Mailgun recipient is not an address")
    event = data["event"]
    if event == "failed":
        permanent = data.get("severity") == "permanent"
        default = "5.0.0" if permanent else "4.0.0"
        status = _enhanced(status_info.get("enhanced-code") or status_info.get("message")
                           or status_info.get("description"), default)
        if permanent != status.startswith("5"):
            status = default
        kind = "bounce" if permanent else "delayed"
        detail = _detail(status_info.get("code"), status_info.get("message") or status_info.get("description"),
                         data.get("reason"))
    elif event == "delivered":
        kind, status, detail = "delivered", None, _detail(status_info.get("code"), status_info.get("message"))
    elif event == "complained":
        kind, status, detail = "complaint", None, "complaint"
    elif event == "unsubscribed":
        kind, status, detail = "unsubscribe", None, "unsubscribed at Mailgun"
    else:
        return []  # opened, clicked, accepted...: nothing mailroom records
    return [Event(kind=kind, event_key=f"mailgun:{data['id']}", source="mailgun", address=address,
                  message_ref=f"<{ref.strip('<>')}>" if isinstance(ref, str) else None, status=status, detail=detail)]


# -- SendGrid -------------------------------------------------------------------------

SENDGRID_SIGNATURE = "X-Twilio-Email-Event-Webhook-Signature"
SENDGRID_TIMESTAMP = "X-Twilio-Email-Event-Webhook-Timestamp"


def verify_sendgrid(body: bytes, signature: str | None, timestamp: str | None, key, max_age: int, now: float) -> None:
    if not signature or not timestamp:
        raise Refused(401, "unsigned SendGrid webhook")
    try:
        der = base64.b64decode(signature, validate=True)
        key.verify(der, timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    except (binascii.Error, ValueError, InvalidSignature):
        raise Refused(403, "bad SendGrid signature") from None
    try:
        stamp = float(timestamp)
    except ValueError:
        raise Refused(403, "SendGrid timestamp is not a number") from None
    if abs(now - stamp) > max_age:
        raise Refused(403, "stale SendGrid timestamp")


_SENDGRID_KINDS = {"delivered": "delivered", "deferred": "delayed", "spamreport": "complaint",
                   "unsubscribe": "unsubscribe", "group_unsubscribe": "unsubscribe"}


def sendgrid_events(payload) -> list[Event]:
    if not isinstance(payload, list):
        raise Refused(400, "SendGrid webhook is not a JSON array of events")
    events = []
    for e in payload:
        if not isinstance(e, dict) or not isinstance(e.get("event"), str) or not isinstance(e.get("sg_event_id"), str):
            raise Refused(400, "SendGrid event without event and sg_event_id")
        if e["event"] == "bounce":
            # SendGrid's "blocked" bounces are temporary refusals (IP reputation, content).
            kind = "delayed" if e.get("type") == "blocked" else "bounce"
        else:
            kind = _SENDGRID_KINDS.get(e["event"])
        if kind is None:
            continue  # processed, dropped, open, click: nothing mailroom records
        address = e.get("email")
        if address is not None and not isinstance(address, str):
            raise Refused(400, "SendGrid email is not an address")
        status = None
        if kind in ("bounce", "delayed"):
            default = "5.0.0" if kind == "bounce" else "4.0.0"
            status = _enhanced(e.get("status"), default)
            if (kind == "bounce") != status.startswith("5"):
                status = default
        custom = e.get("mailroom_message_id")
        message_id = int(custom) if isinstance(custom, (int, str)) and str(custom).isdigit() else None
        events.append(Event(kind=kind, event_key=f"sendgrid:{e['sg_event_id']}", source="sendgrid", address=address,
                            message_ref=e.get("smtp-id") if isinstance(e.get("smtp-id"), str) else None,
                            message_id=message_id, status=status,
                            detail=_detail(e["event"], e.get("type"), e.get("reason") or e.get("response"))))
    return events


# -- the app --------------------------------------------------------------------------


def record(pool: psycopg_pool.ConnectionPool, events: list[Event]) -> dict:
    """Record a request's events in one transaction. Bad input (22xxx) is a
    Refused(400) and nothing is written; an unreachable database a 503."""
    counts = {"recorded": 0, "replayed": 0}
    if not events:
        return counts
    try:
        with pool.connection(timeout=5) as conn, conn.transaction():
            for ev in events:
                message_id = ev.message_id or (queries.message_by_message_id(conn, ev.message_ref)
                                               if ev.message_ref else None)
                new = queries.record_feedback(conn, kind=ev.kind, message_id=message_id, address=ev.address,
                                              status=ev.status, detail=ev.detail, source=ev.source,
                                              event_key=ev.event_key)
                counts["recorded" if new else "replayed"] += 1
    except queries.QueryError as e:
        if e.sqlstate and e.sqlstate.startswith("22"):
            raise Refused(400, str(e)) from None
        raise
    return counts


def create_app(config: FeedbackConfig, pool: psycopg_pool.ConnectionPool | None = None) -> Flask:
    """The webhook app. `pool` defaults to a small pool on config.dsn, opened now
    so that a bad DSN fails at start."""
    app = Flask("mailroom.feedback")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    if pool is None:
        pool = psycopg_pool.ConnectionPool(config.dsn, min_size=1, max_size=config.pool_size, open=False,
                                           kwargs={"autocommit": True, "row_factory": psycopg.rows.dict_row},
                                           check=psycopg_pool.ConnectionPool.check_connection)
        pool.open(wait=True, timeout=10)
    app.extensions["mailroom_pool"] = pool

    def answer(provider: str, handler):
        try:
            counts = handler()
        except Refused as e:
            logs.event("warning", "webhook.refused", provider=provider, status=e.status, reason=e.reason,
                       remote=request.remote_addr)
            return jsonify(error=e.reason), e.status
        except (queries.QueryError, queries.DatabaseUnavailable) as e:
            logs.event("error", "webhook.db_error", provider=provider, error=str(e))
            return jsonify(error="database unavailable, try again"), 503
        logs.event("info", "webhook.recorded", provider=provider, **counts)
        return jsonify(counts), 200

    def json_body():
        try:
            return json.loads(request.get_data(cache=True))
        except (ValueError, UnicodeDecodeError):
            raise Refused(400, "body is not JSON") from None

    @app.get("/healthz")
    def healthz():
        return jsonify(ok=True)

    @app.post("/webhooks/ses")
    def ses():
        if not config.ses_certificates:
            return jsonify(error="SES is not configured"), 404

        def handle():
            message = json_body()
            if not isinstance(message, dict) or message.get("Type") not in _SNS_SIGNED:
                raise Refused(400, "not an SNS message")
            verify_sns(message, config.ses_certificates, config.ses_topic_arns)
            if message["Type"] == "SubscriptionConfirmation":
                return confirm_subscription(message)
            if message["Type"] == "UnsubscribeConfirmation":
                logs.event("warning", "webhook.sns_unsubscribed", topic=message["TopicArn"])
                return {"recorded": 0, "replayed": 0}
            try:
                notification = json.loads(message["Message"])
            except ValueError:
                raise Refused(400, "SNS Message is not JSON") from None
            if not isinstance(notification, dict):
                raise Refused(400, "SNS Message is not a JSON object")
            return record(pool, ses_events(notification))

        return answer("ses", handle)

    def confirm_subscription(message: dict) -> dict:
        url = message["SubscribeURL"]
        parts = urlsplit(url)
        if parts.scheme != "https" or not re.fullmatch(r"sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?", parts.hostname or ""):
            raise Refused(400, "SubscribeURL is not an https://sns.<region>.amazonaws.com URL")
        if config.ses_confirm == "fetch":
            with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - https to SNS only, checked above
                r.read(65536)
            logs.event("warning", "webhook.sns_confirmed", topic=message["TopicArn"])
            return {"confirmed": True}
        # The operator opens it once (docs/webhooks.md); SNS resends it for three days.
        logs.event("warning", "webhook.sns_confirm_needed", topic=message["TopicArn"], subscribe_url=url)
        return {"confirmed": False, "subscribe_url": url}

    @app.post("/webhooks/mailgun")
    def mailgun():
        if not config.mailgun_signing_key:
            return jsonify(error="Mailgun is not configured"), 404

        def handle():
            payload = json_body()
            if not isinstance(payload, dict):
                raise Refused(400, "Mailgun webhook is not a JSON object")
            verify_mailgun(payload, config.mailgun_signing_key, config.max_age, time.time())
            return record(pool, mailgun_events(payload))

        return answer("mailgun", handle)

    @app.post("/webhooks/sendgrid")
    def sendgrid():
        if config.sendgrid_public_key is None:
            return jsonify(error="SendGrid is not configured"), 404

        def handle():
            body = request.get_data(cache=True)
            verify_sendgrid(body, request.headers.get(SENDGRID_SIGNATURE), request.headers.get(SENDGRID_TIMESTAMP),
                            config.sendgrid_public_key, config.max_age, time.time())
            return record(pool, sendgrid_events(json_body()))

        return answer("sendgrid", handle)

    @app.errorhandler(413)
    def too_large(_e):
        return jsonify(error=f"body larger than {MAX_BODY_BYTES} bytes"), 413

    return app
