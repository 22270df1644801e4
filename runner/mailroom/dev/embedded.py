"""The embedded default: a private PostgreSQL 15 cluster for one checkout.

`mailroom db up` initialises a cluster in a git-ignored folder, starts it on a
free port of 127.0.0.1, creates the mailroom database with pg_cron and pgTAP,
and deploys the schema with Sqitch. The demo, the tests and developers share it.

initdb and postgres refuse to run as root, so when the caller is root every
server-side command runs as the `postgres` user, and the cluster lives where
that user can reach it: inside the checkout when every parent folder is
traversable, otherwise under /var/tmp (recorded in .mailroom/cluster-dir).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from mailroom.net import free_port

DATABASE = "mailroom"
SUPERUSER = "postgres"
PG_BIN = Path(os.environ.get("MAILROOM_PG_BIN", "/usr/lib/postgresql/15/bin"))


class ClusterError(RuntimeError):
    """The embedded cluster could not be set up; the message says what to do."""


def project_root() -> Path:
    """The checkout this cluster belongs to: $MAILROOM_ROOT, or the nearest
    folder above the working directory holding sqitch.plan, or the package's
    own checkout."""
    if os.environ.get("MAILROOM_ROOT"):
        return Path(os.environ["MAILROOM_ROOT"]).resolve()
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "sqitch.plan").is_file() and (folder / "db").is_dir():
            return folder
    return Path(__file__).resolve().parents[2]


def _running_as_root() -> bool:
    return os.geteuid() == 0


def _as_owner(cmd: list[str]) -> list[str]:
    if _running_as_root():
        return ["runuser", "-u", SUPERUSER, "--", *cmd]
    return cmd


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As PostgreSQL binds: after a crash the port's old connections linger
        # in TIME_WAIT, which must not push the restarted cluster (and every
        # client still configured for it) to another port.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _pid_reused(pid_file: Path) -> bool:
    try:
        pid = int(pid_file.read_text().splitlines()[0])
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError, IndexError):
        return False  # no such process: PostgreSQL handles this itself
    return comm not in ("postgres", "postmaster")


@dataclass
class Cluster:
    root: Path

    @classmethod
    def for_checkout(cls) -> "Cluster":
        return cls(project_root())

    # -- where things live -------------------------------------------------
    @property
    def state_dir(self) -> Path:
        return self.root / ".mailroom"

    @property
    def home(self) -> Path:
        """The folder owned by the server's user: data/ and postgres.log."""
        pointer = self.state_dir / "cluster-dir"
        if pointer.is_file():
            return Path(pointer.read_text().strip())
        return self.state_dir / "cluster"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def log_file(self) -> Path:
        return self.home / "postgres.log"

    def _choose_home(self) -> Path:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        local = self.state_dir / "cluster"
        if not _running_as_root() or self._owner_can_reach(self.state_dir):
            return local
        digest = hashlib.sha1(str(self.root).encode()).hexdigest()[:12]
        return Path("/var/tmp") / f"mailroom-{digest}"

    @staticmethod
    def _owner_can_reach(folder: Path) -> bool:
        probe = subprocess.run(
            _as_owner(["test", "-x", str(folder)]), capture_output=True
        )
        return probe.returncode == 0

    # -- state --------------------------------------------------------------
    def _pid_file_lines(self) -> list[str]:
        try:
            return (self.data_dir / "postmaster.pid").read_text().splitlines()
        except OSError:
            return []

    def is_running(self) -> bool:
        if not (self.data_dir / "PG_VERSION").exists():
            return False
        status = subprocess.run(
            _as_owner([str(PG_BIN / "pg_ctl"), "status", "-D", str(self.data_dir)]),
            capture_output=True,
            text=True,
        )
        return status.returncode == 0

    @property
    def port(self) -> int | None:
        lines = self._pid_file_lines()
        if len(lines) >= 4 and lines[3].strip().isdigit():
            return int(lines[3])
        return None

    def url(self, database: str = DATABASE) -> str:
        port = self.port
        if port is None or not self.is_running():
            raise ClusterError("the embedded cluster is not running: run `mailroom db up`")
        return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{database}"

    def sqitch_target(self, database: str = DATABASE) -> str:
        return "db:pg://{}@127.0.0.1:{}/{}".format(SUPERUSER, self.port, database)

    # -- actions ------------------------------------------------------------
    def up(self, deploy: bool = True, log=print) -> bool:
        """Initialise, start, create the database and deploy. Returns True when
        this call started the server (False when it was already running)."""
        self._check_binaries()
        if not (self.data_dir / "PG_VERSION").exists():
            self._init(log)
        started = False
        if not self.is_running():
            self._start(log)
            started = True
        self._create_database(log)
        if deploy:
            self.deploy(log)
        return started

    def down(self, log=print) -> bool:
        if not self.is_running():
            return False
        subprocess.run(
            _as_owner([str(PG_BIN / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "fast", "-w"]),
            check=True,
            capture_output=True,
        )
        log("mailroom: embedded cluster stopped")
        return True

    def deploy(self, log=print, database: str = DATABASE) -> None:
        result = subprocess.run(
            ["sqitch", "deploy", "--target", self.sqitch_target(database)],
            cwd=self.root,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ClusterError("sqitch deploy failed:\n" + result.stdout + result.stderr)
        for line in result.stdout.splitlines():
            if line.startswith(("  + ", "Nothing to deploy")):
                log("sqitch: " + line.strip())

    def psql(self, sql: str, database: str = DATABASE) -> str:
        result = subprocess.run(
            ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
             "-d", self.url(database), "-c", sql],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ClusterError(f"psql failed: {result.stderr.strip()}")
        return result.stdout.strip()

    def _check_binaries(self) -> None:
        missing = [b for b in ("initdb", "pg_ctl", "postgres") if not (PG_BIN / b).exists()]
        if missing or not shutil.which("sqitch") or not shutil.which("psql"):
            raise ClusterError(
                "PostgreSQL 15 and Sqitch are needed: run `make deps` (as root), or "
                "apt-get install postgresql-15 postgresql-15-cron postgresql-15-pgtap sqitch"
            )

    def _init(self, log) -> None:
        home = self._choose_home()
        if home.exists():
            self._remove_orphan(home, log)
        if home != self.state_dir / "cluster":
            (self.state_dir / "cluster-dir").write_text(str(home) + "\n")
        home.mkdir(parents=True, exist_ok=True)
        if _running_as_root():
            owner = pwd.getpwnam(SUPERUSER)
            os.chown(home, owner.pw_uid, owner.pw_gid)
        os.chmod(home, 0o700)
        log(f"mailroom: initialising the embedded cluster in {self.data_dir}")
        subprocess.run(
            _as_owner([
                str(PG_BIN / "initdb"), "-D", str(self.data_dir), "-U", SUPERUSER,
                "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8",
            ]),
            check=True,
            capture_output=True,
        )
        fragment = (self.root / "db" / "postgresql.conf").read_text()
        conf = self.data_dir / "postgresql.conf"
        with conf.open("a") as f:
            f.write("\n" + fragment)
            f.write(f"\nunix_socket_directories = '{self.data_dir}'\n")
            f.write("include_if_exists = 'mailroom.port.conf'\n")

    def _remove_orphan(self, home: Path, log) -> None:
        """A cluster folder no pointer leads to: left by an earlier checkout at
        the same path (a CI clone, say). It is nobody's any more."""
        data = home / "data"
        if (data / "PG_VERSION").exists():
            subprocess.run(
                _as_owner([str(PG_BIN / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate", "-w"]),
                capture_output=True,
            )
        log(f"mailroom: removing {home}, left by an earlier checkout at this path")
        shutil.rmtree(home)

    def _start(self, log) -> None:
        # A crash leaves postmaster.pid behind. PostgreSQL itself takes over a
        # pid file whose process is gone (and checks that no old backend still
        # holds shared memory), but refuses when the pid was reused by another
        # program: only then is the file removed here.
        stale = self.data_dir / "postmaster.pid"
        if stale.exists() and _pid_reused(stale):
            log("mailroom: removing a stale postmaster.pid (its pid now belongs to another program)")
            stale.unlink()
        port_conf = self.data_dir / "mailroom.port.conf"
        port = None
        if port_conf.exists():
            port = int(port_conf.read_text().split("=")[1])
            if not _port_is_free(port):
                port = None
        port = port or free_port()
        port_conf.write_text(f"port = {port}\n")
        if _running_as_root():
            owner = pwd.getpwnam(SUPERUSER)
            os.chown(port_conf, owner.pw_uid, owner.pw_gid)
        result = subprocess.run(
            _as_owner([
                str(PG_BIN / "pg_ctl"), "start", "-D", str(self.data_dir),
                "-l", str(self.log_file), "-w", "-t", "120",
            ]),
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            tail = ""
            if self.log_file.exists():
                tail = "\n".join(self.log_file.read_text().splitlines()[-15:])
            raise ClusterError(f"the embedded cluster did not start:\n{result.stderr}{tail}")
        for _ in range(100):
            if self.port:
                break
            time.sleep(0.05)
        log(f"mailroom: embedded cluster running on 127.0.0.1:{self.port}")

    def _create_database(self, log) -> None:
        exists = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'", "postgres")
        if not exists:
            self.psql(f"CREATE DATABASE {DATABASE}", "postgres")
            log(f"mailroom: database {DATABASE} created")
        self.psql(
            "CREATE EXTENSION IF NOT EXISTS pg_cron; CREATE EXTENSION IF NOT EXISTS pgtap;"
        )
