"""A fleet directory over shard databases, the real thing: a database with
the plproxy extension and the fleet plan (fleet/) deployed by Sqitch, and the
SQL/MED server mailroom_fleet mapping `partitions` partitions onto the shards
over loopback (partition i -> shard i % len(shards)). The directory logs in
to the shards as a login holding mailroom_app and mailroom_operator only;
callers use a login holding mailroom_fleet_operator and mailroom_fleet_app
only. Used by tests/test_fleet.py, tests/test_fleet_limits.py and
bench/scale.py."""

from __future__ import annotations

import subprocess
import uuid
from contextlib import contextmanager
from typing import Iterator

import psycopg
import pytest
from psycopg import sql

from mailroom.dev.embedded import Cluster
from mailroom.net import free_port
from tests.conftest import _drop_database, cloned_database, connect, with_database


def dbname(url: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(url)["dbname"]


def connstr(url: str, port: int | None = None) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    return f"dbname={info['dbname']} host={info.get('host', '127.0.0.1')} port={port or info['port']}"


class Fleet:
    def __init__(self, directory: str, shards: list[str], caller: str, partitions: int = 4):
        self.directory = directory          # superuser URL of the directory database
        self.shards = shards                # superuser URLs of the shard databases
        self.names = [dbname(u) for u in shards]
        self.caller = caller                # the login role the tests call the fleet as
        self.partition_count = partitions

    def call(self, **kw) -> psycopg.Connection:
        """A new connection to the directory as the fleet operator/app login."""
        return connect(self.directory, user=self.caller, **kw)

    def shard(self, name: str) -> psycopg.Connection:
        return connect(self.shards[self.names.index(name)])

    def partitions(self) -> dict[int, str]:
        return {i: self.names[i % len(self.names)] for i in range(self.partition_count)}

    def set_partitions(self, options: dict[str, str]) -> None:
        with connect(self.directory) as d:
            d.execute(sql.SQL("ALTER SERVER mailroom_fleet OPTIONS ({})").format(
                sql.SQL(", ").join(sql.SQL("SET {} {}").format(sql.Identifier(k), sql.Literal(v))
                                   for k, v in options.items())))

    @contextmanager
    def shard_down(self, name: str):
        """Every partition of shard `name` points at a loopback port nobody
        listens on, for the duration."""
        i = self.names.index(name)
        closed = free_port()
        parts = [p for p, n in self.partitions().items() if n == name]
        self.set_partitions({f"p{p}": connstr(self.shards[i], closed) for p in parts})
        try:
            yield closed
        finally:
            self.set_partitions({f"p{p}": connstr(self.shards[i]) for p in parts})


@contextmanager
def fleet_directory(server_url: str, shards: list[str], partitions: int = 4) -> Iterator[Fleet]:
    """A directory database on the server of server_url over the shard
    databases `shards` (superuser URLs with the main plan deployed); dropped,
    with its roles, after."""
    tag = uuid.uuid4().hex[:8]
    agent, caller = f"fleet_agent_{tag}", f"fleet_caller_{tag}"
    directory = f"fleet_dir_{tag}"
    with connect(server_url) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(directory)))
    url = with_database(server_url, directory)
    try:
        deployed = subprocess.run(
            ["sqitch", "deploy", "--chdir", "fleet", "--target", "db:pg:" + url.split(":", 1)[1]],
            cwd=Cluster.for_checkout().root, capture_output=True, text=True,
        )
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        with connect(url) as d:
            d.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE mailroom_app, mailroom_operator").format(
                sql.Identifier(agent)))
            d.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE mailroom_fleet_operator, mailroom_fleet_app").format(
                sql.Identifier(caller)))
            d.execute(sql.SQL("CREATE SERVER mailroom_fleet FOREIGN DATA WRAPPER plproxy OPTIONS ({})").format(
                sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(f"p{i}"),
                                                           sql.Literal(connstr(shards[i % len(shards)])))
                                   for i in range(partitions))))
            d.execute("GRANT USAGE ON FOREIGN SERVER mailroom_fleet TO mailroom_fleet_owner")
            d.execute(sql.SQL("CREATE USER MAPPING FOR mailroom_fleet_owner SERVER mailroom_fleet"
                              " OPTIONS (user {})").format(sql.Literal(agent)))
        yield Fleet(url, shards, caller, partitions)
    finally:
        with connect(server_url) as admin:
            _drop_database(admin, directory)
            for role in (agent, caller):
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture(scope="module")
def fleet(server_url, template_db):
    """Two shards cloned from the test template under a directory of four
    partitions (p0, p2 -> the first; p1, p3 -> the second), for one test
    module: import it into the module."""
    with cloned_database(server_url, template_db) as a, cloned_database(server_url, template_db) as b:
        with fleet_directory(server_url, [a, b]) as built:
            yield built
