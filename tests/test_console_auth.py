"""The console's accounts and start-up checks: scrypt hashes compared in
constant time, accounts files that say which line is wrong, and `mailroom web`
refusing a login that holds more than mailroom_operator, or no accounts, with
the exit codes of mailroom.exitcodes and the DSN's password never printed."""

from __future__ import annotations

import uuid

import pytest

from mailroom import exitcodes
from mailroom.web.console import ConsoleConfigError, create_app
from mailroom.web.console.auth import Accounts, CredentialsError, hash_password
from mailroom.web.console.db import ConsoleDatabaseError, Database, safe_dsn
from tests.operatorkit import as_user, run


def test_a_hash_verifies_its_password_only():
    stored = hash_password("s3cret pass")
    assert stored.startswith("scrypt$16384$8$1$") and "s3cret" not in stored
    assert hash_password("s3cret pass") != stored  # a new salt each time
    accounts = Accounts.parse(f"# operators\nann:{stored}\n\n", "file")
    assert accounts.check("ann", "s3cret pass")
    assert not accounts.check("ann", "s3cret pas")
    assert not accounts.check("bob", "s3cret pass")  # unknown name: refused (after the same hashing)
    assert not accounts.check("ann", "")


@pytest.mark.parametrize("text, says", [
    ("ann", "line 1: expected NAME:HASH"),
    ("ann:plain-password", "line 1 (ann): not an scrypt$N$r$p$SALT$HASH hash"),
    ("ann:scrypt$1024$8$1$AAAAAAAAAAAAAAAAAAAAAA$" + "A" * 43, "line 1 (ann): scrypt parameters too weak"),
    ("# nobody\n", "no accounts"),
])
def test_a_bad_accounts_file_says_which_line(text, says):
    with pytest.raises(CredentialsError) as e:
        Accounts.parse(text, "users.txt")
    assert says in str(e.value)
    assert "plain-password" not in str(e.value)


def test_safe_dsn_drops_the_password():
    assert "hunter2" not in safe_dsn("postgresql://ops:hunter2@db.example.com/app")
    assert "db.example.com" in safe_dsn("postgresql://ops:hunter2@db.example.com/app")


@pytest.fixture
def login_in(conn, db_url):
    made: list[str] = []

    def make(*groups: str, superuser: bool = False) -> str:
        name = f"t_console_{uuid.uuid4().hex[:8]}"
        conn.execute(f'CREATE ROLE "{name}" LOGIN {"SUPERUSER" if superuser else ""}'
                     + (f" IN ROLE {', '.join(groups)}" if groups else ""))
        made.append(name)
        return as_user(db_url, name)

    yield make
    for name in made:
        conn.execute(f'DROP ROLE IF EXISTS "{name}"')


@pytest.mark.parametrize("groups, superuser, says", [
    (("mailroom_operator", "mailroom_app"), False, "also mailroom_app"),
    (("mailroom_operator",), True, "also superuser"),
    ((), False, "must be a member of mailroom_operator"),
])
def test_the_console_refuses_a_login_that_is_more_or_less_than_an_operator(login_in, groups, superuser, says):
    db = Database(login_in(*groups, superuser=superuser))
    with pytest.raises(ConsoleDatabaseError) as e:
        db.open()
    assert says in str(e.value) and e.value.exit_code == exitcodes.REFUSED


def test_the_console_needs_accounts_or_a_trusted_header(login_in):
    db = Database(login_in("mailroom_operator"))
    db.open()
    try:
        with pytest.raises(ConsoleConfigError) as e:
            create_app(database=db, accounts=None)
        assert "no operator accounts" in str(e.value)
        assert create_app(database=db, trust_header="X-Remote-User")  # only when told
    finally:
        db.close()


def test_mailroom_web_exit_codes_and_no_password_in_errors(tmp_path, monkeypatch, login_in, db_url):
    monkeypatch.delenv("MAILROOM_CONSOLE_USERS_FILE", raising=False)
    monkeypatch.delenv("MAILROOM_CONSOLE_USERS", raising=False)
    users = tmp_path / "users"
    users.write_text(f"ann:{hash_password('pw')}\n")
    code, _, err = run("web", "--dsn", "postgresql://ops:hunter2@127.0.0.1:1/nowhere", "--users-file", str(users))
    assert code == exitcodes.UNREACHABLE and "cannot connect" in err and "hunter2" not in err
    code, _, err = run("web", "--dsn", db_url, "--users-file", str(users))  # the superuser
    assert code == exitcodes.REFUSED and "nothing more" in err
    code, _, err = run("web", "--dsn", login_in("mailroom_operator"))
    assert code == exitcodes.USAGE and "no operator accounts" in err
    code, _, err = run("web", "--bind", "nohost", "--users-file", str(users))
    assert code == exitcodes.USAGE and "HOST:PORT" in err
