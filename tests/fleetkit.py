"""A fleet directory over shard databases, the real thing, for the tests and
bench/scale.py: N shards cloned from the test template (the main plan) or
databases the caller made, a directory database with the fleet plan (fleet/)
deployed by Sqitch, and the SQL/MED server mailroom_fleet mapping P
partitions onto the shards round-robin over loopback (partition i -> shard
i % N). The directory logs in to the shards as a login holding mailroom_app
and mailroom_operator only; the tests call the fleet as a login holding
mailroom_fleet_operator and mailroom_fleet_app only. A test module takes it
as a module fixture:

    @pytest.fixture(scope="module")
    def fleet(server_url, template_db):
        with build_fleet(server_url, template_db) as f:
            yield f
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import psycopg
from psycopg import sql

from mailroom.dev.embedded import Cluster
from mailroom.net import free_port
from tests.conftest import _drop_database, cloned_database, connect, with_database


def dbname_of(url: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(url)["dbname"]


def connstr_of(url: str, port: int | None = None, **extra: str) -> str:
    """A partition's connect string for the database of `url` (another port:
    to point it at something else)."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    return " ".join([f"dbname={info['dbname']} host={info.get('host', '127.0.0.1')} port={port or info['port']}",
                     *(f"{k}={v}" for k, v in extra.items())])


def fleet_sqitch(target: str, *command: str) -> None:
    """sqitch COMMAND of the fleet plan (fleet/) against target; fails the test on an error."""
    done = subprocess.run(["sqitch", *command, "--chdir", "fleet", "--target", target],
                          cwd=Cluster.for_checkout().root, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


class Fleet:
    def __init__(self, directory: str, shards: list[str], caller: str, partitions: int):
        self.directory = directory          # superuser URL of the directory database
        self.shards = shards                # superuser URLs of the shard databases
        self.names = [dbname_of(u) for u in shards]
        self.caller = caller                # the login role the tests call the fleet as
        self.layout = {i: self.names[i % len(shards)] for i in range(partitions)}

    def call(self, **kw) -> psycopg.Connection:
        """A new connection to the directory as the fleet operator/app login."""
        return connect(self.directory, user=self.caller, **kw)

    def shard(self, name: str) -> psycopg.Connection:
        return connect(self.shards[self.names.index(name)])

    def partitions(self) -> dict[int, str]:
        return dict(self.layout)

    def set_partitions(self, options: dict[str, str], action: str = "SET") -> None:
        with connect(self.directory) as d:
            d.execute(sql.SQL("ALTER SERVER mailroom_fleet OPTIONS ({})").format(
                sql.SQL(", ").join(sql.SQL(action + " {} {}").format(sql.Identifier(k), sql.Literal(v))
                                   for k, v in options.items())))

    @contextmanager
    def shard_down(self, name: str, connstr: str | None = None):
        """Every partition of shard `name` points at a loopback port nobody
        listens on (or at `connstr`), for the duration."""
        i = self.names.index(name)
        closed = free_port()
        parts = [p for p, n in self.partitions().items() if n == name]
        self.set_partitions({f"p{p}": connstr or connstr_of(self.shards[i], closed) for p in parts})
        try:
            yield closed
        finally:
            self.set_partitions({f"p{p}": connstr_of(self.shards[i]) for p in parts})


@contextmanager
def build_fleet(server_url: str, template_db: str | None, shards: int = 2, partitions: int = 4,
                server_options: dict[str, str] | None = None,
                shard_urls: list[str] | None = None, deploy_to: str | None = None) -> Iterator[Fleet]:
    """`shards` clones of template_db (or the existing databases `shard_urls`,
    superuser URLs with the main plan deployed, left as they are) under a new
    directory on the server of server_url, its plan deployed to `deploy_to`
    (a change or tag; the whole plan by default); the clones, the directory
    and its logins are dropped after."""
    tag = uuid.uuid4().hex[:8]
    agent, caller = f"fleet_agent_{tag}", f"fleet_caller_{tag}"
    directory = f"fleet_dir_{tag}"
    with ExitStack() as stack:
        urls = list(shard_urls) if shard_urls else [
            stack.enter_context(cloned_database(server_url, template_db)) for _ in range(shards)]
        shards = len(urls)
        with connect(server_url) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(directory)))
        url = with_database(server_url, directory)
        try:
            fleet_sqitch("db:pg:" + url.split(":", 1)[1], "deploy", *(["--to", deploy_to] if deploy_to else []))
            with connect(url) as d:
                d.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE mailroom_app, mailroom_operator").format(
                    sql.Identifier(agent)))
                d.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE mailroom_fleet_operator, mailroom_fleet_app").format(
                    sql.Identifier(caller)))
                options = {**{f"p{i}": connstr_of(urls[i % shards]) for i in range(partitions)},
                           **(server_options or {})}
                d.execute(sql.SQL("CREATE SERVER mailroom_fleet FOREIGN DATA WRAPPER plproxy OPTIONS ({})").format(
                    sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(k), sql.Literal(v))
                                       for k, v in options.items())))
                d.execute("GRANT USAGE ON FOREIGN SERVER mailroom_fleet TO mailroom_fleet_owner")
                d.execute(sql.SQL("CREATE USER MAPPING FOR mailroom_fleet_owner SERVER mailroom_fleet"
                                  " OPTIONS (user {})").format(sql.Literal(agent)))
            yield Fleet(url, urls, caller, partitions)
        finally:
            with connect(server_url) as admin:
                _drop_database(admin, directory)
                for role in (agent, caller):
                    admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
