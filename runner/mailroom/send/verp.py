"""VERP: an envelope sender that names its mail.

Each mail of a sender profile configured with `--verp SENDER=BOUNCE_DOMAIN`
leaves with MAIL FROM `bounce+<message id>.<tag>@<bounce domain>`, so the
DSN any MTA sends back for it (RFC 3464: to the envelope sender) says which
mail bounced even when it quotes nothing of the original. The From header is
unchanged.

The tag is the first 10 base32 characters (50 bits) of an HMAC-SHA256 of
`mailroom-verp:<message id>` under the signing keys (the same keyring as the
unsubscribe tokens; the prefix keeps a MAC made for one purpose from being
valid for another). Why 10: a forger must guess 2^50 tags on average for one
bounce that suppresses one address that already got mail, each guess a mail
delivered to the bounce domain, so shorter would do; 10 keeps the local part
at 37 characters at most (RFC 5321's limit is 64) and on one line of any
DSN. Base32 in lower case because some MTAs change the case of local parts:
tags are compared case-insensitively. The key id is not in the address: the
receiver tries every key of the ring (the current one first), so a rotated
key still matches its old bounces.

Keys: the keyring of runner/mailroom/signing.py (--signing-keys,
MAILROOM_SIGNING_KEYS_FILE or MAILROOM_SIGNING_KEYS). Never logged, never in
the database.
"""

from __future__ import annotations

import base64
import hmac
import re
from dataclasses import dataclass

from mailroom.signing import Keyring

TAG_LENGTH = 10
_PURPOSE = b"mailroom-verp:"
# bounce+<id>.<tag>@domain; the id is a positive bigint (at most 19 digits)
_ADDRESS = re.compile(r"^bounce\+([1-9][0-9]{0,18})\.([a-z2-7]{%d})@(.+)$" % TAG_LENGTH, re.IGNORECASE)
_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,61}[a-z0-9]$")


class VerpConfigError(ValueError):
    """A bad --verp entry or missing keys: a usage error, restarting will not help."""


def _tag(mac: bytes) -> str:
    return base64.b32encode(mac).decode("ascii")[:TAG_LENGTH].lower()


def _payload(message_id: int) -> bytes:
    return _PURPOSE + str(message_id).encode("ascii")


@dataclass(frozen=True)
class Verp:
    """Makes and checks VERP addresses with the signing keyring."""

    keyring: Keyring

    def address(self, message_id: int, bounce_domain: str) -> str:
        return f"bounce+{message_id}.{_tag(self.keyring.sign(_payload(message_id))[1])}@{bounce_domain}"

    def parse(self, address: str) -> tuple[int | None, str]:
        """(message id, "ok") for a VERP address whose tag verifies under any
        key of the ring; (None, why) otherwise: "not_verp" for another
        address, "bad_verp_signature" for a forged or mangled one."""
        m = _ADDRESS.match(address.strip().strip("<>"))
        if not m:
            return None, "not_verp"
        message_id, tag = int(m.group(1)), m.group(2).lower()
        ok = False
        for mac in self.keyring.macs(_payload(message_id)):  # every key, no early exit: timing says nothing
            ok |= hmac.compare_digest(_tag(mac), tag)
        return (message_id, "ok") if ok else (None, "bad_verp_signature")


def parse_profiles(specs) -> dict[str, str]:
    """--verp SENDER=BOUNCE_DOMAIN entries (empty ones skipped) by sender."""
    domains: dict[str, str] = {}
    for spec in specs:
        if not spec.strip():
            continue
        sender, sep, domain = spec.strip().partition("=")
        sender, domain = sender.strip(), domain.strip().lower().rstrip(".")
        if not sep or not sender or not domain:
            raise VerpConfigError(f"--verp {spec!r}: expected SENDER=BOUNCE_DOMAIN")
        if not _DOMAIN.match(domain):
            raise VerpConfigError(f"--verp {sender}: {domain!r} is not a domain name")
        if sender in domains:
            raise VerpConfigError(f"--verp {sender}: given twice")
        domains[sender] = domain
    return domains
