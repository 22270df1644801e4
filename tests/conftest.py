"""Shared fixtures: every test gets its own database, cloned from a template
that Sqitch deployed once per session on the embedded cluster (or on the
server named by MAILROOM_TEST_DSN, a libpq URL of a superuser connection)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from mailroom.embedded import Cluster

TEMPLATE = "mailroom_test_template"


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


@pytest.fixture(scope="session")
def template_db(server_url: str) -> Iterator[str]:
    """Deploy the whole Sqitch plan once into a template database."""
    with psycopg.connect(server_url, autocommit=True) as admin:
        _drop_database(admin, TEMPLATE)
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    target = "db:pg:" + with_database(server_url, TEMPLATE).split(":", 1)[1]
    root = Cluster.for_checkout().root
    deployed = subprocess.run(
        ["sqitch", "deploy", "--target", target], cwd=root, capture_output=True, text=True
    )
    if deployed.returncode != 0:
        pytest.fail("sqitch deploy into the test template failed:\n" + deployed.stdout + deployed.stderr)
    yield TEMPLATE
    with psycopg.connect(server_url, autocommit=True) as admin:
        _drop_database(admin, TEMPLATE)


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
