"""A real PL/Proxy fleet for tests (docs/fleet.md): two shards cloned from the
test template (the main plan), a directory database with the plproxy
extension and the fleet plan deployed by Sqitch, and the SQL/MED server
mailroom_fleet mapping four partitions onto the two shards over loopback
(p0, p2 -> shard A; p1, p3 -> shard B). The directory logs in to the shards
as a login role holding mailroom_app and mailroom_operator only; tests call
the fleet as a login holding mailroom_fleet_operator and mailroom_fleet_app
only. A test module takes it as a fixture:

    @pytest.fixture(scope="module")
    def fleet(server_url, template_db):
        with open_fleet(server_url, template_db) as f:
            yield f
"""

from __future__ import annotations

import subprocess
import uuid
from contextlib import ExitStack, contextmanager

import psycopg
from psycopg import sql

from mailroom.dev.embedded import Cluster
from mailroom.net import free_port
from tests.conftest import _drop_database, cloned_database, connect, with_database


def _dbname(url: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(url)["dbname"]


def _connstr(url: str, port: int | None = None) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    return f"dbname={info['dbname']} host={info.get('host', '127.0.0.1')} port={port or info['port']}"


class Fleet:
    def __init__(self, directory: str, shards: list[str], caller: str):
        self.directory = directory          # superuser URL of the directory database
        self.shards = shards                # superuser URLs of the shard databases
        self.names = [_dbname(u) for u in shards]
        self.caller = caller                # the login role the tests call the fleet as

    def call(self, **kw) -> psycopg.Connection:
        """A new connection to the directory as the fleet operator/app login."""
        return connect(self.directory, user=self.caller, **kw)

    def shard(self, name: str) -> psycopg.Connection:
        return connect(self.shards[self.names.index(name)])

    def partitions(self) -> dict[int, str]:
        """Four partitions over the shards: A, B, A, B (two), A, B, C, A (three)."""
        return {i: self.names[i % len(self.names)] for i in range(4)}

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
        self.set_partitions({f"p{p}": _connstr(self.shards[i], closed) for p in parts})
        try:
            yield closed
        finally:
            self.set_partitions({f"p{p}": _connstr(self.shards[i]) for p in parts})


@contextmanager
def open_fleet(server_url: str, template_db: str, shard_count: int = 2):
    """`shard_count` shards cloned from the template, a directory deployed by
    Sqitch over them (four partitions, p<i> -> shard i % shard_count), the
    agent and caller logins; all dropped at the end."""
    tag = uuid.uuid4().hex[:8]
    agent, caller = f"fleet_agent_{tag}", f"fleet_caller_{tag}"
    directory = f"fleet_dir_{tag}"
    with ExitStack() as clones:
        shards = [clones.enter_context(cloned_database(server_url, template_db)) for _ in range(shard_count)]
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
                                                               sql.Literal(_connstr(shards[i % shard_count])))
                                       for i in range(4))))
                d.execute("GRANT USAGE ON FOREIGN SERVER mailroom_fleet TO mailroom_fleet_owner")
                d.execute(sql.SQL("CREATE USER MAPPING FOR mailroom_fleet_owner SERVER mailroom_fleet"
                                  " OPTIONS (user {})").format(sql.Literal(agent)))
            yield Fleet(url, shards, caller)
        finally:
            with connect(server_url) as admin:
                _drop_database(admin, directory)
                for role in (agent, caller):
                    admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
