"""Minimal fixtures until the lead's tests/conftest.py lands on main.

`db_url`: a fresh database per test, cloned from a template deployed once per
session with Sqitch (without pg_cron, like production databases that lack it).
`conn`: an autocommit psycopg connection to it with dict rows.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.rows import dict_row

from mailroom.embedded import Cluster

TEMPLATE = "mailroom_test_template"


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    cluster = Cluster.for_checkout()
    if not cluster.is_running():
        cluster.up(deploy=False, log=lambda m: None)
    return cluster


@pytest.fixture(scope="session")
def template_db(cluster: Cluster) -> str:
    admin = cluster.url("postgres")
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{TEMPLATE}"')
    cluster.deploy(log=lambda m: None, database=TEMPLATE)
    yield TEMPLATE
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')


@pytest.fixture
def db_url(cluster: Cluster, template_db: str) -> str:
    name = "t_" + uuid.uuid4().hex[:12]
    admin = cluster.url("postgres")
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    yield cluster.url(name)
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def conn(db_url: str):
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as c:
        yield c
