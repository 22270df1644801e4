"""VERP addresses (runner/mailroom/verp.py) and the runner's --verp option.
The whole path through a real MTA is tests/test_postfix_dsn.py."""

from __future__ import annotations

import base64
import os
import subprocess
import sys

import pytest

from mailroom import exitcodes, verp


def _key_line(kid: str, secret: bytes) -> str:
    return f"{kid}={base64.urlsafe_b64encode(secret).decode().rstrip('=')}"


def test_an_address_names_its_mail_and_verifies_under_any_key_of_the_ring():
    old, new = os.urandom(32), os.urandom(32)
    before = verp.Verp((old,))
    address = before.address(12345, "bounces.example.com")
    assert address.startswith("bounce+12345.") and address.endswith("@bounces.example.com")
    assert len(address.split("@")[0]) == len("bounce+12345.") + verp.TAG_LENGTH
    rotated = verp.Verp((new, old))  # new current key; the old one still verifies
    assert rotated.parse(address) == (12345, "ok")
    assert rotated.parse(address.upper()) == (12345, "ok"), "MTAs may change the case of a local part"
    assert rotated.parse(f"<{address}>") == (12345, "ok")
    assert verp.Verp((new,)).parse(address) == (None, "bad_verp_signature"), "a retired key no longer verifies"
    tag = address.split(".", 1)[1].split("@")[0]
    assert rotated.parse(address.replace("12345.", "12346.")) == (None, "bad_verp_signature"), "a tag is for one mail"
    assert rotated.parse(address.replace(tag, tag[::-1])) == (None, "bad_verp_signature") or tag == tag[::-1]
    assert rotated.parse("postmaster@bounces.example.com") == (None, "not_verp")
    assert rotated.parse("bounce+0.aaaaaaaaaa@x.example") == (None, "not_verp"), "no message 0"
    assert "secret" not in repr(rotated) and repr(rotated) == "Verp(2 keys)"


def test_profiles_and_keys_are_checked_at_start(tmp_path, monkeypatch):
    assert verp.parse_profiles(["default=Bounces.Example.COM.", "", "news=b.example.org"]) == \
        {"default": "bounces.example.com", "news": "b.example.org"}
    for bad, why in [("default", "expected SENDER=BOUNCE_DOMAIN"), ("=b.example.com", "expected SENDER=BOUNCE_DOMAIN"),
                     ("default=not a domain", "is not a domain name")]:
        with pytest.raises(verp.VerpConfigError, match=why):
            verp.parse_profiles([bad])
    with pytest.raises(verp.VerpConfigError, match="given twice"):
        verp.parse_profiles(["a=b.example.com", "a=c.example.com"])

    monkeypatch.delenv("MAILROOM_SIGNING_KEYS_FILE", raising=False)
    monkeypatch.delenv("MAILROOM_SIGNING_KEYS", raising=False)
    with pytest.raises(verp.VerpConfigError, match="needs signing keys"):
        verp.load_keys()
    short = tmp_path / "short"
    short.write_text(_key_line("k1", b"x" * 16) + "\n")
    with pytest.raises(verp.VerpConfigError, match="line 1: expected KEYID=BASE64URL_SECRET of at least 32 bytes") as e:
        verp.load_keys(str(short))
    assert base64.urlsafe_b64encode(b"x" * 16).decode().rstrip("=") not in str(e.value), "never the secret"
    good = tmp_path / "keys"
    a, b = os.urandom(32), os.urandom(40)
    good.write_text(f"# rotation: current first\n{_key_line('k2', a)}\n\n{_key_line('k1', b)}\n")
    assert verp.load_keys(str(good)) == [a, b]
    monkeypatch.setenv("MAILROOM_SIGNING_KEYS", _key_line("k9", b))
    assert verp.load_keys() == [b]


@pytest.mark.parametrize("args, env, message", [
    (["--verp", "default"], {"MAILROOM_SIGNING_KEYS": _key_line("k", b"k" * 32)}, "expected SENDER=BOUNCE_DOMAIN"),
    (["--verp", "default=bounces.example.com"], {}, "VERP needs signing keys"),
])
def test_run_refuses_a_bad_verp_configuration_at_start(args, env, message):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MAILROOM_")}
    done = subprocess.run([sys.executable, "-m", "mailroom.cli", "run", "--dsn", "postgresql://nobody@127.0.0.1:1/x",
                           "--smtp", "null://", *args], capture_output=True, text=True, env={**clean, **env}, timeout=60)
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert message in done.stderr
