"""DKIM signing (RFC 6376, RFC 8463) and Feedback-ID, per sender profile.

A sender profile is the `sender` of a mail ("default", "newsletter", ...).
`mailroom run --dkim SENDER=DOMAIN:SELECTOR:KEYFILE` gives a profile a
signing domain (d=), a selector (s=) and a private key: RSA of at least 2048
bits (rsa-sha256; what RFC 8301 and the big mailbox providers ask) or Ed25519
(ed25519-sha256), as PEM (PKCS#1 or PKCS#8, what `openssl genpkey` writes)
or, for Ed25519, dkimpy's `dknewkey` format (the base64 seed). The algorithm
follows from the key.

Every key is read, checked and used once on a probe message when the runner
starts (`load_profiles`), so a bad key stops the runner with exit code 2
before it claims anything, never in the middle of a drain. Key material is
never logged; the key file's path is.

`Signing.apply` is the one call the send path makes: it adds `Feedback-ID`
to every built mail and, when the mail's sender has a profile, prepends a
`DKIM-Signature` over the final bytes. Mail of a sender without a profile goes
out unsigned. Signing uses dkimpy with relaxed/relaxed canonicalization
(survives the header refolding and trailing-whitespace changes relays make).

One part of dkimpy is replaced: its RSA private-key operation is pure Python
(about 45 ms per 2048-bit signature, 50 times the cost of building the mail),
so for the keys loaded here that one step goes to OpenSSL through
`cryptography` (`_OpenSSLRSA`): dkimpy still parses, canonicalizes, hashes and
writes the DKIM-Signature field. Should a dkimpy release rename what this
hooks, signing falls back to dkimpy's own RSA; either way the probe at start
checks the result with dkimpy's independent verifier.
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Mapping

from mailroom.logs import event
from mailroom.send.render import Built, RenderError

# RFC 8301 section 3.2: 1024 bits is the floor verifiers accept, signers SHOULD
# use 2048; Gmail and Yahoo ask bulk senders for 2048.
MIN_RSA_BITS = 2048

# Header fields to sign when present: RFC 6376 section 5.4.1's list, plus the
# two one-click unsubscribe fields (RFC 8058 section 4: MUST be signed) and
# Feedback-ID (feedback loops only trust a signed one).
SIGNED_HEADERS = (
    "from", "sender", "reply-to", "subject", "date", "message-id", "to", "cc",
    "mime-version", "content-type", "content-transfer-encoding", "content-id", "content-description",
    "resent-date", "resent-from", "resent-sender", "resent-to", "resent-cc", "resent-message-id",
    "in-reply-to", "references",
    "list-id", "list-help", "list-unsubscribe", "list-unsubscribe-post", "list-subscribe", "list-post",
    "list-owner", "list-archive",
    "feedback-id",
)

_SELECTOR = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_FEEDBACK_FIELD_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_CAMPAIGN_KEY = re.compile(r"^campaign:(\d+):")  # enqueue_campaign's delivery keys
_PROBE = (b"From: probe@mailroom.invalid\r\nTo: probe@mailroom.invalid\r\nSubject: probe\r\n"
          b"Date: Thu, 01 Jan 2026 00:00:00 +0000\r\nMessage-ID: <probe@mailroom.invalid>\r\n\r\nprobe\r\n")


class DkimConfigError(ValueError):
    """A --dkim profile that cannot be used; the text names the profile and the reason."""


@dataclass(frozen=True)
class Signer:
    """One sender profile's signing identity: d=, s= and the key, loaded and checked."""

    sender: str
    domain: str
    selector: str
    key_path: str
    algorithm: str  # "rsa-sha256" or "ed25519-sha256"
    bits: int
    dns_record: str  # the TXT record to publish at <selector>._domainkey.<domain>
    _key: bytes = field(repr=False)  # in the form dkimpy takes; never logged
    rsa_engine: str = ""  # "openssl" or "dkimpy" for RSA keys (see _route_rsa_to_openssl)

    def header_list(self, data: bytes) -> list[bytes]:
        """The h= list for this mail: every present field of SIGNED_HEADERS,
        each named once more than it occurs, so that no second instance (a
        second From, Subject, List-Unsubscribe) can be added without breaking
        the signature (RFC 6376 section 8.15, "oversigning")."""
        end = data.find(b"\r\n\r\n")
        head = data if end < 0 else data[:end]
        counts: dict[bytes, int] = {}
        for line in head.split(b"\r\n"):
            if line[:1] in (b" ", b"\t"):
                continue  # a folded continuation
            name = line.split(b":", 1)[0].strip().lower()
            counts[name] = counts.get(name, 0) + 1
        names: list[bytes] = []
        for h in SIGNED_HEADERS:
            n = counts.get(h.encode("ascii"), 0)
            if n:
                names.extend([h.encode("ascii")] * (n + 1))
        return names

    def sign(self, data: bytes) -> bytes:
        """`data` with a DKIM-Signature field prepended."""
        import dkim as dkimpy

        try:
            signature = dkimpy.sign(
                data, self.selector.encode("ascii"), self.domain.encode("ascii"), self._key,
                canonicalize=(b"relaxed", b"relaxed"), signature_algorithm=self.algorithm.encode("ascii"),
                include_headers=self.header_list(data),
            )
        except dkimpy.DKIMException as e:
            raise RenderError(f"dkim: {self.sender}: cannot sign: {e}") from None
        return signature + data


def parse_profile(spec: str) -> tuple[str, str, str, str]:
    """`SENDER=DOMAIN:SELECTOR:KEYFILE` -> (sender, domain as an A-label, selector, key path)."""
    sender, eq, rest = spec.strip().partition("=")
    sender = sender.strip()
    parts = rest.split(":", 2)
    if not eq or not sender or len(parts) != 3 or not all(p.strip() for p in parts):
        raise DkimConfigError(f"--dkim {spec.strip()!r}: expected SENDER=DOMAIN:SELECTOR:/path/to/key.pem")
    domain, selector, path = (p.strip() for p in parts)
    try:
        import idna

        domain = idna.encode(domain.rstrip("."), uts46=True).decode("ascii").lower()
    except idna.IDNAError as e:
        raise DkimConfigError(f"--dkim {sender}: domain {domain!r} is not a domain name ({e})") from None
    if not _SELECTOR.match(selector):
        raise DkimConfigError(f"--dkim {sender}: selector {selector!r} must be DNS labels "
                              "(letters, digits, hyphens, separated by dots)")
    return sender, domain, selector, path


def _read_key(sender: str, path: str) -> tuple[str, int, bytes, str]:
    """(algorithm, bits, key for dkimpy, DNS TXT record) of the key file at path."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

    where = f"--dkim {sender}: key file {path}"
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)  # a PEM key is a few KB; never read an arbitrary file whole
    except OSError as e:
        raise DkimConfigError(f"{where}: cannot read it: {e.strerror}") from None
    text = data.strip()
    if re.fullmatch(rb"[A-Za-z0-9+/]{43}=", text):  # dkimpy's dknewkey --ktype ed25519 output: the seed
        key = ed25519.Ed25519PrivateKey.from_private_bytes(base64.b64decode(text))
    else:
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except TypeError:
            raise DkimConfigError(f"{where}: the key is encrypted; mailroom reads unencrypted PEM only "
                                  "(protect the file instead: readable by the runner's user alone)") from None
        except (ValueError, UnsupportedAlgorithm):
            raise DkimConfigError(f"{where}: not a PEM private key (RSA or Ed25519; PKCS#1 or PKCS#8)") from None
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < MIN_RSA_BITS:
            raise DkimConfigError(f"{where}: an RSA key of {key.key_size} bits is too weak; "
                                  f"at least {MIN_RSA_BITS} bits are required")
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
        _route_rsa_to_openssl(pem, key)
        spki = key.public_key().public_bytes(serialization.Encoding.DER,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)
        return "rsa-sha256", key.key_size, pem, "v=DKIM1; k=rsa; p=" + base64.b64encode(spki).decode("ascii")
    if isinstance(key, ed25519.Ed25519PrivateKey):
        seed = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                 serialization.NoEncryption())
        public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return ("ed25519-sha256", 256, base64.b64encode(seed),
                "v=DKIM1; k=ed25519; p=" + base64.b64encode(public).decode("ascii"))
    kind = type(key).__name__.removeprefix("_").removesuffix("PrivateKey")
    raise DkimConfigError(f"{where}: key type {kind} cannot sign DKIM; use RSA (2048 bits or more) or Ed25519")


class _OpenSSLRSA:
    """What dkimpy gets instead of its parsed RSA key: the same PKCS#1 v1.5
    signature of the same digest (RFC 8017), computed by OpenSSL."""

    def __init__(self, key):
        self.key = key

    def sign(self, digest) -> bytes:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding, utils

        if digest.name.lower() != "sha256":  # rsa-sha1 is never asked for (RFC 8301)
            raise ValueError(f"unexpected digest {digest.name}")
        return self.key.sign(digest.digest(), padding.PKCS1v15(), utils.Prehashed(hashes.SHA256()))


_openssl_keys: dict[bytes, _OpenSSLRSA] = {}  # PEM as handed to dkimpy -> its OpenSSL key


def _route_rsa_to_openssl(pem: bytes, key) -> None:
    """From now on, when dkimpy signs with `pem`, the RSA step runs in OpenSSL.
    dkimpy looks up its key parser and RSA signer by name in its module at
    each call: they are wrapped (once per process) so that a key registered
    here comes back as an _OpenSSLRSA and is signed by it; every other key
    takes dkimpy's own path unchanged."""
    import dkim as dkimpy

    parse, rsa_sign = (getattr(dkimpy, n, None) for n in ("parse_pem_private_key", "RSASSA_PKCS1_v1_5_sign"))
    if not (callable(parse) and callable(rsa_sign)):
        return  # not the dkimpy this was written for: its pure-Python RSA signs instead
    if not getattr(parse, "_mailroom", False):
        def parse_pem_private_key(data, _parse=parse):
            return _openssl_keys.get(data) or _parse(data)

        def RSASSA_PKCS1_v1_5_sign(digest, private_key, _sign=rsa_sign):  # noqa: N802 - dkimpy's name
            if isinstance(private_key, _OpenSSLRSA):
                return private_key.sign(digest)
            return _sign(digest, private_key)

        parse_pem_private_key._mailroom = True
        dkimpy.parse_pem_private_key = parse_pem_private_key
        dkimpy.RSASSA_PKCS1_v1_5_sign = RSASSA_PKCS1_v1_5_sign
    _openssl_keys[pem] = _OpenSSLRSA(key)


def load_signer(spec: str) -> Signer:
    """Read and check one profile's key, and sign and verify a probe message
    with it, so that whatever would fail on the first mail fails now."""
    import dkim as dkimpy

    sender, domain, selector, path = parse_profile(spec)
    algorithm, bits, key, record = _read_key(sender, path)
    engine = ("openssl" if key in _openssl_keys else "dkimpy") if algorithm == "rsa-sha256" else ""
    signer = Signer(sender, domain, selector, path, algorithm, bits, record, key, engine)
    try:
        probe = signer.sign(_PROBE)
        ok = dkimpy.verify(probe, dnsfunc=lambda name, timeout=5: record.encode("ascii"))
    except (RenderError, dkimpy.DKIMException) as e:
        raise DkimConfigError(f"--dkim {sender}: key file {path}: signing a probe failed: {e}") from None
    if not ok:
        raise DkimConfigError(f"--dkim {sender}: key file {path}: a probe signed with it does not verify")
    return signer


def load_profiles(specs) -> dict[str, Signer]:
    """Every --dkim entry (empty ones skipped) by sender, each logged once it
    is loaded (the key's path, never the key); a sender named twice is an error."""
    signers: dict[str, Signer] = {}
    for spec in specs:
        if not spec.strip():
            continue
        signer = load_signer(spec)
        if signer.sender in signers:
            raise DkimConfigError(f"--dkim {signer.sender}: given twice")
        signers[signer.sender] = signer
    for s in signers.values():
        event(logging.INFO, "dkim.profile", sender=s.sender, domain=s.domain, selector=s.selector,
              algorithm=s.algorithm, bits=s.bits, rsa=s.rsa_engine or None, key=s.key_path)
        if key_readable_by_others(s.key_path):
            event(logging.WARNING, "dkim.key_readable_by_others", key=s.key_path,
                  note="make it readable by the runner's user only (chmod 600)")
    return signers


def key_readable_by_others(path: str) -> bool:
    """True when group or others may read the key file (it should be the runner user's alone)."""
    try:
        return bool(os.stat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    except OSError:
        return False


def _feedback_field(value: str) -> str:
    # Colons separate the fields; receivers compare them as opaque tokens.
    return _FEEDBACK_FIELD_UNSAFE.sub("-", value)[:64] or "-"


def feedback_id(row: dict, id_domain: str) -> str:
    """`campaign:stream:sender:id-domain` (Gmail's Feedback-ID layout, the
    last field the constant sender identifier). claim_batch returns no
    campaign id or stream yet: a campaign is recognised by its delivery key
    (`campaign:<id>:<recipient>`, as enqueue_campaign writes it) and its mail
    is broadcast; all other mail is transactional, campaign field "tx". When
    claim_batch returns `campaign_id` / `stream` columns, they are used instead."""
    campaign = row.get("campaign_id")
    if campaign is None:
        m = _CAMPAIGN_KEY.match(row.get("delivery_key") or "")
        campaign = m.group(1) if m else None
    stream = row.get("stream") or ("broadcast" if campaign is not None else "transactional")
    return _feedback_value(str(campaign) if campaign is not None else "tx", stream, row.get("sender") or "default",
                           id_domain)


@functools.lru_cache(maxsize=4096)
def _feedback_value(campaign: str, stream: str, sender: str, id_domain: str) -> str:
    """The same few values on every mail of a campaign and sender: built once."""
    return ":".join(_feedback_field(f) for f in (campaign, stream, sender, id_domain))


@functools.lru_cache(maxsize=4096)
def _feedback_line(value: str) -> bytes:
    return b"Feedback-ID: " + value.encode("ascii") + b"\r\n"


class Signing:
    """What the send path calls on every built mail, right before the transport."""

    def __init__(self, signers: Mapping[str, Signer], id_domain: str):
        self.signers = dict(signers)
        self.id_domain = id_domain

    def apply(self, row: dict, built: Built) -> Built:
        data = built.data
        headers = row.get("headers")
        if not (headers and isinstance(headers, dict) and any(k.lower() == "feedback-id" for k in headers)):
            # An application's own Feedback-ID wins; one mail carries one.
            data = _feedback_line(feedback_id(row, self.id_domain)) + data
        signer = self.signers.get(row.get("sender") or "default")
        if signer is not None:
            data = signer.sign(data)
        return built.with_data(data)
