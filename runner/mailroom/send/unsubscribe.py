"""One-click unsubscribe (RFC 8058): tokens, and the headers the runner adds.

A token names the address, the stream and the message, and is signed with
HMAC-SHA256 under a key of the keyring (mailroom.signing) that the runner and
the unsubscribe service both read; the key id travels in the token, so after
a rotation old mail still unsubscribes. It is `KID.PAYLOAD.MAC`: PAYLOAD is
base64url of `1 LF message-id LF stream LF address` (UTF-8), MAC base64url of
the HMAC over a fixed context line and PAYLOAD's bytes (the context keeps a
token from being confused with anything else a key may sign). Only
[A-Za-z0-9_.-]: safe in a URL path and in a mailto local part. At most
MAX_TOKEN characters (a 254-octet address fits); anything longer is refused
before it is decoded.

Mail of a stream whose `unsubscribe_headers` is true (mailroom.streams) gets

    List-Unsubscribe: <https://BASE/u/TOKEN>, <mailto:unsubscribe+TOKEN@DOMAIN>
    List-Unsubscribe-Post: List-Unsubscribe=One-Click

when the runner has an unsubscribe URL for the mail's sender (profile), and
templates of that mail see `{{ unsubscribe_url }}` (the same URL: a GET shows
the confirmation page). DKIM signs both headers (mailroom.send.dkim.SIGNED_HEADERS).
A row that sets List-Unsubscribe itself keeps its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from mailroom.send.render import Built
from mailroom.signing import KEY_ID, Keyring, b64url_decode, b64url_encode

CONTEXT = b"mailroom/unsubscribe/v1\n"
MAX_TOKEN = 600
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,16}\.[A-Za-z0-9_-]{8,520}\.[A-Za-z0-9_-]{43}")
_STREAM = re.compile(r"[a-z][a-z0-9_-]{0,39}")
ONE_CLICK = "List-Unsubscribe=One-Click"


class TokenError(ValueError):
    """The token is malformed or its signature does not verify."""


@dataclass(frozen=True)
class Subject:
    """What a verified token names."""

    address: str
    stream: str
    message_id: int


def make_token(keyring: Keyring, address: str, stream: str, message_id: int) -> str:
    payload = f"1\n{int(message_id)}\n{stream}\n{address}".encode("utf-8")
    kid, mac = keyring.sign(CONTEXT + payload)
    return f"{kid}.{b64url_encode(payload)}.{b64url_encode(mac)}"


def read_token(keyring: Keyring, token: str) -> Subject:
    """The subject of a token whose signature verifies; TokenError otherwise
    (nothing about the token is trusted before the MAC checks out)."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN or not _TOKEN.fullmatch(token):
        raise TokenError("malformed token")
    kid, encoded, encoded_mac = token.split(".")
    try:
        payload, mac = b64url_decode(encoded), b64url_decode(encoded_mac)
    except ValueError:
        raise TokenError("malformed token") from None
    if not KEY_ID.fullmatch(kid) or not keyring.verify(kid, CONTEXT + payload, mac):
        raise TokenError("bad signature")
    try:
        version, message_id, stream, address = payload.decode("utf-8").split("\n")
    except (UnicodeDecodeError, ValueError):
        raise TokenError("malformed payload") from None  # signed by us, so never in practice
    if version != "1" or not message_id.isdigit() or not _STREAM.fullmatch(stream) or "@" not in address:
        raise TokenError("malformed payload")
    return Subject(address, stream, int(message_id))


def _per_sender(values: tuple[str, ...] | list[str], what: str) -> dict[str | None, str]:
    """`[SENDER=]VALUE` entries: a plain value is the default (key None)."""
    out: dict[str | None, str] = {}
    for entry in values:
        sender, sep, value = entry.partition("=")
        if not sep or "://" in sender or "@" in sender:  # no sender: the whole entry is the value
            sender, value = None, entry
        if not value:
            raise ValueError(f"{what}: {entry!r} has no value")
        if sender in out:
            raise ValueError(f"{what}: {'the default' if sender is None else repr(sender)} given twice")
        out[sender] = value.strip()
    return out


@dataclass
class Unsubscribe:
    """The runner's unsubscribe step: which mail gets the headers, with what."""

    keyring: Keyring | None
    base_urls: dict[str | None, str]       # sender (None: default) -> https://host[/prefix]
    mailto_domains: dict[str | None, str]  # sender (None: default) -> domain
    streams: dict[str, bool]               # stream -> unsubscribe_headers

    @classmethod
    def configure(cls, urls, mailto_domains, keyring: Keyring | None) -> "Unsubscribe":
        base_urls = _per_sender(urls, "--unsubscribe-url")
        domains = _per_sender(mailto_domains, "--unsubscribe-mailto")
        for sender, url in base_urls.items():
            # At most 200 characters: with a token of MAX_TOKEN the header's
            # longest line stays under RFC 5322's 998 octets.
            if len(url) > 200 or not re.fullmatch(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?", url):
                raise ValueError(f"--unsubscribe-url: {url!r} is not an http(s) URL of a host and a path")
            base_urls[sender] = url.rstrip("/")
        for domain in domains.values():
            if len(domain) > 100 or not re.fullmatch(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+", domain):
                raise ValueError(f"--unsubscribe-mailto: {domain!r} is not a domain")
        if base_urls and keyring is None:
            raise ValueError("--unsubscribe-url needs signing keys (--signing-keys, MAILROOM_SIGNING_KEYS_FILE "
                             "or MAILROOM_SIGNING_KEYS)")
        return cls(keyring, base_urls, domains, {})

    @property
    def enabled(self) -> bool:
        return bool(self.base_urls)

    def url_for(self, row: dict) -> str | None:
        """The mail's unsubscribe URL, or None when it gets no headers."""
        if not self.base_urls or not self.streams.get(row.get("stream") or "transactional"):
            return None
        sender = row.get("sender") or "default"
        base = self.base_urls.get(sender) or self.base_urls.get(None)
        if base is None:
            return None
        return f"{base}/u/{make_token(self.keyring, row['to_address'], row['stream'], row['id'])}"

    def apply(self, row: dict, built: Built, url: str | None) -> Built:
        """Prepend the two headers (before DKIM signs the mail)."""
        if url is None:
            return built
        headers = row.get("headers")
        if isinstance(headers, dict) and any(k.lower() == "list-unsubscribe" for k in headers):
            return built  # the application's own wins; one mail carries one
        # Written directly (ASCII by construction, each URL one word of at
        # most ~830 characters): folded between the two URLs, the only place
        # RFC 2369 allows a line break outside the brackets.
        sender = row.get("sender") or "default"
        domain = self.mailto_domains.get(sender) or self.mailto_domains.get(None)
        mailto = f",\r\n <mailto:unsubscribe+{url.rsplit('/', 1)[1]}@{domain}>" if domain else ""
        lines = f"List-Unsubscribe: <{url}>{mailto}\r\nList-Unsubscribe-Post: {ONE_CLICK}\r\n"
        return built.with_data(lines.encode("ascii") + built.data)


def load_keyring_if_any(path: str | None, environ: Mapping[str, str] | None = None) -> Keyring | None:
    """The keyring when one is configured (a path or either variable), else None."""
    import os

    from mailroom.signing import ENV_FILE, ENV_KEYS

    env = os.environ if environ is None else environ
    if not (path or env.get(ENV_FILE) or env.get(ENV_KEYS)):
        return None
    return Keyring.load(path, env)
