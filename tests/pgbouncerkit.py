"""A real PgBouncer for the tests and benchmarks: its own ini in a temporary
folder, a free loopback port, in front of the test cluster.

PgBouncer will not run as root: as root it is started with `-u postgres`
(the embedded cluster's owner), and its folder is handed to that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from mailroom.net import free_port

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"



class PgBouncer:
    """`with PgBouncer(server_url, pool_mode="transaction") as b: b.url(dbname)`."""

    def __init__(self, server_url: str, *, pool_mode: str = "transaction", pool_size: int = 2,
                 users: tuple[str, ...] = ("postgres",)):
        info = psycopg.conninfo.conninfo_to_dict(server_url)
        self.server_host, self.server_port = info.get("host") or "127.0.0.1", int(info.get("port") or 5432)
        self.pool_mode, self.pool_size, self.users = pool_mode, pool_size, users
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        self.proc: subprocess.Popen | None = None

    @property
    def ini(self) -> Path:
        return self.dir / "pgbouncer.ini"

    @property
    def log_file(self) -> Path:
        return self.dir / "pgbouncer.log"

    def url(self, dbname: str, user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def log(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""

    def _write_config(self) -> None:
        # Every database of the cluster through the fallback entry; few server
        # connections, so that clients really share them.
        self.ini.write_text(f"""[databases]
* = host={self.server_host} port={self.server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir / 'users.txt'}
pool_mode = {self.pool_mode}
default_pool_size = {self.pool_size}
max_client_conn = 200
server_reset_query = DISCARD ALL
logfile = {self.log_file}
pidfile = {self.dir / 'pgbouncer.pid'}
admin_users = postgres
""")
        (self.dir / "users.txt").write_text("".join(f'"{u}" ""\n' for u in self.users))

    def start(self) -> "PgBouncer":
        self._write_config()
        cmd = [PGBOUNCER, str(self.ini)]
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, owner.pw_uid, owner.pw_gid)
            cmd = [PGBOUNCER, "-u", "postgres", str(self.ini)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not start (exit {self.proc.poll()}):\n{self.log()}")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # SIGINT: safe shutdown, clients disconnected
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        """Stopped and started again on the same port: every client connection is cut."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "PgBouncer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
