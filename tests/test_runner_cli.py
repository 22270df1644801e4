"""The command line: help everywhere, configuration from MAILROOM_* variables,
bad configuration refused with exit code 2 and without leaking the password."""

from __future__ import annotations

import json
import mailbox
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from mailroom.cli import main
from tests.runnerkit import enqueue, statuses


def _commands(group, prefix=()):
    for name, cmd in group.commands.items():
        yield (*prefix, name)
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*prefix, name))


def test_every_command_has_complete_help():
    runner = CliRunner()
    top = runner.invoke(main, ["--help"])
    assert top.exit_code == 0 and "run" in top.output and "sink" in top.output
    for path in _commands(main):
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, path
        assert "Usage:" in result.output and len(result.output.splitlines()) > 3, path


def test_run_help_names_every_environment_variable():
    out = CliRunner().invoke(main, ["run", "--help"], env={"MAILROOM_SMTP_URL": "smtp://u:hunter2@h"}).output
    for var in ("DSN", "SMTP_URL", "CONCURRENCY", "BATCH", "LEASE", "SENDER", "POLL_INTERVAL", "GRACE",
                "LOG_FORMAT", "METRICS_PORT"):
        assert f"MAILROOM_{var}" in out
    assert "hunter2" not in out


def _run(args, env=None):
    return subprocess.run([sys.executable, "-m", "mailroom.cli", "run", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def test_bad_configuration_refused_without_the_password(db_url):
    r = _run(["--dsn", db_url, "--smtp", "smtq://user:hunter2@mail.example.com"])
    assert r.returncode == 2 and "unknown scheme" in r.stderr and "hunter2" not in r.stderr + r.stdout
    bad_dsn = "postgresql://nobody:hunter2@127.0.0.1:1/none"
    r = _run(["--dsn", bad_dsn, "--smtp", "null://"])
    assert r.returncode == 3 and "cannot connect to the database" in r.stderr
    assert "hunter2" not in r.stderr + r.stdout
    r = _run([])
    assert r.returncode == 2 and "--dsn" in r.stderr


def test_configured_from_environment_into_a_maildir_with_json_logs(db_url, conn, tmp_path):
    enqueue(conn, "dev@example.com", subject="to the maildir", body_text="hello", delivery_key="dev-1")
    r = _run([], env={
        "MAILROOM_DSN": db_url, "MAILROOM_SMTP_URL": f"file://{tmp_path}/box",
        "MAILROOM_EXIT_WHEN_IDLE": "1", "MAILROOM_LOG_FORMAT": "json", "MAILROOM_CONCURRENCY": "2",
        "MAILROOM_FROM": "dev@mailroom.invalid", "MAILROOM_NO_UNSUBSCRIBE_HEADERS": "1",
    })
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stderr.splitlines()]
    assert [e["event"] for e in events][0] == "runner.start" and events[0]["concurrency"] == 2
    assert events[-1]["event"] == "runner.stopped" and events[-1]["sent"] == 1
    (mail,) = mailbox.Maildir(str(tmp_path / "box"), create=False)
    assert mail["Subject"] == "to the maildir" and mail["From"] == "dev@mailroom.invalid"
    assert statuses(conn) == {"sent": 1}


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_formats_are_one_line_per_event(fmt):
    import io
    from mailroom import logs

    buf = io.StringIO()
    logs.setup(fmt, "info", stream=buf)
    logs.register_secret("pa55word")
    logs.event("warning", "smtp.down", error="login failed for pa55word\nsecond line")
    line = buf.getvalue()
    assert line.count("\n") == 1 and "pa55word" not in line and "***" in line
    if fmt == "json":
        assert json.loads(line)["event"] == "smtp.down"


def test_missing_privilege_is_refused_at_start_with_exit_4(db_url, conn, server_url):
    import uuid
    from urllib.parse import urlsplit, urlunsplit

    from tests.conftest import connect

    role = "t_nobody_" + uuid.uuid4().hex[:8]
    enqueue(conn, "x@example.com", subject="s", body_text="b")
    with connect(server_url) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")  # not granted mailroom_runner
        try:
            parts = urlsplit(db_url)
            url = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
            r = _run(["--dsn", url, "--smtp", "null://"])
        finally:
            admin.execute(f"DROP ROLE {role}")
    assert r.returncode == 4, r.stderr
    assert "runner.fatal" in r.stderr and "42501" in r.stderr and "mailroom.claim_batch" in r.stderr
    assert statuses(conn) == {"queued": 1}
