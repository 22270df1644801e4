"""A console login for a development cluster: `mailroom db console-login`,
and what `make demo` prints at its end.

The console needs two things a newcomer does not have: a database login that
holds mailroom_operator and nothing more (it refuses the superuser URL that
`mailroom db url` prints), and an operator account in a users file. This
makes both on the embedded cluster (trust authentication on loopback, so the
database login has no password): the role, if missing, and a fresh account
with a random password, whose scrypt hash alone is written, to a file only
its owner can read. The password is printed once, to the terminal that
asked for it; it is never logged.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from mailroom.web.console.auth import hash_password
from mailroom.web.devserver import DEFAULT_PORTS

ROLE = "mailroom_console"


@dataclass(frozen=True)
class ConsoleLogin:
    dsn: str
    users_file: Path
    name: str
    password: str

    def instructions(self) -> str:
        return (f"  mailroom web --dsn {self.dsn} --users-file {self.users_file}\n"
                f"  then open http://127.0.0.1:{DEFAULT_PORTS['web']}/ and sign in as {self.name!r}"
                f" with the password {self.password}")


def _as_role(admin_url: str, role: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(admin_url)
    info.pop("password", None)
    return f"postgresql://{role}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}/{info['dbname']}"


def create_console_login(admin_url: str, users_file: Path, *, role: str = ROLE, name: str = "operator") -> ConsoleLogin:
    """On the cluster of `admin_url` (a superuser URL of the database the
    console will read): make `role` a LOGIN member of mailroom_operator if it
    is not one, and write `users_file` with one account, `name`, under a new
    random password (an older file is replaced)."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SELECT rolcanlogin, rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        if row is None:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE mailroom_operator").format(sql.Identifier(role)))
        elif row[1]:
            raise ValueError(f"role {role} is a superuser: the console refuses it; drop it or choose another --role")
        else:
            conn.execute(sql.SQL("ALTER ROLE {} LOGIN").format(sql.Identifier(role)))
            conn.execute(sql.SQL("GRANT mailroom_operator TO {}").format(sql.Identifier(role)))
    password = secrets.token_urlsafe(12)
    users_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(users_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(f"# made by mailroom db console-login\n{name}:{hash_password(password)}\n")
    return ConsoleLogin(_as_role(admin_url, role), users_file, name, password)
