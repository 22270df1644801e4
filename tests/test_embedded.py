"""The embedded cluster: idempotent `up`, recovery from a crash's stale pid file.

Runs a throwaway cluster of its own (not the shared one the suite uses)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from mailroom.dev.embedded import Cluster

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def scratch_cluster(tmp_path_factory) -> Cluster:
    root = Path(tmp_path_factory.mktemp("embedded"))
    os.chmod(root, 0o755)
    (root / "db").mkdir()
    shutil.copy(REPO / "db" / "postgresql.conf", root / "db" / "postgresql.conf")
    cluster = Cluster(root)
    yield cluster
    if cluster.is_running():
        cluster.down(log=lambda m: None)
    # As root the cluster may live under /var/tmp (pytest's folders are private).
    shutil.rmtree(cluster.home, ignore_errors=True)


def test_up_is_idempotent_and_survives_a_crash(scratch_cluster):
    quiet = lambda m: None  # noqa: E731
    assert scratch_cluster.up(deploy=False, log=quiet) is True, "the first up starts the server"
    port = scratch_cluster.port
    assert scratch_cluster.up(deploy=False, log=quiet) is False, "a second up finds it running"
    assert scratch_cluster.port == port

    with psycopg.connect(scratch_cluster.url()) as conn:
        extensions = {r[0] for r in conn.execute("SELECT extname FROM pg_extension")}
        settings = dict(conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('listen_addresses', 'shared_preload_libraries', 'cron.use_background_workers')"
        ).fetchall())
    assert {"pg_cron", "pgtap"} <= extensions
    assert settings == {"listen_addresses": "127.0.0.1", "shared_preload_libraries": "pg_cron",
                        "cron.use_background_workers": "on"}

    # A crash: the postmaster dies without removing postmaster.pid.
    pid = int((scratch_cluster.data_dir / "postmaster.pid").read_text().splitlines()[0])
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        if not scratch_cluster.is_running():
            break
        time.sleep(0.1)
    assert (scratch_cluster.data_dir / "postmaster.pid").exists(), "the crash left its pid file"

    assert scratch_cluster.up(deploy=False, log=quiet) is True, "up recovers from the stale pid file"
    with psycopg.connect(scratch_cluster.url()) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)

    assert scratch_cluster.down(log=quiet) is True
    assert not scratch_cluster.is_running()
    assert scratch_cluster.down(log=quiet) is False, "down twice is fine"


def test_up_takes_over_a_pid_file_whose_pid_was_reused(scratch_cluster):
    quiet = lambda m: None  # noqa: E731
    scratch_cluster.up(deploy=False, log=quiet)
    pid_file = scratch_cluster.data_dir / "postmaster.pid"
    lines = pid_file.read_text().splitlines()
    scratch_cluster.down(log=quiet)
    # After a crash and a reboot the old pid may belong to any program.
    other = subprocess.Popen(["sleep", "30"])
    try:
        pid_file.write_text("\n".join([str(other.pid), *lines[1:]]) + "\n")
        if os.geteuid() == 0:
            shutil.chown(pid_file, "postgres", "postgres")
        assert scratch_cluster.up(deploy=False, log=quiet) is True
        with psycopg.connect(scratch_cluster.url()) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        other.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason="the /var/tmp fallback is for root, whose checkout postgres may not reach")
def test_a_fresh_checkout_at_the_same_path_reclaims_the_fallback_folder(tmp_path_factory):
    quiet = lambda m: None  # noqa: E731
    hidden = Path(tmp_path_factory.mktemp("private"))
    os.chmod(hidden, 0o700)  # the postgres user cannot traverse it: like a clone under /root
    root = hidden / "checkout"
    (root / "db").mkdir(parents=True)
    shutil.copy(REPO / "db" / "postgresql.conf", root / "db" / "postgresql.conf")
    cluster = Cluster(root)
    home = None
    try:
        cluster.up(deploy=False, log=quiet)
        home = cluster.home
        assert str(home).startswith("/var/tmp/mailroom-"), home
        cluster.down(log=quiet)
        # A new clone at the same path: no .mailroom/, but the old folder remains.
        shutil.rmtree(root / ".mailroom")
        fresh = Cluster(root)
        assert fresh.up(deploy=False, log=quiet) is True
        assert fresh.home == home
        with psycopg.connect(fresh.url()) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        fresh.down(log=quiet)
    finally:
        if Cluster(root).is_running():
            Cluster(root).down(log=quiet)
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)
