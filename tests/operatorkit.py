"""Helpers for the operator CLI tests: invoke `mailroom ...` in-process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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


def start_web(dsn: str | None, users_file, *address: str) -> tuple[subprocess.Popen, int]:
    """`mailroom web` in a subprocess (no MAILROOM_* from this environment),
    listening where `address` says (e.g. "--port", "0"; other options too:
    "--fleet-dsn", URL); no --dsn when `dsn` is None. Returns it and the port
    it printed. The caller terminates it and closes its stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILROOM_")}
    database = ["--dsn", dsn] if dsn is not None else []
    proc = subprocess.Popen([sys.executable, "-m", "mailroom.cli", "web", *database, "--users-file",
                             str(users_file), *address], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    said, found = [], None
    while not found and len(said) < 10:  # after a warning or two (no session key given, say)
        said.append(proc.stderr.readline())
        found = re.search(r"console on http://127\.0\.0\.1:(\d+)/", said[-1])
    if not found:
        proc.terminate()
        raise AssertionError(f"mailroom web did not start: {said}")
    return proc, int(found.group(1))
