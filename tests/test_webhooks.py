"""Provider webhooks (runner/mailroom/web/feedback_app.py) on a real WSGI server
on loopback, against a real database, with signatures made by this test's own
keys and certificate: valid events are recorded once; forged, unsigned,
stale, replayed and malformed requests are refused or change nothing."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID
from psycopg.rows import dict_row
from werkzeug.serving import make_server

from mailroom.web import feedback_app
from mailroom.send.render import message_id as runner_message_id
from tests.operatorkit import as_user

TOPIC = "arn:aws:sns:eu-west-1:123456789012:mailroom-ses"
MID_DOMAIN = "mail.shop.example"
MAILGUN_KEY = b"key-" + b"m" * 32


def _certificate(key: rsa.RSAPrivateKey) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.eu-west-1.amazonaws.com")])
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30)).sign(key, hashes.SHA256()))


class Keys:
    """The test's own signing material: SNS's (an RSA key and its certificate,
    plus a stranger's key for forgeries), Mailgun's HMAC key, SendGrid's P-256 key."""

    def __init__(self, tmp_path_factory):
        self.sns = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.cert_file = tmp_path_factory.mktemp("sns") / "sns.pem"
        self.cert_file.write_bytes(_certificate(self.sns).public_bytes(serialization.Encoding.PEM))
        self.sendgrid = ec.generate_private_key(ec.SECP256R1())
        self.sendgrid_public_b64 = base64.b64encode(self.sendgrid.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode()
        self.sendgrid_stranger = ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Keys:
    return Keys(tmp_path_factory)


@pytest.fixture(scope="module")
def service(module_db_url, keys) -> Iterator[dict]:
    """The webhook app under werkzeug's server on 127.0.0.1, logged in as a
    role that is a member of mailroom_feedback only."""
    role = f"t_feedback_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(module_db_url, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN IN ROLE mailroom_feedback')
    config = feedback_app.FeedbackConfig.from_env({
        "MAILROOM_DSN": as_user(module_db_url, role),
        "MAILROOM_SES_TOPIC_ARNS": TOPIC,
        "MAILROOM_SES_CERT_FILES": str(keys.cert_file),
        "MAILROOM_MAILGUN_SIGNING_KEY": MAILGUN_KEY.decode(),
        "MAILROOM_SENDGRID_PUBLIC_KEY": keys.sendgrid_public_b64,
    })
    app = feedback_app.create_app(config)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"url": f"http://127.0.0.1:{server.server_port}", "db": module_db_url}
    finally:
        server.shutdown()
        app.extensions["mailroom_pool"].close()
        with psycopg.connect(module_db_url, autocommit=True) as admin:
            admin.execute(f'DROP ROLE "{role}"')


@pytest.fixture
def db(service) -> Iterator[psycopg.Connection]:
    with psycopg.connect(service["db"], autocommit=True, row_factory=dict_row) as c:
        yield c


def post(service, path: str, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(service["url"] + path, data=body, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def sent_mail(db, address: str) -> tuple[int, str]:
    """A mail that a runner sent: (its id, the Message-ID the runner gave it)."""
    key = f"hook:{uuid.uuid4().hex}"
    mail_id = db.execute("SELECT mailroom.enqueue(%s, 'Hi', 'text', p_delivery_key => %s) AS id",
                         (address, key)).fetchone()["id"]
    row = db.execute("SELECT * FROM mailroom.claim_batch('hooks-test', 100)").fetchall()
    token = next(r["lease_token"] for r in row if r["id"] == mail_id)
    db.execute("SELECT mailroom.mark_outcome(%s, %s, 'sent')", (mail_id, token))
    return mail_id, runner_message_id(key, mail_id, MID_DOMAIN)


def footprint(db) -> dict:
    """What feedback can write: event rows, suppressions, ledger rows."""
    return db.execute("SELECT (SELECT count(*) FROM mailroom.feedback_events) AS events,"
                      " (SELECT count(*) FROM mailroom.suppressions) AS suppressions,"
                      " (SELECT count(*) FROM mailroom.attempts) AS ledger").fetchone()


def events_for(db, event_key: str) -> list[dict]:
    return db.execute("SELECT kind, message_id, address, status, source FROM mailroom.feedback_events"
                      " WHERE event_key = %s", (event_key,)).fetchall()


# -- SES through SNS ----------------------------------------------------------------


def sns_message(keys: Keys, notification: dict | None, *, version: str = "2", signer=None,
                topic: str = TOPIC, kind: str = "Notification", extra: dict | None = None) -> dict:
    m = {"Type": kind, "MessageId": str(uuid.uuid4()), "TopicArn": topic,
         "Message": json.dumps(notification) if notification is not None else "confirm",
         "Timestamp": "2026-12-01T10:00:00.000Z", "SignatureVersion": version,
         "SigningCertURL": "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-x.pem"}
    if kind == "SubscriptionConfirmation":
        m["Token"] = "2336412f37fb687f5d51e6e2425"
        m["SubscribeURL"] = ("https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription"
                             f"&TopicArn={topic}&Token=2336412f37fb687f5d51e6e2425")
    m.update(extra or {})
    algorithm = hashes.SHA1() if version == "1" else hashes.SHA256()
    m["Signature"] = base64.b64encode((signer or keys.sns).sign(feedback_app.sns_canonical(m), padding.PKCS1v15(),
                                                                 algorithm)).decode()
    return m


def ses_bounce(message_ref: str, address: str, *, bounce_type: str = "Permanent", status: str = "5.1.1") -> dict:
    return {"notificationType": "Bounce",
            "bounce": {"bounceType": bounce_type, "bounceSubType": "General", "feedbackId": str(uuid.uuid4()),
                       "bouncedRecipients": [{"emailAddress": address, "action": "failed", "status": status,
                                              "diagnosticCode": f"smtp; 550 {status} user unknown"}]},
            "mail": {"messageId": "0100018c-" + uuid.uuid4().hex, "source": "noreply@shop.example",
                     "destination": [address], "commonHeaders": {"messageId": message_ref}}}


@pytest.mark.parametrize("version", ["1", "2"])
def test_ses_permanent_bounce_is_recorded_once(service, keys, db, version):
    mail_id, ref = sent_mail(db, f"gone-{version}@example.org")
    notification = ses_bounce(ref, f"gone-{version}@example.org")
    body = json.dumps(sns_message(keys, notification, version=version)).encode()
    assert post(service, "/webhooks/ses", body) == (200, {"recorded": 1, "replayed": 0})
    key = f"ses:{notification['bounce']['feedbackId']}:gone-{version}@example.org"
    assert events_for(db, key) == [{"kind": "bounce", "message_id": mail_id, "address": f"gone-{version}@example.org",
                                    "status": "5.1.1", "source": "ses"}]
    assert db.execute("SELECT count(*) AS n FROM mailroom.attempts WHERE message_id = %s AND outcome = 'bounced'",
                      (mail_id,)).fetchone()["n"] == 1
    assert db.execute("SELECT reason FROM mailroom.suppressions WHERE address = %s",
                      (f"gone-{version}@example.org",)).fetchone()["reason"] == "hard_bounce"

    # The same SNS message delivered again (SNS retries): nothing changes twice.
    before = footprint(db)
    assert post(service, "/webhooks/ses", body) == (200, {"recorded": 0, "replayed": 1})
    assert footprint(db) == before


def test_ses_transient_bounce_complaint_and_delivery(service, keys, db):
    mail_id, ref = sent_mail(db, "full@example.org")
    transient = ses_bounce(ref, "full@example.org", bounce_type="Transient", status="4.2.2")
    assert post(service, "/webhooks/ses", json.dumps(sns_message(keys, transient)).encode())[0] == 200
    assert events_for(db, f"ses:{transient['bounce']['feedbackId']}:full@example.org")[0]["kind"] == "delayed"
    assert db.execute("SELECT count(*) AS n FROM mailroom.suppressions WHERE address = 'full@example.org'"
                      ).fetchone()["n"] == 0

    complaint = {"notificationType": "Complaint",
                 "complaint": {"feedbackId": str(uuid.uuid4()), "complaintFeedbackType": "abuse",
                               "complainedRecipients": [{"emailAddress": "full@example.org"}]},
                 "mail": transient["mail"]}
    delivery = {"notificationType": "Delivery", "mail": transient["mail"],
                "delivery": {"recipients": ["full@example.org"], "smtpResponse": "250 2.6.0 Message received"}}
    for n in (complaint, delivery):
        assert post(service, "/webhooks/ses", json.dumps(sns_message(keys, n)).encode()) == \
            (200, {"recorded": 1, "replayed": 0})
    kinds = db.execute("SELECT kind, status FROM mailroom.feedback_events WHERE message_id = %s ORDER BY id",
                       (mail_id,)).fetchall()
    assert kinds == [{"kind": "delayed", "status": "4.2.2"}, {"kind": "complaint", "status": None},
                     {"kind": "delivered", "status": "2.6.0"}]
    assert db.execute("SELECT reason FROM mailroom.suppressions WHERE address = 'full@example.org'"
                      ).fetchone()["reason"] == "complaint"


def test_ses_refusals_write_nothing(service, keys, db):
    _, ref = sent_mail(db, "target@example.org")
    good = sns_message(keys, ses_bounce(ref, "target@example.org"))
    unsigned = {k: v for k, v in good.items() if k != "Signature"}
    forged = sns_message(keys, ses_bounce(ref, "target@example.org"), signer=keys.stranger)
    tampered = dict(good, Message=json.dumps(ses_bounce(ref, "someone-else@example.org")))
    other_topic = sns_message(keys, ses_bounce(ref, "target@example.org"),
                              topic="arn:aws:sns:eu-west-1:999999999999:attacker")
    no_mail = sns_message(keys, {"notificationType": "Bounce", "bounce": {"bounceType": "Permanent"}})
    not_json_inside = sns_message(keys, None)  # Message "confirm": signed, but not a notification
    before = footprint(db)
    cases = [
        (json.dumps(unsigned).encode(), 401),
        (json.dumps(forged).encode(), 403),
        (json.dumps(tampered).encode(), 403),
        (json.dumps(other_topic).encode(), 403),
        (json.dumps(dict(good, SignatureVersion="3")).encode(), 403),
        (json.dumps(no_mail).encode(), 400),
        (json.dumps(not_json_inside).encode(), 400),
        (b"{not json", 400),
        (json.dumps({"Type": "Notification"}).encode(), 401),
        (json.dumps(["Notification"]).encode(), 400),
    ]
    got = [post(service, "/webhooks/ses", body)[0] for body, _ in cases]
    assert got == [status for _, status in cases]
    assert footprint(db) == before


def test_ses_subscription_confirmation_is_returned_not_fetched(service, keys, db):
    before = footprint(db)
    status, answer = post(service, "/webhooks/ses",
                          json.dumps(sns_message(keys, None, kind="SubscriptionConfirmation")).encode())
    # Fetching it would have failed (no network here): the URL is handed to the operator instead.
    assert status == 200
    assert answer["confirmed"] is False
    assert answer["subscribe_url"].startswith("https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription")
    forged = sns_message(keys, None, kind="SubscriptionConfirmation", signer=keys.stranger)
    assert post(service, "/webhooks/ses", json.dumps(forged).encode())[0] == 403
    assert footprint(db) == before


# -- Mailgun --------------------------------------------------------------------------


def mailgun_body(message_ref: str, address: str, *, event: str = "failed", severity: str = "permanent",
                 timestamp: float | None = None, key: bytes = MAILGUN_KEY, event_id: str | None = None) -> bytes:
    ts = str(int(timestamp if timestamp is not None else time.time()))
    token = uuid.uuid4().hex
    signature = hmac.new(key, (ts + token).encode(), hashlib.sha256).hexdigest()
    return json.dumps({
        "signature": {"timestamp": ts, "token": token, "signature": signature},
        "event-data": {"event": event, "severity": severity, "id": event_id or uuid.uuid4().hex,
                       "recipient": address, "reason": "bounce",
                       "delivery-status": {"code": 550, "message": "5.1.1 The email account does not exist"},
                       "message": {"headers": {"message-id": message_ref.strip("<>")}}},
    }).encode()


def test_mailgun_permanent_failure_is_recorded_once(service, db):
    mail_id, ref = sent_mail(db, "mg-gone@example.org")
    event_id = uuid.uuid4().hex
    body = mailgun_body(ref, "mg-gone@example.org", event_id=event_id)
    assert post(service, "/webhooks/mailgun", body) == (200, {"recorded": 1, "replayed": 0})
    assert events_for(db, f"mailgun:{event_id}") == [{"kind": "bounce", "message_id": mail_id,
                                                      "address": "mg-gone@example.org", "status": "5.1.1",
                                                      "source": "mailgun"}]
    before = footprint(db)
    assert post(service, "/webhooks/mailgun", body) == (200, {"recorded": 0, "replayed": 1})
    # Mailgun retrying with a fresh token and signature is the same event too.
    assert post(service, "/webhooks/mailgun", mailgun_body(ref, "mg-gone@example.org", event_id=event_id)) == \
        (200, {"recorded": 0, "replayed": 1})
    assert footprint(db) == before


def test_mailgun_refusals_write_nothing(service, db):
    _, ref = sent_mail(db, "mg-target@example.org")
    good = json.loads(mailgun_body(ref, "mg-target@example.org"))
    before = footprint(db)
    cases = [
        (json.dumps({"event-data": good["event-data"]}).encode(), 401),
        (mailgun_body(ref, "mg-target@example.org", key=b"not-the-key-" + b"x" * 24), 403),
        (json.dumps({"signature": dict(good["signature"], signature="0" * 64),
                     "event-data": good["event-data"]}).encode(), 403),
        (mailgun_body(ref, "mg-target@example.org", timestamp=time.time() - 3600), 403),
        (mailgun_body(ref, "not an address"), 400),
        (json.dumps({"signature": good["signature"], "event-data": {"event": "failed"}}).encode(), 400),
        (b"\xff\xfe", 400),
    ]
    assert [post(service, "/webhooks/mailgun", body)[0] for body, _ in cases] == [s for _, s in cases]
    assert footprint(db) == before


# -- SendGrid -------------------------------------------------------------------------


def sendgrid_request(keys: Keys, events: list[dict] | bytes, *, signer=None, timestamp: float | None = None):
    body = events if isinstance(events, bytes) else json.dumps(events).encode()
    ts = str(int(timestamp if timestamp is not None else time.time()))
    signature = (signer or keys.sendgrid).sign(ts.encode() + body, ec.ECDSA(hashes.SHA256()))
    return body, {feedback_app.SENDGRID_SIGNATURE: base64.b64encode(signature).decode(),
                  feedback_app.SENDGRID_TIMESTAMP: ts}


def sg_event(event: str, address: str, ref: str, **extra) -> dict:
    return {"email": address, "timestamp": int(time.time()), "smtp-id": ref, "event": event,
            "sg_event_id": uuid.uuid4().hex, "sg_message_id": "sg." + uuid.uuid4().hex, **extra}


def test_sendgrid_batch_is_recorded_once(service, keys, db):
    gone_id, gone_ref = sent_mail(db, "sg-gone@example.org")
    fine_id, fine_ref = sent_mail(db, "sg-fine@example.org")
    angry_id, _ = sent_mail(db, "sg-angry@example.org")
    events = [sg_event("bounce", "sg-gone@example.org", gone_ref, type="bounce", status="5.1.1",
                       reason="550 5.1.1 unknown user"),
              sg_event("delivered", "sg-fine@example.org", fine_ref, response="250 OK"),
              # Found by the custom argument an integration set, not by smtp-id.
              sg_event("spamreport", "sg-angry@example.org", "<unknown@elsewhere>", mailroom_message_id=angry_id),
              sg_event("open", "sg-fine@example.org", fine_ref)]
    body, headers = sendgrid_request(keys, events)
    assert post(service, "/webhooks/sendgrid", body, headers) == (200, {"recorded": 3, "replayed": 0})
    got = db.execute("SELECT kind, message_id FROM mailroom.feedback_events WHERE source = 'sendgrid'"
                     " AND message_id = ANY (%s) ORDER BY id", ([gone_id, fine_id, angry_id],)).fetchall()
    assert got == [{"kind": "bounce", "message_id": gone_id}, {"kind": "delivered", "message_id": fine_id},
                   {"kind": "complaint", "message_id": angry_id}]
    before = footprint(db)
    body, headers = sendgrid_request(keys, events)  # SendGrid retries the batch, newly signed
    assert post(service, "/webhooks/sendgrid", body, headers) == (200, {"recorded": 0, "replayed": 3})
    assert footprint(db) == before


def test_sendgrid_refusals_write_nothing(service, keys, db):
    _, ref = sent_mail(db, "sg-target@example.org")
    events = [sg_event("bounce", "sg-target@example.org", ref, type="bounce", status="5.1.1")]
    body, headers = sendgrid_request(keys, events)
    forged_body, forged_headers = sendgrid_request(keys, events, signer=keys.sendgrid_stranger)
    stale_body, stale_headers = sendgrid_request(keys, events, timestamp=time.time() - 3600)
    # One bad event in a batch: the whole batch is refused, the good one is not recorded either.
    mixed = events + [sg_event("bounce", "not an address", ref, type="bounce", status="5.1.1")]
    mixed_body, mixed_headers = sendgrid_request(keys, mixed)
    junk_body, junk_headers = sendgrid_request(keys, b"[{]")
    before = footprint(db)
    cases = [
        (body, {}, 401),
        (body, {feedback_app.SENDGRID_TIMESTAMP: headers[feedback_app.SENDGRID_TIMESTAMP]}, 401),
        (forged_body, forged_headers, 403),
        (body.replace(b"5.1.1", b"5.1.2"), headers, 403),
        (body, dict(headers, **{feedback_app.SENDGRID_SIGNATURE: "not base64!"}), 403),
        (stale_body, stale_headers, 403),
        (mixed_body, mixed_headers, 400),
        (junk_body, junk_headers, 400),
    ]
    assert [post(service, "/webhooks/sendgrid", b, h)[0] for b, h, _ in cases] == [s for _, _, s in cases]
    assert footprint(db) == before


def test_configuration_errors_name_the_variable(keys, tmp_path):
    with pytest.raises(ValueError, match="MAILROOM_DSN"):
        feedback_app.FeedbackConfig.from_env({})
    with pytest.raises(ValueError, match="set both or neither"):
        feedback_app.FeedbackConfig.from_env({"MAILROOM_DSN": "x", "MAILROOM_SES_TOPIC_ARNS": TOPIC})
    (tmp_path / "bad.pem").write_text("not a certificate")
    with pytest.raises(ValueError, match="holds no PEM certificate"):
        feedback_app.FeedbackConfig.from_env({"MAILROOM_DSN": "x", "MAILROOM_SES_TOPIC_ARNS": TOPIC,
                                              "MAILROOM_SES_CERT_FILES": str(tmp_path / "bad.pem")})
    rsa_pub = base64.b64encode(keys.sns.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode()
    with pytest.raises(ValueError, match="ECDSA P-256"):
        feedback_app.FeedbackConfig.from_env({"MAILROOM_DSN": "x", "MAILROOM_SENDGRID_PUBLIC_KEY": rsa_pub})
    key_file = tmp_path / "mailgun.key"
    key_file.write_text(MAILGUN_KEY.decode() + "\n")
    config = feedback_app.FeedbackConfig.from_env({"MAILROOM_DSN": "x", "MAILROOM_MAILGUN_SIGNING_KEY_FILE": str(key_file)})
    assert config.mailgun_signing_key == MAILGUN_KEY
