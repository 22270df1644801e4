"""Helpers for the operator CLI tests: invoke `mailroom ...` in-process."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from click.testing import CliRunner

from mailroom.cli import main


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click 8.1
    except TypeError:
        return CliRunner()  # click 8.2+ keeps stderr apart by default


def run(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `mailroom *args`."""
    result = _runner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def as_user(url: str, user: str) -> str:
    """The same libpq URL, logged in as another (password-less, trust) user."""
    parts = urlsplit(url)
    host = parts.netloc.split("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))
