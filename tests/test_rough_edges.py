"""Rough edges a new user hit (issue 17, part 3), each against the real thing:
a real `mailroom run` and aiosmtpd sink, the CLI in-process on a real cluster."""

from __future__ import annotations

import io
import json
import re
import tomllib
import uuid
from pathlib import Path

from mailroom.dev.demo import Progress, demo_database
from mailroom.dev.embedded import Cluster
from mailroom.dev.sink import Rule, Sink
from tests.conftest import connect
from tests.operatorkit import run
from tests.runnerkit import FROM, RunnerProcess, enqueue, parse, settled, wait_for

FAST = ("--poll-interval", "0.2", "--concurrency", "2", "--batch", "10")


def test_last_error_says_the_smtp_code_once_and_inspect_shows_the_message_id_sent(db_url, conn):
    rules = [Rule(550, "5.1.1 No such user", stage="rcpt", rcpt_contains="nobody@")]
    nobody = enqueue(conn, "nobody@example.com", subject="s", body_text="b", delivery_key="edge-nobody")
    enqueue(conn, "fine@example.com", subject="s", body_text="b", delivery_key="edge-fine")
    with Sink(keep=True, rules=rules) as sink, RunnerProcess(db_url, sink.url(), *FAST) as r:
        wait_for(lambda: settled(conn, 2), what="both settled")
        assert r.stop() == 0, r.log()
        (received,) = sink.messages

    last_error = conn.execute("SELECT last_error FROM mailroom.messages WHERE id = %s", [nobody]).fetchone()
    assert last_error == {"last_error": "550 5.1.1 rcpt: No such user"}

    code, out, err = run("inspect", "--dsn", db_url, "--from", FROM, "--json", "edge-fine")
    assert code == 0, err
    assert json.loads(out)["message_id"] == parse(received["data"])["Message-ID"]
    code, out, err = run("inspect", "--dsn", db_url, "--from", FROM, "edge-fine")
    assert f"message_id:       {parse(received['data'])['Message-ID']}\n" in out


def test_an_enqueue_whose_key_exists_says_so_with_a_notice(conn):
    """The id comes back either way (idempotence); the repeat raises a NOTICE
    with SQLSTATE 01MR1 that a client can catch, and a new mail raises none."""
    notices = []
    # psycopg's Diagnostic is only valid inside the handler: keep its fields
    conn.add_notice_handler(lambda diag: notices.append((diag.sqlstate, diag.message_primary)))
    first = enqueue(conn, "ann@example.com", subject="Receipt", body_text="b", delivery_key="order:1:receipt")
    assert notices == []
    again = enqueue(conn, "ann@example.com", subject="Receipt", body_text="b", delivery_key="order:1:receipt")
    assert again == first
    assert notices == [
        ("01MR1", f'mailroom: delivery_key: "order:1:receipt" already exists (message {first}): nothing new was queued')]


def test_the_demo_progress_prints_a_line_every_few_seconds_off_a_terminal():
    """Off a terminal (a log, CI) the bar is a line every 5 s at most and the
    final one, however often it is updated (the demo updates 4 times a second)."""
    out, now = io.StringIO(), [0.0]
    progress = Progress(1000, out=out, clock=lambda: now[0])
    for tick in range(80):  # 20 s of quarter-second updates
        now[0] = tick * 0.25
        progress.update(tick * 10, 0, 0)
    progress.update(1000, 0, 0, final=True)
    lines = out.getvalue().splitlines()
    assert len(lines) == 5, lines  # at 0, 5, 10 and 15 s, and the final line
    assert "\r" not in out.getvalue() and lines[-1].startswith("[" + "#" * 30 + "] 100.0%")


def test_the_demo_drops_its_database_unless_asked_to_keep_it(server_url, template_db):
    cluster = Cluster.for_checkout()
    name = "t_demo_" + uuid.uuid4().hex[:8]

    def exists() -> bool:
        with connect(server_url) as admin:
            return admin.execute("SELECT count(*) AS n FROM pg_database WHERE datname = %s", [name]).fetchone()["n"] == 1

    with demo_database(cluster, name=name, template=template_db) as url:
        assert exists() and url.endswith("/" + name)
    assert not exists()
    with demo_database(cluster, name=name, template=template_db, keep=True):
        pass
    try:
        assert exists()
    finally:
        with connect(server_url) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


ROOT = Path(__file__).resolve().parent.parent


def test_pyproject_license_is_the_spdx_string_setuptools_takes_without_warnings():
    """`license = { text = ... }` and License classifiers make setuptools >= 77
    print its deprecation warnings at every install; an SPDX expression with
    setuptools >= 77 (which build isolation installs) prints none: checked with
    `pip install --no-deps -e . -v`, whose output has no warning."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    assert not any(c.startswith("License ::") for c in project["project"].get("classifiers", []))
    assert "setuptools>=77" in project["build-system"]["requires"]


def test_make_drill_duration_is_one_figure_everywhere():
    places = {"Makefile": ROOT / "Makefile", "README.md": ROOT / "README.md",
              "docs/operations.md": ROOT / "docs" / "operations.md"}
    stated = {name: re.findall(r"about (\d+) minutes: 5 min 34 s measured|about (\d+) minutes \(5 min 34 s measured",
                               " ".join(path.read_text().split()))
              for name, path in places.items()}
    assert all(stated.values()), stated
    figures = {n for found in stated.values() for pair in found for n in pair if n}
    assert figures == {"6"}, stated
