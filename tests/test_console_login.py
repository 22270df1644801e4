"""`mailroom db console-login` (and the end of `make demo`) hand a newcomer a
console login that works: a database role the console accepts (operator and
nothing more) and an account whose password signs in, proven by starting
`mailroom web` with exactly what was printed and signing in over HTTP."""

from __future__ import annotations

import http.client
import re
import stat
import urllib.parse
import uuid

import pytest

from mailroom.web.console.devlogin import create_console_login
from tests.operatorkit import start_web


@pytest.fixture
def role(conn):
    name = f"t_console_login_{uuid.uuid4().hex[:8]}"
    yield name
    conn.execute(f'DROP ROLE IF EXISTS "{name}"')


def _sign_in(port: int, name: str, password: str) -> tuple[int, str]:
    """POST the sign-in form as a browser would; the sign-in's status, then the overview's."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/login")
    page = conn.getresponse()
    body = page.read().decode()
    cookie = page.getheader("Set-Cookie").split(";", 1)[0]
    token = re.search(r'name="csrf_token" value="([^"]+)"', body).group(1)
    form = urllib.parse.urlencode({"csrf_token": token, "username": name, "password": password})
    conn.request("POST", "/login", body=form, headers={"Cookie": cookie,
                                                       "Content-Type": "application/x-www-form-urlencoded"})
    answer = conn.getresponse()
    answer.read()
    signed_in = (answer.getheader("Set-Cookie") or cookie).split(";", 1)[0]
    conn.request("GET", "/", headers={"Cookie": signed_in})
    overview = conn.getresponse()
    overview.read()
    conn.close()
    return answer.status, overview.status


def test_the_printed_login_signs_in_to_the_console(db_url, conn, role, tmp_path):
    login = create_console_login(db_url, tmp_path / "console-users", role=role, name="newcomer")
    assert login.dsn.startswith(f"postgresql://{role}@") and login.password not in login.users_file.read_text()
    assert stat.S_IMODE(login.users_file.stat().st_mode) == 0o600
    assert f"--dsn {login.dsn} --users-file {login.users_file}" in login.instructions()
    proc, port = start_web(login.dsn, login.users_file, "--port", "0")  # it refuses a login that is more than an operator
    try:
        assert _sign_in(port, "newcomer", "not-the-password")[0] == 401
        assert _sign_in(port, "newcomer", login.password) == (302, 200)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stderr.close()


def test_running_it_again_keeps_the_role_and_replaces_the_password(db_url, conn, role, tmp_path):
    first = create_console_login(db_url, tmp_path / "console-users", role=role)
    second = create_console_login(db_url, tmp_path / "console-users", role=role)
    assert first.password != second.password and first.dsn == second.dsn
    groups = conn.execute("SELECT array_agg(g.rolname) AS g FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid"
                          " JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = %s", (role,)).fetchone()["g"]
    assert groups == ["mailroom_operator"]


def test_a_superuser_of_that_name_is_refused(db_url, conn, role, tmp_path):
    conn.execute(f'CREATE ROLE "{role}" LOGIN SUPERUSER')
    with pytest.raises(ValueError, match="superuser"):
        create_console_login(db_url, tmp_path / "console-users", role=role)
    assert not (tmp_path / "console-users").exists()
