"""Shared by the bench scripts: a scratch database with the schema deployed,
on the embedded cluster (`make bench` starts it)."""

from __future__ import annotations

import time
from contextlib import contextmanager

import psycopg

from mailroom.embedded import Cluster


@contextmanager
def scratch_database(name: str):
    """Yield the URL of a fresh database `name` with mailroom deployed; drop it after."""
    cluster = Cluster.for_checkout()
    admin = cluster.url("postgres")
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        cluster.deploy(log=lambda m: None, database=name)
        yield cluster.url(name)
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
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
