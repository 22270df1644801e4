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

from mailroom.dev.embedded import Cluster

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
def scratch_database(name: str, synchronous_commit: str | None = None):
    """Yield the URL of a fresh database `name` with mailroom deployed by
    Sqitch (a clone of the bench template database); drop it after.
    synchronous_commit: set for every connection to it (ALTER DATABASE);
    None keeps the cluster's (the embedded development cluster runs off;
    issue 13's figures are taken with on, PostgreSQL's default)."""
    server = _server_url()
    template = _template(server)
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        if synchronous_commit is not None:
            c.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = {synchronous_commit}')
    url = with_database(server, name)
    try:
        yield url
    finally:
        with psycopg.connect(server, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


PGBENCH = "/usr/lib/postgresql/15/bin/pgbench"
PGBENCH_CLIENTS, PGBENCH_BATCH = 4, 50


def pgbench_rate(url: str, script: str, n: int) -> float:
    """4 pgbench clients running bench/<script> (each run handles
    PGBENCH_BATCH rows) until n rows are done; returns rows per second."""
    import re

    per_client = n // PGBENCH_BATCH // PGBENCH_CLIENTS
    out = subprocess.run([PGBENCH, "-n", "-f", str(ROOT / "bench" / script), "-c", str(PGBENCH_CLIENTS),
                          "-j", str(PGBENCH_CLIENTS), "-t", str(per_client), url],
                         capture_output=True, text=True)
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out.stdout)
    if out.returncode != 0 or not m:
        raise RuntimeError(f"pgbench {script} failed:\n{out.stdout}\n{out.stderr}")
    return float(m.group(1)) * PGBENCH_BATCH


def pct(values: list[float], p: float) -> float:
    """The p-th percentile of values, nearest rank."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


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


# -- `mailroom run` processes for the runner benchmarks (drain, pickup, runner_memory) --

def _runnerkit():
    """tests/runnerkit.py's RunnerProcess: the same real `mailroom run` process the tests use."""
    import sys
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.runnerkit import RunnerProcess
    return RunnerProcess


@contextmanager
def mailroom_runners(url: str, smtp: str, n: int, *args: str, name: str = "bench",
                     per_runner: list[tuple[str, ...]] | None = None, env: dict | None = None):
    """Start n `mailroom run` processes and yield them once each is idle and
    LISTENing (its LISTEN connection is open); stop them (SIGTERM) after.
    per_runner: extra arguments for each runner (e.g. its own --metrics-port);
    env: extra environment (e.g. PYTHONPATH of another checkout's runner/)."""
    RunnerProcess = _runnerkit()
    extra = per_runner or [()] * n
    procs = [RunnerProcess(url, smtp, "--worker", f"{name}-{i}", "--log-level", "warning", *args, *extra[i],
                           env=env)
             for i in range(n)]
    try:
        deadline = time.monotonic() + 60
        with psycopg.connect(url, autocommit=True) as c:
            while c.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                            " AND application_name LIKE 'mailroom-run %%' AND query LIKE 'LISTEN%%'"
                            " AND state = 'idle'").fetchone()[0] < n:
                dead = [p for p in procs if p.proc.poll() is not None]
                if dead:
                    raise RuntimeError("a runner exited:\n" + dead[0].log())
                if time.monotonic() > deadline:
                    raise RuntimeError("runners did not start within 60 s")
                time.sleep(0.05)
        time.sleep(0.2)  # past the first claim the listener triggers on connecting
        yield procs
    finally:
        for p in procs:
            try:
                p.stop(timeout=60)
            except AssertionError:
                pass
            p.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    """Peak resident set size (VmHWM) of a running process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/%d/status" % pid)


BENCH_TEMPLATE = ("SELECT mailroom.upsert_template('bench', 'Your order {{ n }}, {{ name }}',"
                  " 'Hello {{ name }},\nyour order {{ n }} has shipped.\n',"
                  " '<p>Hello {{ name }},</p><p>your order <b>{{ n }}</b> has shipped.</p>')")


# The v0.4 tables (deploy/table_contents.sql, table_queue.sql, split_messages.sql):
# a mail is one row of mailroom.contents (written once) plus, while live, one
# row of mailroom.queue (same id); a finished mail has instead one finishing
# ledger row (attempts.finished_as). mailroom.messages is a read-only view.
EMPTY_QUEUE = "TRUNCATE mailroom.attempts, mailroom.queue, mailroom.contents CASCADE"


def insert_mail(conn, columns: str, select: str, params=None, run_at: str = "now()") -> None:
    """Store queued mail as the owner, as enqueue leaves it: `select` yields
    the contents `columns`; each row also gets its queue row (run_at = the
    SQL expression `run_at`, which may use the contents columns as c.<col>).
    Plain INSERT: loading is not what is measured."""
    conn.execute(
        f"WITH c AS (INSERT INTO mailroom.contents ({columns}) {select}"
        "            RETURNING id, priority, sender, campaign_id, max_attempts, on_ambiguous, created_at)"
        " INSERT INTO mailroom.queue (id, priority, run_at, sender, campaign_id, max_attempts, on_ambiguous, updated_at)"
        f" SELECT c.id, c.priority, {run_at}, c.sender, c.campaign_id, c.max_attempts, c.on_ambiguous, c.created_at"
        " FROM c",
        params)


def vacuum_analyze(conn) -> None:
    for table in ("mailroom.contents", "mailroom.queue", "mailroom.attempts"):
        conn.execute(f"VACUUM ANALYZE {table}")



def fill_history(conn, history: int, queued: int, *, span: str = "40 days", ended: str = "0",
                 key: str = "h", address: str = "u", recipients: int = 50000) -> None:
    """The operator benchmarks' history: `history` finished mails spread over
    the `span` (40 days) that ended `ended` ago (now), to `recipients`
    addresses <address><n>@example.com (delivery keys <key>-<n>), plus `queued`
    overdue queued mails (5% on_ambiguous review) of which 500 had a lease
    that expired an hour ago and was reclaimed. Written into contents and the
    ledger directly (v0.4's shapes); the caller vacuums and analyses. May be
    called again with another `key` (and queued=0): older history below."""
    # History over the span: sent (2% after a retry, 0.1% twice), failed, cancelled;
    # as v0.4 keeps it: a contents row per mail, its ledger rows, the last one finishing it.
    first = conn.execute("SELECT coalesce(max(id), 0) FROM mailroom.contents").fetchone()[0]
    conn.execute("DROP TABLE IF EXISTS history")
    conn.execute(
        """
        CREATE TEMP TABLE history AS
        SELECT g, s.status, CASE WHEN g %% 50 = 0 THEN 2 ELSE 1 END AS attempts, t,
               CASE WHEN g %% 3 = 0 THEN 'news' ELSE 'default' END AS sender
        FROM generate_series(1, %(n)s) g,
             LATERAL (SELECT now() - %(ended)s::interval - (g::float / %(n)s) * %(span)s::interval AS t) tt,
             LATERAL (SELECT CASE WHEN g %% 100 = 0 THEN 'failed' WHEN g %% 101 = 0 THEN 'cancelled'
                                  ELSE 'sent' END AS status) s
        """, {"n": history, "span": span, "ended": ended})
    conn.execute(
        """
        INSERT INTO mailroom.contents (delivery_key, to_address, subject, body_text, sender, created_at)
        SELECT %(key)s || '-' || g, %(address)s || (g %% %(r)s) || '@example.com', 'Hi', 'Body', sender, t FROM history
        """, {"key": key, "address": address, "r": recipients})
    conn.execute(
        """
        INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at,
                                       reported_at, reported, outcome, smtp_code, duplicate, finished_as, finish_key)
        SELECT c.id, a, 'bench', gen_random_uuid(), h.t + (a - 1) * interval '1 minute',
               h.t + (a - 1) * interval '1 minute' + interval '1 second',
               h.t + (a - 1) * interval '1 minute' + interval '1 second',
               CASE WHEN a < h.attempts THEN 'retry' WHEN h.status = 'sent' THEN 'sent' ELSE 'failed' END,
               CASE WHEN a < h.attempts THEN 'retry' WHEN h.status = 'sent' THEN 'sent' ELSE 'failed' END,
               CASE WHEN a < h.attempts THEN 451 WHEN h.status = 'sent' THEN 250 ELSE 550 END, false,
               CASE WHEN a = h.attempts THEN h.status END,
               CASE WHEN a = h.attempts THEN 0 ELSE nextval('mailroom.attempts_id_seq') END
        FROM history h JOIN mailroom.contents c ON c.delivery_key = %(key)s || '-' || h.g,
             generate_series(1, h.attempts) a
        WHERE h.status <> 'cancelled'
        """, {"key": key})
    conn.execute(
        """
        INSERT INTO mailroom.attempts (message_id, attempt, finished_at, outcome, finished_as, status_reason)
        SELECT c.id, 0, h.t, 'cancelled', 'cancelled', 'cancelled'
        FROM history h JOIN mailroom.contents c ON c.delivery_key = %(key)s || '-' || h.g
        WHERE h.status = 'cancelled'
        """, {"key": key})
    conn.execute(
        """
        INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at,
                                       reported_at, reported, outcome, duplicate, finish_key)
        SELECT a.message_id, 1, 'ghost', gen_random_uuid(), a.claimed_at, a.claimed_at + interval '9 minutes',
               a.claimed_at + interval '9 minutes', 'sent', 'stale', true, nextval('mailroom.attempts_id_seq')
        FROM mailroom.attempts a WHERE a.finished_as = 'sent' AND a.message_id %% 1000 = 7 AND a.message_id > %(first)s
        """, {"first": first})
    if queued == 0:
        return
    conn.execute(
        """
        SELECT count(mailroom.enqueue('q' || g || '@example.com', 'Hi', 'Body', p_delivery_key => 'q-' || g,
                                      p_send_at => now() - interval '10 minutes',
                                      p_on_ambiguous => CASE WHEN g %% 20 = 0 THEN 'review' ELSE 'retry' END))
        FROM generate_series(1, %(q)s) g
        """, {"q": queued})
    # 500 leases that ran out an hour ago (a claim whose runner died), then reclaimed:
    # written on the queue rows directly, as a claim an hour ago would have left them.
    conn.execute(
        """
        UPDATE mailroom.queue q
        SET status = 'sending', attempts = q.attempts + 1, lease_token = gen_random_uuid(),
            leased_until = now() - interval '1 hour' + interval '1 second', worker = 'dead',
            claimed_at = now() - interval '1 hour', updated_at = now() - interval '1 hour'
        FROM (SELECT id FROM mailroom.queue WHERE status = 'queued'
              ORDER BY priority DESC, run_at, id LIMIT 500) d
        WHERE q.id = d.id
        """)
    conn.execute("SELECT mailroom.reclaim()")


def live_count(conn) -> int:
    """Mail still queued or leased (the hot table, not the view)."""
    return conn.execute("SELECT count(*) FROM mailroom.queue WHERE status IN ('queued', 'sending')").fetchone()[0]


def sent_stats(conn) -> tuple[int, float | None]:
    """(mails finished as sent, epoch of the last finish) from the finishing ledger rows."""
    n, last = conn.execute("SELECT count(*), extract(epoch FROM max(finished_at))::float8 FROM mailroom.attempts"
                           " WHERE finished_as = 'sent'").fetchone()
    return n, last


def load_queued(conn, n: int, tag: str = "") -> None:
    """Empty the queue, its contents and the ledger, then store n queued mails
    to 50 domains (template 'bench' with per-mail variables), vacuumed and
    analysed. A CHECKPOINT first: the pages the load writes carry their
    full-page images already, so WAL measured over a drain that follows is
    the drain's own records (see wal_mark)."""
    conn.execute("CHECKPOINT")
    conn.execute(EMPTY_QUEUE)
    conn.execute(BENCH_TEMPLATE)
    insert_mail(conn, "delivery_key, to_address, template_key, template_vars",
                "SELECT 'bench-' || %s || '-' || g, 'user' || g || '@d' || (g %% 50) || '.example', 'bench',"
                "       jsonb_build_object('name', 'User ' || g, 'n', g)"
                " FROM generate_series(1, %s) g", (tag, n))
    vacuum_analyze(conn)


def wal_mark(conn) -> tuple[int, int, int]:
    """(WAL position in bytes, WAL records, full-page images) of the whole
    cluster now. pg_stat_wal counts what backends flushed to the statistics:
    exact for processes that exited (pgbench clients), lagging for live ones."""
    return conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, wal_records, wal_fpi FROM pg_stat_wal"
                        ).fetchone()


def wal_since(conn, mark: tuple[int, int, int], n: int) -> tuple[float, float, float]:
    """WAL bytes, records and full-page images per mail since `mark`, over n mails."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    now = wal_mark(conn)
    return tuple((float(b) - float(a)) / n for a, b in zip(mark, now))


@contextmanager
def sink_process():
    """`mailroom sink` in its own process on a free loopback port; yields its smtp:// URL."""
    import socket
    import sys
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "mailroom.cli", "sink", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("mailroom sink did not start")
                time.sleep(0.05)
        yield f"smtp://127.0.0.1:{port}?timeout=30"
    finally:
        proc.terminate()
        proc.wait(30)
