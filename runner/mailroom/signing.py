"""HMAC-SHA256 signing keys shared by the runner and the HTTP services.

A keyring is text, one key per line: `KEYID=BASE64URL_SECRET`, the secret at
least 32 bytes once decoded (`mailroom signing-key` prints a fresh line). The
first key signs; every key verifies, so a key is rotated by putting a new
line first and keeping the old one until the last mail signed with it no
longer matters (see docs/unsubscribe.md). Blank lines and lines starting with
`#` are ignored.

Where it comes from, first found wins: a path given on the command line, the
file named by `MAILROOM_SIGNING_KEYS_FILE`, the value of
`MAILROOM_SIGNING_KEYS` (lines separated by newlines or spaces). Never from
the database. Secrets are never logged, never part of an error message or a
repr: errors name the source and the line number only.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import re
import secrets
from typing import Mapping

ENV_FILE = "MAILROOM_SIGNING_KEYS_FILE"
ENV_KEYS = "MAILROOM_SIGNING_KEYS"
MIN_SECRET_BYTES = 32
# Short: the key id travels in every token (and so in every List-Unsubscribe).
KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,16}")


class SigningKeyError(ValueError):
    """The keyring cannot be read or is malformed (the message holds no secret)."""


def b64url_decode(text: str) -> bytes:
    """Decode base64url with or without padding; raise ValueError on anything else."""
    if not re.fullmatch(r"[A-Za-z0-9_-]*={0,2}", text):
        raise ValueError("not base64url")
    text = text.rstrip("=")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64url") from exc


def b64url_encode(data: bytes) -> str:
    """base64url without padding (what tokens and key files use)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def new_key_line(key_id: str) -> str:
    """A fresh `KEYID=SECRET` line (32 random bytes) for a keyring."""
    if not KEY_ID.fullmatch(key_id):
        raise SigningKeyError(f"key id {key_id!r}: 1 to 16 of A-Z a-z 0-9 _ -")
    return f"{key_id}={b64url_encode(secrets.token_bytes(MIN_SECRET_BYTES))}"


class Keyring:
    """HMAC-SHA256 keys by id; the first one signs."""

    def __init__(self, keys: list[tuple[str, bytes]]):
        if not keys:
            raise SigningKeyError("the keyring holds no key")
        seen: set[str] = set()
        for kid, secret in keys:
            if not KEY_ID.fullmatch(kid):
                raise SigningKeyError(f"key id {kid!r}: 1 to 16 of A-Z a-z 0-9 _ -")
            if kid in seen:
                raise SigningKeyError(f"key id {kid!r} appears twice")
            if len(secret) < MIN_SECRET_BYTES:
                raise SigningKeyError(f"key {kid!r}: the secret must be at least {MIN_SECRET_BYTES} bytes")
            seen.add(kid)
        self._keys: dict[str, bytes] = dict(keys)
        self.current_id: str = keys[0][0]

    def __repr__(self) -> str:  # never the secrets
        return f"Keyring(current={self.current_id!r}, ids={list(self._keys)!r})"

    @property
    def key_ids(self) -> list[str]:
        return list(self._keys)

    @classmethod
    def parse(cls, text: str, source: str = "keyring") -> "Keyring":
        """Read `KEYID=BASE64URL_SECRET` lines; `source` names the origin in errors."""
        keys: list[tuple[str, bytes]] = []
        for number, line in enumerate(re.split(r"[\r\n]+", text), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            for entry in line.split():  # the environment form may put keys on one line
                kid, sep, encoded = entry.partition("=")
                if not sep or not kid:
                    raise SigningKeyError(f"{source}, line {number}: expected KEYID=BASE64URL_SECRET")
                try:
                    secret = b64url_decode(encoded)
                except ValueError:
                    raise SigningKeyError(f"{source}, line {number}: the secret of key {kid!r} is not base64url") from None
                keys.append((kid, secret))
        try:
            return cls(keys)
        except SigningKeyError as exc:
            raise SigningKeyError(f"{source}: {exc}") from None

    @classmethod
    def load(cls, path: str | None = None, environ: Mapping[str, str] | None = None, *,
             env_file: str = ENV_FILE, env_inline: str = ENV_KEYS, what: str = "signing keys") -> "Keyring":
        """From `path`, else the file named in env_file (MAILROOM_SIGNING_KEYS_FILE), else the
        keys in env_inline (MAILROOM_SIGNING_KEYS). The webhook secrets are read the same way
        under their own variables."""
        env = os.environ if environ is None else environ
        path = path or env.get(env_file) or None
        if path:
            try:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
                raise SigningKeyError(f"{what} file {path}: {reason}") from None
            return cls.parse(text, source=f"{what} file {path}")
        if env.get(env_inline):
            return cls.parse(env[env_inline], source=env_inline)
        raise SigningKeyError(f"no {what}: give a keys file, or set {env_file} or {env_inline}")

    def secret(self, kid: str) -> bytes:
        """The secret of key kid (webhook signing: each endpoint names its key)."""
        return self._keys[kid]

    def sign(self, payload: bytes) -> tuple[str, bytes]:
        """(key id, HMAC-SHA256 of payload) under the current key."""
        # hmac.digest: OpenSSL's one-shot HMAC, a fraction of hmac.new()'s cost per mail
        return self.current_id, hmac.digest(self._keys[self.current_id], payload, "sha256")

    def verify(self, kid: str, payload: bytes, mac: bytes) -> bool:
        """True when mac is payload's HMAC under key kid (constant time; unknown kid: False)."""
        secret = self._keys.get(kid)
        if secret is None:
            return False
        return hmac.compare_digest(hmac.digest(secret, payload, "sha256"), mac)

    def macs(self, payload: bytes) -> list[bytes]:
        """payload's HMAC-SHA256 under every key, the current one first: for
        short tags that carry no key id (VERP, mailroom.send.verp), checked against
        each in turn."""
        return [hmac.digest(secret, payload, "sha256") for secret in self._keys.values()]
