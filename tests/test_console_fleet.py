"""The console pointed at a fleet directory (`mailroom web --fleet-dsn`):
its Fleet page, over real HTTP, shows every shard of a real PL/Proxy
directory with its queue, and a shard that stops answering as DOWN with its
error while the others are still shown; the console's directory login must
hold mailroom_fleet_operator and nothing more."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid

import pytest
from psycopg import sql

from mailroom.web.console.auth import hash_password
from tests.conftest import connect
from tests.fleetkit import build_fleet
from tests.operatorkit import as_user, start_web
from tests.runnerkit import enqueue
from tests.test_console_webhooks import PASSWORD, USER, Browser, console, field  # noqa: F401 (console is a fixture)

QUEUED = {0: 3, 1: 5}


@pytest.fixture(scope="module")
def fleet(server_url, template_db):
    with build_fleet(server_url, template_db) as f:
        yield f


@pytest.fixture
def logins(fleet):
    """A shard login holding mailroom_operator and a directory login holding
    mailroom_fleet_operator, each nothing more (roles are cluster-wide)."""
    tag = uuid.uuid4().hex[:8]
    shard_login, fleet_login = f"t_console_{tag}", f"t_fleet_console_{tag}"
    with connect(fleet.directory) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE mailroom_operator").format(sql.Identifier(shard_login)))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE mailroom_fleet_operator").format(
            sql.Identifier(fleet_login)))
    try:
        yield as_user(fleet.shards[0], shard_login), as_user(fleet.directory, fleet_login)
    finally:
        with connect(fleet.directory) as admin:
            for role in (shard_login, fleet_login):
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def shard_row(page: str, shard: str) -> str:
    return re.search(rf'<tr data-shard="{re.escape(shard)}"[^>]*>(.*?)</tr>', page, re.S).group(1)


def test_the_fleet_page_shows_every_shard_and_marks_the_one_down(fleet, logins, tmp_path):
    for i, n in QUEUED.items():
        with fleet.shard(fleet.names[i]) as shard:
            for k in range(n):
                enqueue(shard, f"fleet-console-{k}@example.com", subject="Hi", body_text="Body",
                        delivery_key=f"fleet-console-{i}-{k}")
    shard_dsn, fleet_dsn = logins
    users = tmp_path / "users"
    users.write_text(f"{USER}:{hash_password(PASSWORD)}\n")
    proc, port = start_web(shard_dsn, users, "--port", "0", "--fleet-dsn", fleet_dsn)
    try:
        browser = Browser(port)
        assert browser.send("GET", "/fleet")[0] == 302  # signed out: to the login page
        browser.sign_in()
        status, _, page = browser.send("GET", "/fleet")
        assert status == 200 and 'href="/fleet"' in page
        assert "2 shards, 2 answering." in page
        for i, n in QUEUED.items():
            row = shard_row(page, fleet.names[i])
            assert field(row, "state") == "up" and field(row, "queued") == str(n), row

        up, down = fleet.names
        with fleet.shard_down(down) as closed:
            status, _, page = browser.send("GET", "/fleet")
            assert status == 200
            assert "2 shards, 1 answering, " in page and "1 down" in page
            row = shard_row(page, down)
            assert field(row, "state") == "DOWN"
            assert f"port {closed} failed" in field(row, "error") and "Connection refused" in field(row, "error")
            assert field(shard_row(page, up), "queued") == str(QUEUED[0])  # the other still answers
        status, _, page = browser.send("GET", "/fleet")
        assert "2 shards, 2 answering." in page
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()


def test_without_a_directory_there_is_no_fleet_page(console):
    console.sign_in()
    status, _, page = console.send("GET", "/")
    assert status == 200 and 'href="/fleet"' not in page
    assert console.send("GET", "/fleet")[0] == 404


def test_a_directory_login_with_more_than_the_fleet_operator_role_is_refused(fleet, logins, tmp_path):
    shard_dsn, _ = logins
    caller = as_user(fleet.directory, fleet.caller)  # also mailroom_fleet_app
    users = tmp_path / "users"
    users.write_text(f"{USER}:{hash_password(PASSWORD)}\n")
    done = subprocess.run([sys.executable, "-m", "mailroom.cli", "web", "--dsn", shard_dsn, "--users-file",
                           str(users), "--port", "0", "--fleet-dsn", caller],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 4, done.stderr
    assert "--fleet-dsn: the console's login must hold mailroom_fleet_operator and nothing more, it is also " \
           "mailroom_fleet_app" in done.stderr
