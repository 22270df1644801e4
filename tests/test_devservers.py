"""The three development HTTP servers (`mailroom web`, `webhooks`,
`unsubscribe-server`) listen where `--host` and `--port` say, each on a
default port of its own, and the spellings they had before (`webhooks
--listen`, `web --bind HOST:PORT` and MAILROOM_CONSOLE_BIND) still work,
hidden from --help."""

from __future__ import annotations

import http.client
import uuid

import click
import pytest

from mailroom.cli import main
from mailroom.web.console.auth import hash_password
from mailroom.web.devserver import listen_options
from tests.conftest import connect
from tests.operatorkit import as_user, run, start_web

SERVERS = ("web", "webhooks", "unsubscribe-server")


def test_one_spelling_and_a_port_each():
    defaults = {}
    for name in SERVERS:
        params = {p.name: p for p in main.get_command(click.Context(main), name).params}
        assert params["host"].default == "127.0.0.1" and params["host"].opts == ["--host"]
        assert params["port"].opts == ["--port"]
        defaults[name] = params["port"].default
        code, out, _ = run(name, "--help")
        assert code == 0 and "--host" in out and "--port" in out
        assert "--listen" not in out and "--bind" not in out, "the old spellings are hidden"
    assert sorted(defaults.values()) == [8025, 8026, 8027], defaults


@click.command()
@listen_options("web", old_listen=True, old_bind_envvar="T_DEVSERVER_BIND")
def where(host, port):
    click.echo(f"{host} {port}")


@pytest.mark.parametrize("args, env, says", [
    ([], {}, "127.0.0.1 8025"),
    (["--bind", "0.0.0.0:9000"], {}, "0.0.0.0 9000"),
    (["--bind", "[::1]:9000"], {}, "::1 9000"),
    ([], {"T_DEVSERVER_BIND": "10.0.0.1:9001"}, "10.0.0.1 9001"),
    (["--port", "9002"], {"T_DEVSERVER_BIND": "10.0.0.1:9001"}, "10.0.0.1 9002"),  # the new spelling wins
    (["--listen", "0.0.0.0"], {}, "0.0.0.0 8025"),
    (["--listen", "0.0.0.0", "--host", "127.0.0.2"], {}, "127.0.0.2 8025"),
])
def test_old_spellings_choose_the_address_unless_the_new_one_is_given(args, env, says):
    result = click.testing.CliRunner().invoke(where, args, env=env)
    assert result.exit_code == 0 and result.output.strip() == says, result.output


def test_a_bad_old_bind_is_a_usage_error():
    code, _, err = run("web", "--bind", "nohost")
    assert code == 2 and "HOST:PORT" in err


@pytest.fixture
def logins(module_db_url):
    """Login roles that are members of one group role each (the servers refuse more)."""
    made = []
    admin = connect(module_db_url)

    def login(group: str) -> str:
        name = f"t_dev_{uuid.uuid4().hex[:8]}"
        admin.execute(f'CREATE ROLE "{name}" LOGIN IN ROLE {group}')
        made.append(name)
        return as_user(module_db_url, name)

    yield login
    for name in made:
        admin.execute(f'DROP ROLE IF EXISTS "{name}"')
    admin.close()


def test_the_console_listens_where_its_old_spelling_says(logins, tmp_path):
    """Started for real through `--bind HOST:0` (any free port): the command
    passes the address the decorator resolved to its server. One process
    only, to stay quick; the other two take theirs the same way."""
    users = tmp_path / "users"
    users.write_text(f"ann:{hash_password('pw')}\n")
    proc, port = start_web(logins("mailroom_operator"), users, "--bind", "127.0.0.1:0")
    try:
        assert port not in (0, 8025), "it took the port it was given (0: any free one)"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/login")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stderr.close()
