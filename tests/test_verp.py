"""VERP addresses (runner/mailroom/send/verp.py) and the runner's --verp option.
The whole path through a real MTA is tests/test_postfix_dsn.py."""

from __future__ import annotations

import base64
import os
import subprocess
import sys

import pytest

from mailroom import exitcodes
from mailroom.send import verp
from mailroom.signing import Keyring


def _key_line(kid: str, secret: bytes) -> str:
    return f"{kid}={base64.urlsafe_b64encode(secret).decode().rstrip('=')}"


def test_an_address_names_its_mail_and_verifies_under_any_key_of_the_ring():
    old, new = os.urandom(32), os.urandom(32)
    before = verp.Verp(Keyring([("old", old)]))
    address = before.address(12345, "bounces.example.com")
    assert address.startswith("bounce+12345.") and address.endswith("@bounces.example.com")
    assert len(address.split("@")[0]) == len("bounce+12345.") + verp.TAG_LENGTH
    rotated = verp.Verp(Keyring([("new", new), ("old", old)]))  # a new current key; the old one still verifies
    assert rotated.parse(address) == (12345, "ok")
    assert rotated.parse(address.upper()) == (12345, "ok"), "MTAs may change the case of a local part"
    assert rotated.parse(f"<{address}>") == (12345, "ok")
    assert verp.Verp(Keyring([("new", new)])).parse(address) == (None, "bad_verp_signature"), "a retired key no longer verifies"
    tag = address.split(".", 1)[1].split("@")[0]
    assert rotated.parse(address.replace("12345.", "12346.")) == (None, "bad_verp_signature"), "a tag is for one mail"
    assert rotated.parse(address.replace(tag, tag[::-1])) == (None, "bad_verp_signature") or tag == tag[::-1]
    assert rotated.parse("postmaster@bounces.example.com") == (None, "not_verp")
    assert rotated.parse("bounce+0.aaaaaaaaaa@x.example") == (None, "not_verp"), "no message 0"
    assert rotated.address(12345, "b.example.com") != address.replace("bounces.example.com", "b.example.com"), \
        "new mail is tagged with the current key"


def test_profiles_are_checked_at_start():
    assert verp.parse_profiles(["default=Bounces.Example.COM.", "", "news=b.example.org"]) == \
        {"default": "bounces.example.com", "news": "b.example.org"}
    for bad, why in [("default", "expected SENDER=BOUNCE_DOMAIN"), ("=b.example.com", "expected SENDER=BOUNCE_DOMAIN"),
                     ("default=not a domain", "is not a domain name")]:
        with pytest.raises(verp.VerpConfigError, match=why):
            verp.parse_profiles([bad])
    with pytest.raises(verp.VerpConfigError, match="given twice"):
        verp.parse_profiles(["a=b.example.com", "a=c.example.com"])


@pytest.mark.parametrize("args, env, message", [
    (["--verp", "default"], {"MAILROOM_SIGNING_KEYS": _key_line("k", b"k" * 32)}, "expected SENDER=BOUNCE_DOMAIN"),
    (["--verp", "default=bounces.example.com"], {}, "--verp needs signing keys"),
])
def test_run_refuses_a_bad_verp_configuration_at_start(args, env, message):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MAILROOM_")}
    done = subprocess.run([sys.executable, "-m", "mailroom.cli", "run", "--dsn", "postgresql://nobody@127.0.0.1:1/x",
                           "--smtp", "null://", *args], capture_output=True, text=True, env={**clean, **env}, timeout=60)
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert message in done.stderr
