"""Shared fixtures: every test gets its own database, cloned from a template
that Sqitch deployed once per session on the embedded cluster (or on the
server named by MAILROOM_TEST_DSN, a libpq URL of a superuser connection)."""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from mailroom.dev.embedded import PG_BIN, SUPERUSER, Cluster, _as_owner, _running_as_root, project_root

TEMPLATE_PREFIX = "mailroom_test_template"


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


@pytest.fixture(scope="session")
def server_url() -> str:
    """A superuser URL to the cluster's maintenance database."""
    if os.environ.get("MAILROOM_TEST_DSN"):
        return with_database(os.environ["MAILROOM_TEST_DSN"], "postgres")
    cluster = Cluster.for_checkout()
    if not cluster.is_running():
        cluster.up(log=lambda m: None)
    return cluster.url("postgres")


def _drop_database(admin: psycopg.Connection, name: str) -> None:
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@contextmanager
def _run_lock(testrun_uid: str) -> Iterator[Path]:
    """An exclusive lock shared by the xdist workers of one run, and the file
    beside it that counts the workers using the run's template."""
    base = Path(tempfile.gettempdir()) / f"mailroom-test-{testrun_uid}"
    with open(f"{base}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield Path(f"{base}.users")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _count_user(users: Path, delta: int) -> int:
    n = (int(users.read_text()) if users.exists() else 0) + delta
    users.write_text(str(n))
    return n


@pytest.fixture(scope="session")
def template_db(server_url: str, testrun_uid: str) -> Iterator[str]:
    """Deploy the whole Sqitch plan once per run into a template database.
    The workers of a parallel run (pytest-xdist) share it: the first one
    deploys it, the last one drops it; cloning from it concurrently is safe."""
    template = f"{TEMPLATE_PREFIX}_{testrun_uid[:12]}"
    with _run_lock(testrun_uid) as users:
        if _count_user(users, +1) == 1:
            with psycopg.connect(server_url, autocommit=True) as admin:
                # Templates that an interrupted run left behind.
                for (stale,) in admin.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE %s", (TEMPLATE_PREFIX + "%",)
                ).fetchall():
                    _drop_database(admin, stale)
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(template)))
            target = "db:pg:" + with_database(server_url, template).split(":", 1)[1]
            deployed = subprocess.run(
                ["sqitch", "deploy", "--target", target],
                cwd=Cluster.for_checkout().root, capture_output=True, text=True,
            )
            if deployed.returncode != 0:
                _count_user(users, -1)
                pytest.fail("sqitch deploy into the test template failed:\n" + deployed.stdout + deployed.stderr)
    yield template
    with _run_lock(testrun_uid) as users:
        if _count_user(users, -1) == 0:
            with psycopg.connect(server_url, autocommit=True) as admin:
                _drop_database(admin, template)
            users.unlink()


@contextmanager
def cloned_database(server_url: str, template: str) -> Iterator[str]:
    """A new database cloned from the template; dropped on exit."""
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
        )
    try:
        yield with_database(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            _drop_database(admin, name)


@pytest.fixture
def db_url(server_url: str, template_db: str) -> Iterator[str]:
    """A fresh database with the schema deployed, dropped after the test."""
    with cloned_database(server_url, template_db) as url:
        yield url


@pytest.fixture(scope="module")
def module_db_url(server_url: str, template_db: str) -> Iterator[str]:
    """One database for a whole module whose tests each roll their changes back
    (many small cases: a database per case would cost half a second each)."""
    with cloned_database(server_url, template_db) as url:
        yield url


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    """An autocommit superuser connection to the test's database."""
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as c:
        yield c


def connect(url: str, **kwargs) -> psycopg.Connection:
    """A new autocommit connection with dict rows (for tests that need several)."""
    return psycopg.connect(url, autocommit=True, row_factory=dict_row, **kwargs)


class ThrowawayCluster(Cluster):
    """The embedded cluster's code, pointed at a temporary folder: for tests
    that crash PostgreSQL (never the shared cluster the other tests use)."""

    def __init__(self, state: Path):
        super().__init__(project_root())
        self._state = state

    @property
    def state_dir(self) -> Path:
        return self._state

    def _choose_home(self) -> Path:
        return self._state / "cluster"

    def crash(self) -> None:
        """`pg_ctl stop -m immediate`: a crash as far as PostgreSQL can tell."""
        subprocess.run(
            _as_owner([str(PG_BIN / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "immediate", "-w"]),
            check=True, capture_output=True,
        )


@pytest.fixture
def throwaway() -> Iterator[ThrowawayCluster]:
    """A cluster of the test's own, not yet started (call .up()); removed after."""
    state = Path(tempfile.mkdtemp(prefix="mailroom-crash-", dir="/var/tmp"))
    os.chmod(state, 0o755)  # the postgres user must reach its data folder below
    if _running_as_root():
        owner = pwd.getpwnam(SUPERUSER)
        os.chown(state, owner.pw_uid, owner.pw_gid)
    cluster = ThrowawayCluster(state)
    try:
        yield cluster
    finally:
        if cluster.is_running():
            cluster.crash()  # nothing to keep: the fastest way down
        shutil.rmtree(state, ignore_errors=True)
