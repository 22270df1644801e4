"""Helpers for the runner tests: start `mailroom run` as a real process, wait
for database conditions, read what a sink received."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from email import message_from_bytes, policy

import psycopg
from psycopg.types.json import Jsonb

FROM = "Mailroom Tests <noreply@tests.mailroom.invalid>"
MID_DOMAIN = FROM.rsplit("@", 1)[1].rstrip(">")  # the runners' Message-ID domain


class RunnerProcess:
    """`mailroom run` in a subprocess; stderr (the log) goes to a temp file."""

    def __init__(self, dsn: str, smtp: str, *args: str, env: dict | None = None):
        self.log_file = tempfile.NamedTemporaryFile("w+", prefix="runner-", suffix=".log", delete=False)
        cmd = [sys.executable, "-m", "mailroom.cli", "run", "--dsn", dsn, "--smtp", smtp,
               "--from", FROM, *args]
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log_file, env=full_env)

    def log(self) -> str:
        with open(self.log_file.name) as f:
            return f.read()

    def signal(self, sig=signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("runner did not exit in time; log:\n" + self.log())

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log_file.close()
        os.unlink(self.log_file.name)

    def __enter__(self) -> "RunnerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def statuses(conn: psycopg.Connection) -> dict[str, int]:
    rows = conn.execute("SELECT status, count(*)::int AS n FROM mailroom.messages GROUP BY 1").fetchall()
    return {r["status"]: r["n"] for r in rows}


def settled(conn: psycopg.Connection, total: int, final=("sent", "failed", "cancelled")) -> bool:
    s = statuses(conn)
    return sum(s.get(k, 0) for k in final) == total


def enqueue(conn, to: str, **kw) -> int:
    cols = ", ".join(f"p_{k} => %({k})s" for k in kw)
    sql = "SELECT mailroom.enqueue(p_to => %(to)s" + (", " + cols if cols else "") + ") AS id"
    params = {"to": to}
    for k, v in kw.items():
        params[k] = Jsonb(v) if isinstance(v, dict) else v
    return conn.execute(sql, params).fetchone()["id"]


def enqueue_many(conn, prefix: str, n: int, *, on_ambiguous: str = "retry", due_ago: str = "0 seconds") -> list[str]:
    """n mails with delivery keys prefix-1..prefix-n (to the key @example.com),
    enqueued in one statement; returns the keys."""
    keys = [f"{prefix}-{i}" for i in range(1, n + 1)]
    conn.execute(
        """
        SELECT mailroom.enqueue(k || '@example.com', 'Drill', 'Body', p_delivery_key => k,
                                p_on_ambiguous => %(policy)s, p_send_at => now() - %(ago)s::interval)
        FROM unnest(%(keys)s::text[]) AS k
        """,
        {"keys": keys, "policy": on_ambiguous, "ago": due_ago},
    )
    return keys


def parse(data: bytes):
    return message_from_bytes(data, policy=policy.default)

