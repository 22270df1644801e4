"""A submitted MIME mail as mailroom.enqueue's arguments.

mailroom builds the MIME structure of every mail itself (text and HTML as
multipart/alternative, its own Message-ID and Date, To from the envelope:
runner/mailroom/send/render.py), so a submitted mail is taken apart into
what enqueue stores: the subject, the text and HTML bodies, and the other
headers as given (From, Reply-To, In-Reply-To, References, X-...). What
mailroom cannot carry is refused with a reason, never dropped silently:
attachments, inline images and any other part (554 5.6.1), a header given
twice (550 5.6.0). Trace and structure headers are replaced by the runner's
own (DROPPED).

The mail's identity for a client's retry: X-Mailroom-Key when given, else
its Message-ID (RFC 5322: one Message-ID, one mail). Without either, a
retry after a lost 250 is a second mail.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import re
from dataclasses import dataclass, field

# Replaced by the mail mailroom builds: the envelope names the recipient
# (one mail each), the runner writes the structure, Message-ID and Date,
# the receiving server the trace headers.
DROPPED = frozenset({
    "to", "cc", "bcc", "subject", "message-id", "date", "mime-version", "content-type",
    "content-transfer-encoding", "content-disposition", "content-id", "content-description", "return-path",
    "received", "delivered-to", "x-mailroom-key", "dkim-signature",
})
IDENTITY_HEADERS = ("from", "sender")
_FOLD = re.compile(r"\r?\n[ \t]+")


class Refused(Exception):
    """The mail cannot be queued: `reply` is the SMTP answer (code, enhanced code, reason)."""

    def __init__(self, reply: str):
        super().__init__(reply)
        self.reply = reply


@dataclass
class Submitted:
    subject: str
    body_text: str | None
    body_html: str | None
    headers: dict[str, str]
    identities: dict[str, list[str]] = field(default_factory=dict)  # from/sender -> addresses (lower case)
    key: str | None = None  # X-Mailroom-Key or Message-ID

    def delivery_key(self, username: str, recipient: str) -> str | None:
        """One mail per (login, key, recipient): a retry of the same submission
        is the same mail; another login's mail with the same Message-ID is not."""
        if self.key is None:
            return None
        digest = hashlib.sha256("\n".join((username, self.key, recipient.lower())).encode("utf-8", "surrogatepass"))
        return "submit:" + digest.hexdigest()


def _text(part) -> str:
    try:
        return part.get_content()
    except (LookupError, UnicodeError, ValueError) as e:
        raise Refused(f"554 5.6.0 a {part.get_content_type()} part cannot be decoded ({type(e).__name__})") from None


def _bodies(msg) -> tuple[str | None, str | None]:
    kind = msg.get_content_type()
    if kind == "text/plain":
        return _text(msg), None
    if kind == "text/html":
        return None, _text(msg)
    if kind == "multipart/mixed" and len(msg.get_payload()) == 1:
        return _bodies(msg.get_payload()[0])  # a mixed wrapper around the body alone
    if kind == "multipart/alternative":
        found: dict[str, str] = {}
        for part in msg.iter_parts():
            sub = part.get_content_type()
            if sub not in ("text/plain", "text/html") or sub in found or part.get_content_disposition() == "attachment":
                raise Refused(f"554 5.6.1 multipart/alternative may hold one text/plain and one text/html part, "
                              f"not {sub}: mailroom builds the MIME structure itself")
            found[sub] = _text(part)
        if found:
            return found.get("text/plain"), found.get("text/html")
    raise Refused(f"554 5.6.1 {kind} is not supported: mailroom takes text/plain, text/html or "
                  "multipart/alternative of the two (no attachments or inline parts)")


def parse(raw: bytes) -> Submitted:
    """The submitted mail, or Refused with the SMTP answer that says why not."""
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    if msg.defects and any(isinstance(d, email.errors.MissingHeaderBodySeparatorDefect) for d in msg.defects):
        raise Refused("554 5.6.0 malformed header section")
    headers: dict[str, str] = {}
    seen: dict[str, str] = {}
    identities: dict[str, list[str]] = {}
    for name in msg.keys():
        low = name.lower()
        if low in seen and low not in ("received", "dkim-signature"):
            raise Refused(f"550 5.6.0 header {name} appears more than once: mailroom keeps one of each")
        seen[low] = name
        if low in IDENTITY_HEADERS:
            try:
                addresses = msg[name].addresses
            except (AttributeError, IndexError, ValueError):
                raise Refused(f"550 5.6.0 {name}: not an address") from None
            identities[low] = [a.addr_spec.lower() for a in addresses]
        if low in DROPPED:
            continue
        try:
            value = str(msg[name])
        except (ValueError, LookupError, UnicodeError):
            raise Refused(f"550 5.6.0 {name}: cannot be decoded") from None
        headers[name] = _FOLD.sub(" ", value).strip()
    body_text, body_html = _bodies(msg)
    key = msg.get("X-Mailroom-Key") or msg.get("Message-ID")
    key = str(key).strip() if key is not None else None
    subject = _FOLD.sub(" ", str(msg.get("Subject", ""))).strip()
    return Submitted(subject=subject, body_text=body_text, body_html=body_html, headers=headers,
                     identities=identities, key=key or None)


def may_send_as(allowed: list[str], address: str) -> bool:
    """Whether an address is one of the login's identities: the address
    itself, or @its-domain."""
    address = address.lower().strip()
    local, at, domain = address.rpartition("@")
    if not at or not local or not domain:
        return False
    return address in allowed or "@" + domain.rstrip(".") in allowed
