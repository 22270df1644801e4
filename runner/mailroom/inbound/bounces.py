"""What an inbound mail to the bounce domain says: DSN, ARF, unsubscribe,
auto-reply, or nothing mailroom can use.

`classify(raw, envelope_from, rcpts, verp)` is pure (no database, no
network): it returns a Verdict with the feedback to record or the reason to
keep the mail as unparsed. mailroom inbound (inbound_server.py) stores it.

Formats:
- DSN, RFC 3464: multipart/report; report-type=delivery-status, with a
  message/delivery-status part (per-message fields, then one block per
  recipient: Final-Recipient, Original-Recipient, Action, Status,
  Diagnostic-Code) and usually the original's headers (text/rfc822-headers
  or message/rfc822). Action failed with a 5.x.x status is a bounce; delayed
  (or failed with a 4.x.x status: the MTA gave up on this mail, the address
  may be fine) is delayed; delivered is delivered; relayed and expanded say
  nothing and are skipped.
- ARF, RFC 5965: multipart/report; report-type=feedback-report with a
  message/feedback-report part (Feedback-Type, Original-Mail-From,
  Original-Rcpt-To, ...) and the original (message/rfc822 or
  text/rfc822-headers). Every Feedback-Type but "not-spam" is a complaint;
  "not-spam" is kept unparsed for an operator.
- mailto: unsubscribe (RFC 8058's other form, RFC 2369 List-Unsubscribe):
  any mail to unsubscribe+TOKEN@ the bounce domain.
- Auto-replies (RFC 3834 Auto-Submitted other than "no", X-Autoreply,
  X-Autorespond, Precedence auto_reply, "Out of office" / "Automatic reply"
  subjects) that are not reports: recognised and ignored.

Which mail: the VERP address, verified (verp.py). The DSN was sent to it (the
RCPT), or an ARF report quotes it (Original-Mail-From, or the original's
Return-Path). A report whose VERP tag does not verify, or that names no mail,
is kept unparsed: an unsigned report could suppress anyone. When the report
also quotes the original Message-ID, the server checks it against the mail
(feedback_message_id_matches).

Limits (everything past them is kept unparsed, reason too_large, never
parsed further): 25 MiB a message (the server's SMTP SIZE; larger mail is
refused with 552 by the protocol), 64 KiB for the delivery-status or
feedback-report part, 200 MIME parts, 50 recipient blocks, 60 Received
headers (more: reason loop).
"""

from __future__ import annotations

import email
import email.policy
import email.utils
import hashlib
import re
from dataclasses import dataclass, field
from email.message import Message

from mailroom.send.verp import Verp

MAX_MESSAGE_BYTES = 25 * 1024 * 1024
MAX_REPORT_PART_BYTES = 64 * 1024
MAX_PARTS = 200
MAX_RECIPIENT_BLOCKS = 50
MAX_RECEIVED = 60
MAX_DETAIL = 2000

_UNSUBSCRIBE_RCPT = re.compile(r"^unsubscribe\+([A-Za-z0-9_.=-]{1,600})@", re.IGNORECASE)
_STATUS = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")
_SMTP_CODE = re.compile(r"\b([245])\d\d\b")
_AUTO_REPLY_SUBJECT = re.compile(
    r"^\s*(out of (the )?office|automatic reply|auto(matic)?[- ]?(reply|response)|autoreply|abwesenheit|"
    r"r[ée]ponse automatique|respuesta autom[aá]tica|vacation|away from (my )?(e-?mail|office))",
    re.IGNORECASE)


@dataclass(frozen=True)
class Feedback:
    """One record_feedback call."""

    kind: str  # bounce, delayed, complaint, delivered, unsubscribe
    message_id: int | None
    address: str | None
    status: str | None
    detail: str | None
    source: str
    event_key: str


@dataclass
class Verdict:
    feedback: list[Feedback] = field(default_factory=list)
    unparsed: str | None = None  # the reason to keep it, when not used
    ignored: str | None = None  # recognised and deliberately not used (auto-reply)
    quoted_message_id: str | None = None  # the original's Message-ID, for the server's check
    kind: str = ""  # dsn, arf, unsubscribe, auto_reply, unparsed (for logs and metrics)


def _unparsed(reason: str) -> Verdict:
    return Verdict(unparsed=reason[:500], kind="unparsed")


def classify(raw: bytes, envelope_from: str, rcpts: list[str], verp: Verp,
             unsubscribe_token=None) -> Verdict:
    """What the mail says. `unsubscribe_token(token) -> (message_id, address)`
    or None when the token does not verify; without it every unsubscribe is
    kept unparsed."""
    try:
        return _classify(raw, envelope_from, rcpts, verp, unsubscribe_token)
    except _Unusable as e:
        return _unparsed(str(e))
    except RecursionError:
        return _unparsed("malformed_mime: nested too deep")
    except Exception as e:  # noqa: BLE001 - whatever a hostile mail makes the parser do, it is kept, never fatal
        return _unparsed(f"parse_error: {type(e).__name__}: {e}")


def _classify(raw, envelope_from, rcpts, verp, unsubscribe_token) -> Verdict:
    if len(raw) > MAX_MESSAGE_BYTES:
        return _unparsed(f"too_large: {len(raw)} bytes (limit {MAX_MESSAGE_BYTES})")
    head_end = raw.find(b"\r\n\r\n")
    head_end = raw.find(b"\n\n") if head_end < 0 else head_end
    if head_end <= 0 or b":" not in raw[:head_end]:
        return _unparsed("malformed_mime: no header block")
    msg = email.message_from_bytes(raw, policy=email.policy.compat32)
    if msg.defects and any(type(d).__name__ in ("MissingHeaderBodySeparatorDefect",) for d in msg.defects):
        return _unparsed("malformed_mime: " + ", ".join(type(d).__name__ for d in msg.defects)[:200])
    received = msg.get_all("Received") or []
    if len(received) > MAX_RECEIVED:
        return _unparsed(f"loop: {len(received)} Received headers (limit {MAX_RECEIVED})")
    # Mail from one of our own VERP addresses is a report bouncing back: a loop.
    sent_by, _ = verp.parse(envelope_from or "")
    if sent_by is not None:
        return _unparsed(f"loop: sent from the bounce address {envelope_from[:200]}")
    parts = 0
    for _ in msg.walk():
        parts += 1
        if parts > MAX_PARTS:
            return _unparsed(f"too_large: more than {MAX_PARTS} MIME parts")

    for rcpt in rcpts:
        m = _UNSUBSCRIBE_RCPT.match(rcpt)
        if m:
            return _unsubscribe(m.group(1), raw, unsubscribe_token)

    content_type = msg.get_content_type()
    report_type = (msg.get_param("report-type") or "").lower() if content_type == "multipart/report" else ""
    if report_type == "delivery-status":
        return _dsn(msg, raw, rcpts, verp)
    if report_type == "feedback-report":
        return _arf(msg, raw, rcpts, verp)
    if _is_auto_reply(msg):
        return Verdict(ignored="auto_reply", kind="auto_reply")
    # Some MTAs send bounces that are not RFC 3464 reports (plain text); the
    # VERP address still names the mail, but the text is no contract.
    return _unparsed(f"no_report: {content_type}" + (f"; report-type={report_type}" if report_type else ""))


def _is_auto_reply(msg: Message) -> bool:
    auto = (msg.get("Auto-Submitted") or "").strip().lower()
    if auto and not auto.startswith("no"):
        return True
    # (not X-Auto-Response-Suppress: it asks others not to auto-reply, and a
    # person's reply may carry it)
    if msg.get("X-Autoreply") or msg.get("X-Autorespond"):
        return True
    if (msg.get("Precedence") or "").strip().lower() == "auto_reply":
        return True
    return bool(_AUTO_REPLY_SUBJECT.match(str(msg.get("Subject") or "")))


def _mail_by_rcpt(rcpts: list[str], verp: Verp) -> tuple[int | None, str]:
    """The mail the report was sent about, by the VERP address it was sent to."""
    why = "unmatched: no VERP address among the recipients"
    for rcpt in rcpts:
        mid, what = verp.parse(rcpt)
        if mid is not None:
            return mid, "ok"
        if what == "bad_verp_signature":
            why = f"bad_verp_signature: {rcpt[:200]}"
    return None, why


def _report_blocks(msg: Message, content_type: str) -> list[Message]:
    """The field blocks of the report's machine-readable part."""
    for part in msg.walk():
        if part.get_content_type() == content_type:
            return _field_blocks(part)
    raise _Unusable(f"malformed_report: multipart/report without a {content_type} part")


def _field_blocks(part: Message) -> list[Message]:
    """The header blocks of a message/delivery-status or feedback-report part
    (the parser gives message/* parts as sub-messages; a part sent as text is
    parsed here)."""
    payload = part.get_payload()
    if isinstance(payload, list):
        size = sum(len(m.as_bytes()) for m in payload)
        if size > MAX_REPORT_PART_BYTES:
            raise _Unusable(f"too_large: report part of {size} bytes (limit {MAX_REPORT_PART_BYTES})")
        return payload
    text = part.get_payload(decode=True) or b""
    if len(text) > MAX_REPORT_PART_BYTES:
        raise _Unusable(f"too_large: report part of {len(text)} bytes (limit {MAX_REPORT_PART_BYTES})")
    text = text.replace(b"\r\n", b"\n")
    return [email.message_from_bytes(b, policy=email.policy.compat32) for b in re.split(rb"\n[ \t]*\n", text) if b.strip()]


class _Unusable(Exception):
    """The report cannot be used; the message is the reason it is kept."""


def _original_headers(msg: Message) -> Message | None:
    """The returned original (its headers at least), if the report has it."""
    for part in msg.walk():
        ctype = part.get_content_type()
        if ctype == "message/rfc822":
            payload = part.get_payload()
            if isinstance(payload, list) and payload:
                return payload[0]
        if ctype in ("text/rfc822-headers", "text/rfc822-header"):
            return email.message_from_bytes(part.get_payload(decode=True) or b"", policy=email.policy.compat32)
    return None


def _quoted_message_id(original: Message | None) -> str | None:
    value = original.get("Message-ID") if original is not None else None
    return _text(value).strip()[:1000] or None if value else None


def _address_of(value: str | None) -> str | None:
    """`rfc822; ann@example.com` or `<ann@example.com>` -> ann@example.com."""
    if not value:
        return None
    value = _text(value).strip()
    if ";" in value:
        addr_type, _, value = value.partition(";")
        if addr_type.strip().lower() not in ("rfc822", ""):
            return None
    value = value.strip().strip("<>").strip()
    return value if re.fullmatch(r"[^\s@<>]{1,64}@[^\s@<>]{1,255}", value) else None


def _text(value) -> str:
    """Header text as valid UTF-8: the parser keeps undecodable bytes as
    surrogates, which the database (rightly) refuses."""
    return str(value).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _detail(text: str | None) -> str | None:
    if not text:
        return None
    return " ".join(_text(text).split())[:MAX_DETAIL]


def _event_id(msg: Message, raw: bytes) -> str:
    """The report's own identity: its Message-ID (the same on every redelivery
    of this report), else a digest of its bytes."""
    own = (msg.get("Message-ID") or "").strip()
    if own:
        return hashlib.sha256(own.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return hashlib.sha256(raw).hexdigest()[:32]


def _dsn(msg: Message, raw: bytes, rcpts: list[str], verp: Verp) -> Verdict:
    message_id, why = _mail_by_rcpt(rcpts, verp)
    if message_id is None:
        return _unparsed(why)
    blocks = _report_blocks(msg, "message/delivery-status")
    if len(blocks) > MAX_RECIPIENT_BLOCKS + 1:
        return _unparsed(f"too_large: {len(blocks) - 1} recipient blocks (limit {MAX_RECIPIENT_BLOCKS})")
    event_id = _event_id(msg, raw)
    original = _original_headers(msg)
    verdict = Verdict(kind="dsn", quoted_message_id=_quoted_message_id(original))
    for block in blocks:
        action = (block.get("Action") or "").strip().lower()
        if not action:
            continue  # the per-message block (Reporting-MTA, Arrival-Date, ...)
        address = _address_of(block.get("Original-Recipient")) or _address_of(block.get("Final-Recipient"))
        diagnostic = block.get("Diagnostic-Code")
        status = _status(block.get("Status"), diagnostic)
        if action == "failed" and status and status.startswith("5"):
            kind = "bounce"
        elif action == "failed" and status is None and _smtp_code(diagnostic) == "5":
            kind, status = "bounce", "5.0.0"
        elif action in ("failed", "delayed"):
            kind = "delayed"
        elif action == "delivered":
            kind = "delivered"
        else:
            continue  # relayed, expanded: nothing to learn
        verdict.feedback.append(Feedback(
            kind=kind, message_id=message_id, address=address, status=status,
            detail=_detail(diagnostic or block.get("Status")), source="dsn",
            event_key=f"dsn:{event_id}:{message_id}:{(address or '').lower()}:{action}"))
    if not verdict.feedback:
        return _unparsed("malformed_report: no recipient block with an Action")
    return verdict


def _status(value: str | None, diagnostic: str | None) -> str | None:
    m = _STATUS.search(value or "") or _STATUS.search(diagnostic or "")
    return f"{m.group(1)}.{int(m.group(2))}.{int(m.group(3))}" if m else None


def _smtp_code(diagnostic: str | None) -> str | None:
    m = _SMTP_CODE.search(diagnostic or "")
    return m.group(1) if m else None


def _arf(msg: Message, raw: bytes, rcpts: list[str], verp: Verp) -> Verdict:
    blocks = _report_blocks(msg, "message/feedback-report")
    fields = blocks[0] if blocks else Message()
    feedback_type = (fields.get("Feedback-Type") or "").strip().lower()
    if not feedback_type:
        return _unparsed("malformed_report: feedback-report without Feedback-Type")
    if feedback_type == "not-spam":
        return _unparsed("not_spam: a feedback report that the mail is not spam")
    original = _original_headers(msg)
    # The mail: the report's Original-Mail-From, or the original's
    # Return-Path (the envelope sender its receiver saw), else the address
    # the report came to.
    candidates = [fields.get("Original-Mail-From")]
    if original is not None:
        candidates += original.get_all("Return-Path") or []
    message_id, why = None, "unmatched: the report names no VERP address"
    for candidate in [c for c in candidates if c] + list(rcpts):
        mid, what = verp.parse(str(candidate).strip())
        if mid is not None:
            message_id = mid
            break
        if what == "bad_verp_signature":
            why = f"bad_verp_signature: {str(candidate)[:200]}"
    if message_id is None:
        return _unparsed(why)
    # Feedback loops often redact the recipient (Microsoft JMRP): the mail's
    # own address is used then (record_feedback resolves it).
    address = _address_of(fields.get("Original-Rcpt-To"))
    if address is None and original is not None:
        address = _address_of(email.utils.parseaddr(str(original.get("To") or ""))[1])
    event_id = _event_id(msg, raw)
    return Verdict(kind="arf", quoted_message_id=_quoted_message_id(original), feedback=[Feedback(
        kind="complaint", message_id=message_id, address=address, status=None,
        detail=_detail(f"{feedback_type}; {fields.get('User-Agent') or ''}".strip("; ")), source="arf",
        event_key=f"arf:{event_id}:{message_id}")])


def _unsubscribe(token: str, raw: bytes, unsubscribe_token) -> Verdict:
    if unsubscribe_token is None:
        return _unparsed("unsubscribe_unverified: no unsubscribe token verifier configured")
    found = unsubscribe_token(token)
    if not found:
        return _unparsed("bad_unsubscribe_token")
    message_id, address = found
    # One token unsubscribes once, however often its mail is sent.
    return Verdict(kind="unsubscribe", feedback=[Feedback(
        kind="unsubscribe", message_id=message_id, address=address, status=None, detail="mailto: List-Unsubscribe",
        source="mailto", event_key="mailto:" + hashlib.sha256(token.encode()).hexdigest()[:32])])
