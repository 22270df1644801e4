"""Who may use the console: operator accounts with scrypt-hashed passwords.

Accounts come from a file or an environment variable, one per line
``name:scrypt$N$r$p$SALT$HASH`` (``mailroom web --hash-password`` prints the
hash). Passwords are never stored, logged or compared in plain text: a login
hashes what was typed with the account's salt and compares the digests in
constant time; an unknown name costs the same hash, so timing does not tell
which names exist.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

# scrypt's recommended interactive cost (RFC 7914 §2: N = 2^14, r = 8, p = 1),
# ~16 MiB and ~50 ms a login.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
_MAXMEM = 64 * 1024 * 1024


class CredentialsError(ValueError):
    """A users file or variable that cannot be used (says which line, never the hash)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=_MAXMEM, dklen=32)


def hash_password(password: str) -> str:
    """The stored form of a password: ``scrypt$N$r$p$SALT$HASH`` (base64url)."""
    if not password:
        raise CredentialsError("the password must not be empty")
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


@dataclass(frozen=True)
class _Stored:
    n: int
    r: int
    p: int
    salt: bytes
    digest: bytes


def _parse_hash(text: str) -> _Stored:
    parts = text.split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        raise CredentialsError("not an scrypt$N$r$p$SALT$HASH hash (make one with mailroom web --hash-password)")
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, digest = _unb64(parts[4]), _unb64(parts[5])
    except ValueError:
        raise CredentialsError("a malformed scrypt hash") from None
    if n < 2**14 or n & (n - 1) or not (1 <= r <= 32) or not (1 <= p <= 16) or len(salt) < 16 or len(digest) != 32:
        raise CredentialsError("scrypt parameters too weak or malformed (N >= 16384, a power of two; 16-byte salt)")
    return _Stored(n, r, p, salt, digest)


# An unknown user name is checked against this, so it costs what a known one does.
_DUMMY = _Stored(SCRYPT_N, SCRYPT_R, SCRYPT_P, b"\0" * 16, b"\0" * 32)


class Accounts:
    """Operator accounts: name -> stored hash."""

    def __init__(self, accounts: dict[str, _Stored]):
        self._accounts = accounts

    @classmethod
    def parse(cls, text: str, source: str) -> "Accounts":
        accounts: dict[str, _Stored] = {}
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, stored = line.partition(":")
            if not sep or not name.strip():
                raise CredentialsError(f"{source}, line {lineno}: expected NAME:HASH")
            try:
                accounts[name.strip()] = _parse_hash(stored.strip())
            except CredentialsError as e:
                raise CredentialsError(f"{source}, line {lineno} ({name.strip()}): {e}") from None
        if not accounts:
            raise CredentialsError(f"{source}: no accounts (lines NAME:HASH)")
        return cls(accounts)

    def __len__(self) -> int:
        return len(self._accounts)

    def check(self, name: str, password: str) -> bool:
        return _matches(self._accounts.get(name), password)


def _matches(stored: _Stored | None, password: str) -> bool:
    known = stored is not None
    stored = stored or _DUMMY
    digest = _scrypt(password, stored.salt, stored.n, stored.r, stored.p)
    return hmac.compare_digest(digest, stored.digest) and known


def check_password(stored_hash: str | None, password: str) -> bool:
    """Whether password matches a stored scrypt$N$r$p$SALT$HASH (None or a
    malformed hash: False, at the cost of a real check all the same)."""
    try:
        stored = _parse_hash(stored_hash) if stored_hash is not None else None
    except CredentialsError:
        stored = None
    return _matches(stored, password)
