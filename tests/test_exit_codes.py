"""Packaging and the command line (issue 14, item 7): one version string,
`python -m mailroom`, one exit-code table (README, --help and what the
runner really returns agree), and `mailroom run` without the test-only servers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from click.testing import CliRunner

from mailroom import __version__, exitcodes
from mailroom.cli import main
from mailroom.net import free_port

ROOT = Path(__file__).resolve().parents[1]


def _mailroom(*args, env=None, python_args=()):
    return subprocess.run([sys.executable, *python_args, "-m", "mailroom", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def test_one_version_string_from_the_package_metadata():
    pyproject = (ROOT / "pyproject.toml").read_text()
    declared = re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1)
    assert __version__ == version("mailroom") == declared == "0.5.0"
    r = _mailroom("--version")  # python -m mailroom works
    assert r.returncode == 0 and r.stdout.strip() == f"mailroom, version {declared}", r.stderr


def test_the_exit_code_table_is_the_same_in_readme_and_help():
    readme = (ROOT / "README.md").read_text()
    rows = dict(re.findall(r"^\| `(\d+)` \| (.+?) \|$", readme, re.M))
    assert {int(k): v for k, v in rows.items()} == dict(exitcodes.TABLE)
    for args in (["--help"], ["run", "--help"]):
        out = " ".join(CliRunner().invoke(main, args, terminal_width=200).output.split())
        for code, meaning in exitcodes.TABLE:
            assert f"{code} {meaning}" in out, (args, code)


def test_exit_0_when_idle(db_url):
    r = _mailroom("run", "--dsn", db_url, "--smtp", "null://", "--exit-when-idle", "--no-unsubscribe-headers")
    assert r.returncode == exitcodes.OK == 0, r.stderr


def test_exit_1_on_an_unexpected_error(db_url):
    """A bug is a crash with a traceback, never a code that means something else."""
    code = ("import sys; from mailroom import cli; from mailroom.send import runner\n"
            "def broken(self): raise RuntimeError('a bug')\n"
            "runner.Runner._main_loop = broken\n"
            "sys.argv = ['mailroom', 'run', '--dsn', sys.argv[1], '--smtp', 'null://', '--no-unsubscribe-headers']\n"
            "cli.main()\n")
    r = subprocess.run([sys.executable, "-c", code, db_url], capture_output=True, text=True, timeout=60)
    assert r.returncode == exitcodes.CRASH == 1 and "RuntimeError: a bug" in r.stderr, r.stderr


def test_exit_2_on_bad_configuration(db_url):
    assert _mailroom("run", "--dsn", db_url, "--smtp", "smtq://x").returncode == exitcodes.USAGE == 2
    r = _mailroom("run", "--dsn", "host=127.0.0.1 port", "--smtp", "null://")
    assert r.returncode == 2 and "--dsn" in r.stderr, r.stderr
    assert _mailroom("run", "--dsn", db_url, "--smtp", "null://", "--batch", "0").returncode == 2


def test_exit_3_when_the_database_is_unreachable_at_start():
    r = _mailroom("run", "--dsn", f"postgresql://nobody@127.0.0.1:{free_port()}/none", "--smtp", "null://")
    assert r.returncode == exitcodes.UNREACHABLE == 3 and "cannot connect to the database" in r.stderr


# exit 4: tests/test_runner_cli.py::test_missing_privilege_is_refused_at_start_with_exit_4
# exit 5: tests/test_runner_signals.py::test_grace_bounds_the_stop_while_the_queue_tables_are_locked


def test_mailroom_run_does_not_import_the_test_only_servers(db_url):
    """The sink (aiosmtpd) and the embedded cluster are for demo and tests;
    `mailroom run` loads neither (python -X importtime lists every import)."""
    r = _mailroom("run", "--dsn", db_url, "--smtp", "null://", "--exit-when-idle", "--no-unsubscribe-headers",
                  python_args=("-X", "importtime"))
    assert r.returncode == 0, r.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "mailroom.send.runner" in imported
    assert not imported & {"mailroom.dev.sink", "mailroom.dev.embedded", "mailroom.dev.demo", "aiosmtpd"}, sorted(
        m for m in imported if m.startswith(("mailroom", "aiosmtpd")))
    # ... and `make demo` still finds them through the same command line.
    assert "Usage:" in _mailroom("sink", "--help").stdout and "Usage:" in _mailroom("demo", "--help").stdout
