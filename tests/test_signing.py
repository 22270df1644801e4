"""The signing keyring (mailroom.signing) and the unsubscribe token
(mailroom.unsubscribe) without a database: the contract the runner, the
unsubscribe service and the inbound-mail handler share.

- The first key signs, every key verifies (rotation); an unknown key id, a
  changed payload or a changed MAC do not verify.
- The file, MAILROOM_SIGNING_KEYS_FILE and MAILROOM_SIGNING_KEYS are read in
  that order; a malformed keyring is refused naming the source and line,
  never the secret, and no repr shows a secret.
- Tokens are URL- and mailto-safe, bounded, and say what they were made from.
"""

from __future__ import annotations

import re

import pytest

from mailroom.signing import ENV_FILE, ENV_KEYS, Keyring, SigningKeyError, b64url_encode, new_key_line
from mailroom.send.unsubscribe import MAX_TOKEN, TokenError, make_token, read_token

SECRET = b"s" * 32


def test_first_key_signs_every_key_verifies():
    old = Keyring([("old", SECRET)])
    rotated = Keyring.parse(f"new={b64url_encode(b'n' * 40)}\nold={b64url_encode(SECRET)}\n")
    kid, mac = old.sign(b"payload")
    assert kid == "old" and len(mac) == 32
    assert rotated.current_id == "new" and rotated.sign(b"payload")[0] == "new"
    assert rotated.verify(kid, b"payload", mac), "a key kept after the rotation still verifies"
    assert not rotated.verify(kid, b"payload!", mac)
    assert not rotated.verify(kid, b"payload", bytes([mac[0] ^ 1]) + mac[1:])
    assert not rotated.verify("gone", b"payload", mac), "an unknown key id does not verify"
    assert not Keyring([("old", b"t" * 32)]).verify(kid, b"payload", mac), "the same id, another secret"


def test_sources_in_order(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# comment\n\n" + new_key_line("file1") + "\n")
    env = {ENV_FILE: str(path), ENV_KEYS: new_key_line("env1") + " " + new_key_line("env2")}
    assert Keyring.load(None, env).current_id == "file1"
    assert Keyring.load(None, {ENV_KEYS: env[ENV_KEYS]}).key_ids == ["env1", "env2"]
    explicit = tmp_path / "explicit"
    explicit.write_text(new_key_line("cli") + "\n")
    assert Keyring.load(str(explicit), env).current_id == "cli", "a path given wins"
    with pytest.raises(SigningKeyError, match="no signing keys"):
        Keyring.load(None, {})


@pytest.mark.parametrize("text, message", [
    ("k1", "line 1: expected KEYID=BASE64URL_SECRET"),
    ("k1=" + b64url_encode(b"short"), "the secret must be at least 32 bytes"),
    ("k1=not*base64*" + "A" * 40, "line 1: the secret of key 'k1' is not base64url"),
    # a fixed id: the keys are new each run, and parallel workers must collect the same tests
    pytest.param(new_key_line("k1") + "\n" + new_key_line("k1"), "key id 'k1' appears twice", id="k1-twice"),
    ("bad.id=" + b64url_encode(SECRET), "key id 'bad.id'"),
    ("# only a comment\n", "holds no key"),
])
def test_malformed_keyrings_are_refused_without_the_secret(text, message):
    with pytest.raises(SigningKeyError) as e:
        Keyring.parse(text, source="test keys")
    assert message in str(e.value) and str(e.value).startswith("test keys")
    for word in re.findall(r"=(\S+)", text):
        assert word not in str(e.value), "an error message showed a secret"


def test_repr_and_missing_file_show_no_secret(tmp_path):
    line = new_key_line("k1")
    ring = Keyring.parse(line)
    assert line.split("=", 1)[1] not in repr(ring) and "k1" in repr(ring)
    with pytest.raises(SigningKeyError, match="No such file"):
        Keyring.load(str(tmp_path / "missing"), {})


def test_tokens_round_trip_and_stay_bounded():
    ring = Keyring.parse(new_key_line("k2026"))
    longest = "a" * 64 + "@" + ".".join(["b" * 62] * 3) + ".cc"   # 254 octets
    for address in ("ann@example.org", "jürgen@bücher.example", longest):
        token = make_token(ring, address, "broadcast", 9_223_372_036_854_775_807)
        assert re.fullmatch(r"[A-Za-z0-9_.-]+", token) and len(token) <= MAX_TOKEN
        subject = read_token(ring, token)
        assert (subject.address, subject.stream, subject.message_id) == (address, "broadcast", 9_223_372_036_854_775_807)
    with pytest.raises(TokenError):
        read_token(ring, token[:-1])
    with pytest.raises(TokenError):
        read_token(Keyring.parse(new_key_line("k2026")), token)
