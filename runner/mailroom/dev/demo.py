"""`mailroom demo`: the main job end to end on the embedded cluster.

Starts (or reuses) the embedded cluster, deploys a fresh `mailroom_demo`
database with Sqitch, starts `mailroom sink`, stores a template, enqueues
N mails with per-recipient variables, starts R `mailroom run` processes,
shows a live progress bar, and prints a summary. It stops everything it
started and drops the demo database (20,000 mails nobody needs; a database
left behind also keeps the cluster-wide mailroom roles in use, so a later
revert in another database keeps them and says so): --keep-database keeps it
for inspection. Exit code 1 unless sent == enqueued and the sink saw no
duplicate.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import click
import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.rows import dict_row

from mailroom import queries
from mailroom.web.console.devlogin import create_console_login
from mailroom.dev.embedded import Cluster, ClusterError
from mailroom.net import free_port

DEMO_DB = "mailroom_demo"
TEMPLATE_KEY = "demo-welcome"
SUBJECT = "Welcome aboard, {{ name }}"
BODY_TEXT = """Hello {{ name }},

you are recipient number {{ n }} of the mailroom demo.
Your personal code is {{ code[:8] }}.

-- mailroom
"""
BODY_HTML = """<html><body>
<p>Hello <b>{{ name }}</b>,</p>
<p>you are recipient number {{ n }} of the mailroom demo.<br>
Your personal code is <code>{{ code[:8] }}</code>.</p>
</body></html>
"""


def _fmt_secs(s: float | None) -> str:
    if s is None:
        return "--"
    s = int(round(s))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    """A progress line: redrawn in place on a terminal; elsewhere (a log, CI)
    a line every `every` seconds at most, and the final one."""

    def __init__(self, total: int, out=sys.stdout, every: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.total = total
        self.out = out
        self.tty = out.isatty()
        self.every = every
        self.clock = clock
        self.samples: deque[tuple[float, int]] = deque(maxlen=20)
        self.last_print: float | None = None

    def update(self, sent: int, retried: int, failed: int, final: bool = False) -> None:
        now = self.clock()
        self.samples.append((now, sent))
        t0, s0 = self.samples[0]
        rate = (sent - s0) / (now - t0) if now > t0 else 0.0
        eta = (self.total - sent - failed) / rate if rate > 0 else None
        width = 30
        done = (sent + failed) / self.total if self.total else 1.0
        bar = "#" * int(width * done) + "-" * (width - int(width * done))
        line = (f"[{bar}] {done * 100:5.1f}%  sent {sent}/{self.total}  retried {retried}  "
                f"failed {failed}  {rate:7.0f} mails/s  ETA {_fmt_secs(0 if final else eta)}")
        if self.tty:
            self.out.write("\r" + line.ljust(110) + ("\n" if final else ""))
            self.out.flush()
        elif final or self.last_print is None or now - self.last_print >= self.every:
            self.out.write(line + "\n")
            self.out.flush()
            self.last_print = now


def _say(msg: str) -> None:
    click.echo(f"demo: {msg}")


def _drop_demo_database(cluster: Cluster, name: str) -> None:
    with psycopg.connect(cluster.url("postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@contextmanager
def demo_database(cluster: Cluster, keep: bool = False, name: str = DEMO_DB,
                  template: str | None = None) -> Iterator[str]:
    """A fresh database deployed with Sqitch (or cloned from a deployed
    `template`, for tests); its URL. Dropped on the way out unless `keep`."""
    _drop_demo_database(cluster, name)
    with psycopg.connect(cluster.url("postgres"), autocommit=True) as admin:
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        admin.execute(create)
    try:
        if not template:
            cluster.deploy(log=lambda m: None, database=name)
        yield cluster.url(name)
    finally:
        if not keep:
            _drop_demo_database(cluster, name)


def _wait_file(path: Path, proc: subprocess.Popen, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise ClusterError("the sink did not start")
        time.sleep(0.05)


def _stop(procs: list[subprocess.Popen], timeout: float = 30) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _print_console_login(cluster: Cluster, database: str, cluster_stops: bool) -> None:
    """The console is the next thing to look at: a login for it (mailroom db console-login)."""
    try:
        login = create_console_login(cluster.url(database), cluster.state_dir / "console-users")
    except (psycopg.Error, ClusterError, ValueError) as e:
        _say(f"no console login made: {e}")
        return
    click.echo("")
    click.echo(f"the operator console, on database {database} (a new password each run):")
    if cluster_stops:
        click.echo("  mailroom db up")
    click.echo(login.instructions())


def run_demo(mails: int, runners: int, concurrency: int, batch: int, keep_cluster: bool,
             keep_database: bool = False) -> int:
    cluster = Cluster.for_checkout()
    t_setup = time.monotonic()
    started_cluster = cluster.up(log=lambda m: click.echo(m))
    work = cluster.state_dir / "demo"
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("*"):
        old.unlink()
    sink_proc: subprocess.Popen | None = None
    runner_procs: list[subprocess.Popen] = []
    pool: psycopg_pool.ConnectionPool | None = None
    database = ExitStack()  # the demo database goes last, after the runners and the pool
    try:
        url = database.enter_context(demo_database(cluster, keep=keep_database))
        _say(f"database {DEMO_DB} deployed with sqitch ({time.monotonic() - t_setup:.1f}s): {url}")

        port = free_port()
        stats_file = work / "sink-stats.json"
        sink_proc = subprocess.Popen(
            [sys.executable, "-m", "mailroom.cli", "sink", "--port", str(port), "--stats-file", str(stats_file)],
            stdout=subprocess.PIPE, stderr=open(work / "sink.log", "w"), text=True,
        )
        _wait_file(stats_file, sink_proc)
        _say(f"mailroom sink listening on 127.0.0.1:{port}")

        pool = psycopg_pool.ConnectionPool(url, min_size=1, max_size=2, open=True,
                                           kwargs={"autocommit": True, "row_factory": dict_row})
        queries.upsert_template(pool, TEMPLATE_KEY, SUBJECT, BODY_TEXT, BODY_HTML)
        run_id = uuid.uuid4().hex[:8]
        t0 = time.monotonic()
        enqueued = 0
        step = 5000
        for first in range(1, mails + 1, step):
            enqueued += queries.enqueue_demo_batch(pool, first, min(mails, first + step - 1), TEMPLATE_KEY, run_id)
        enqueue_s = time.monotonic() - t0
        _say(f"template {TEMPLATE_KEY!r} stored; {enqueued} mails with per-recipient variables enqueued "
             f"in {enqueue_s:.1f}s ({enqueued / enqueue_s:.0f}/s)")

        t_start = time.monotonic()
        for i in range(runners):
            runner_procs.append(subprocess.Popen(
                [sys.executable, "-m", "mailroom.cli", "run", "--dsn", url,
                 "--smtp", f"smtp://127.0.0.1:{port}", "--concurrency", str(concurrency),
                 "--batch", str(batch), "--worker", f"demo-{i + 1}", "--from", "Mailroom Demo <demo@mailroom.invalid>",
                 "--log-format", "json", "--poll-interval", "1",
                 # its mail goes to a local sink; a real broadcast needs --unsubscribe-url
                 "--no-unsubscribe-headers"],
                stdout=subprocess.DEVNULL, stderr=open(work / f"runner-{i + 1}.log", "w"),
            ))
        _say(f"{runners} x mailroom run started (concurrency {concurrency}, batch {batch}); logs in {work}")

        progress = Progress(enqueued)
        deadline = time.monotonic() + max(600, enqueued / 20)
        while True:
            counts = queries.status_counts(pool)
            outcomes = queries.attempt_counts(pool)
            sent = counts.get("sent", 0)
            failed = counts.get("failed", 0) + counts.get("review", 0) + counts.get("cancelled", 0)
            retried = outcomes.get("retry", 0) + outcomes.get("ambiguous", 0)
            done = sent + failed >= enqueued
            progress.update(sent, retried, failed, final=done)
            if done:
                break
            dead = [p for p in runner_procs if p.poll() is not None]
            if len(dead) == len(runner_procs) or time.monotonic() > deadline:
                progress.update(sent, retried, failed, final=True)
                _say("stopped waiting: " + ("every runner exited" if dead else "timed out"))
                break
            time.sleep(0.25)
        elapsed = time.monotonic() - t_start

        _stop(runner_procs)
        codes = [p.returncode for p in runner_procs]
        _stop([sink_proc])
        out = sink_proc.stdout.read() if sink_proc.stdout else ""
        stats = json.loads(out.strip().splitlines()[-1]) if out.strip() else json.loads(stats_file.read_text())
        counts = queries.status_counts(pool)
        sent, failed = counts.get("sent", 0), counts.get("failed", 0)
        ok = sent == enqueued and stats["duplicates"] == 0 and all(c == 0 for c in codes)

        click.echo("")
        click.echo("mailroom demo summary")
        click.echo(f"  enqueued          {enqueued}")
        click.echo(f"  sent              {sent}")
        click.echo(f"  failed            {failed}")
        click.echo(f"  other             {sum(v for k, v in counts.items() if k not in ('sent', 'failed'))}")
        click.echo(f"  sink received     {stats['received']} ({stats['unique_message_ids']} unique Message-IDs)")
        click.echo(f"  duplicates (sink) {stats['duplicates']}")
        click.echo(f"  runners           {runners} processes x {concurrency} threads, exit codes {codes}")
        click.echo(f"  elapsed           {elapsed:.1f}s")
        click.echo(f"  rate              {sent / elapsed:.0f} mails/s")
        click.echo(f"  result            {'OK: sent == enqueued, no duplicates' if ok else 'FAILED'}")
        _print_console_login(cluster, DEMO_DB if keep_database else "mailroom",
                             cluster_stops=started_cluster and not keep_cluster)
        return 0 if ok else 1
    finally:
        if pool is not None:
            pool.close()
        _stop(runner_procs, timeout=10)
        if sink_proc is not None:
            _stop([sink_proc], timeout=5)
        database.close()
        if not keep_database:
            _say(f"database {DEMO_DB} dropped (--keep-database keeps it)")
        if started_cluster and not keep_cluster:
            cluster.down(log=lambda m: click.echo(m))
