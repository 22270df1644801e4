"""Shared by the bench scripts: a scratch database with the schema deployed,
on the embedded cluster (started if needed) or on the server named by
MAILROOM_BENCH_DSN (a superuser libpq URL)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from mailroom.embedded import Cluster

ROOT = Path(__file__).resolve().parents[1]


def with_database(url: str, database: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + database))


def _server_url() -> str:
    if os.environ.get("MAILROOM_BENCH_DSN"):
        return with_database(os.environ["MAILROOM_BENCH_DSN"], "postgres")
    cluster = Cluster.for_checkout()
    if not cluster.is_running():
        cluster.up(log=lambda m: None)
    return cluster.url("postgres")


TEMPLATE = "mailroom_bench_template"


def _schema_hash() -> str:
    """A hash of everything `sqitch deploy` reads: the template is rebuilt when it changes."""
    h = hashlib.sha256()
    for path in sorted([ROOT / "sqitch.plan", ROOT / "sqitch.conf", *(ROOT / "deploy").glob("*.sql")]):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _template(server: str) -> str:
    """A database with mailroom deployed by Sqitch, kept between scripts and
    runs (cloning it takes a second, a deploy several): rebuilt whenever the
    plan or a deploy script changed (its hash is the database's comment)."""
    want = "mailroom bench template " + _schema_hash()
    with psycopg.connect(server, autocommit=True) as c:
        have = c.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                         (TEMPLATE,)).fetchone()
        if have and have[0] == want:
            return TEMPLATE
        c.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{TEMPLATE}"')
    url = with_database(server, TEMPLATE)
    deployed = subprocess.run(["sqitch", "deploy", "--target", "db:pg:" + url.split(":", 1)[1]],
                              cwd=ROOT, capture_output=True, text=True)
    if deployed.returncode != 0:
        raise RuntimeError("sqitch deploy failed:\n" + deployed.stdout + deployed.stderr)
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(f"COMMENT ON DATABASE \"{TEMPLATE}\" IS '{want}'")
    return TEMPLATE


@contextmanager
def scratch_database(name: str):
    """Yield the URL of a fresh database `name` with mailroom deployed by
    Sqitch (a clone of the bench template database); drop it after."""
    server = _server_url()
    template = _template(server)
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    url = with_database(server, name)
    try:
        yield url
    finally:
        with psycopg.connect(server, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def per_op_us(fn, n: int, rounds: int = 3) -> float:
    """Best of `rounds` runs of n calls of fn(i): microseconds per call."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def bench_parser(doc: str):
    """An argparse parser with the --quick flag every bench script takes
    (bench/_run.py passes it for `make bench QUICK=1`)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (make bench QUICK=1, all within 3 minutes)")
    return parser


def target(description: str, value: str, ok: bool) -> None:
    """Print one target line in the form bench/_run.py collects:
    `target <description>: <value> (ok|MISSED)`."""
    print(f"target {description}: {value} ({'ok' if ok else 'MISSED'})", flush=True)
