"""Drain: how fast 4 `mailroom run` processes empty a queue, next to the seed
article's design (baseline) and the least a batched SKIP LOCKED queue can do
(limit), measured in the same run on the same cluster.

- baseline: 4 Python processes, one connection each, the seed article's worker:
  claim 50 with FOR UPDATE SKIP LOCKED (one UPDATE ... RETURNING), then one
  `UPDATE ... SET status = 'sent'` per row; on its own plain table
  (bench_seed, the seed's columns and partial pending index).
- limit: pgbench, 4 clients, bench/limit.pgbench: one UPDATE ... RETURNING
  claiming 50 rows, one UPDATE marking the 50 sent (bench_limit, same shape).
- mailroom SQL only: pgbench, 4 clients, bench/mailroom_sql.pgbench:
  claim_batch(50) and mark_outcomes of the 50 as sent, no runner: the share
  of the SQL (ledger, leases, send-rate checks) in the gap to the limit.
- mailroom: 4 `mailroom run` processes with their default concurrency and
  batch, `null://` (accepts without building the mail: the queue machinery);
  then `null://?render=1` (the mail is built and discarded: what rendering
  adds), then SMTP to `mailroom sink` on loopback, with the runners' CPU time
  per mail (user + system of the 4 processes over the drain).

Every side drains freshly loaded rows; baseline, limit and mailroom take turns,
best of the rounds. Runners start, go idle, are stopped (SIGSTOP) while the
rows are loaded and continued (SIGCONT): the clock starts warm, as for the
baseline processes. The drain ends at the last sent_at.

    .venv/bin/python bench/drain.py [--quick] [--synchronous-commit=off]

Every connection runs with synchronous_commit = on (PostgreSQL's default and
what production runs: each commit waits for its WAL flush, which is what
makes the seed's one commit per mail expensive); the embedded development
cluster defaults to off, which --synchronous-commit=off keeps.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (ROOT, cpu_seconds, load_queued, mailroom_runners, scratch_database,  # noqa: E402
                     sink_process)

PGBENCH = "/usr/lib/postgresql/15/bin/pgbench"
WORKERS, SEED_BATCH = 4, 50

SEED_TABLE = """
CREATE TABLE {t} (
  id            bigserial PRIMARY KEY,
  campaign_id   bigint NOT NULL,
  user_id       bigint NOT NULL,
  email         text NOT NULL,
  status        text NOT NULL DEFAULT 'pending',
  attempts      integer NOT NULL DEFAULT 0,
  locked_at     timestamptz,
  sent_at       timestamptz,
  failed_reason text,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  UNIQUE (campaign_id, user_id)
);
CREATE INDEX {t}_pending_idx ON {t} (id) WHERE status = 'pending';
"""

SEED_CLAIM = """
WITH claimed AS (
  SELECT id FROM bench_seed
  WHERE status = 'pending'
  ORDER BY id
  LIMIT %s
  FOR UPDATE SKIP LOCKED
)
UPDATE bench_seed r
SET status = 'sending', locked_at = now(), attempts = r.attempts + 1, updated_at = now()
FROM claimed
WHERE r.id = claimed.id
RETURNING r.id, r.campaign_id, r.user_id, r.email, r.attempts
"""

SEED_SENT = "UPDATE bench_seed SET status = 'sent', sent_at = now(), locked_at = NULL, updated_at = now() WHERE id = %s"


def load_seed_table(conn, table: str, n: int) -> None:
    conn.execute(f"TRUNCATE {table} RESTART IDENTITY")
    conn.execute(f"INSERT INTO {table} (campaign_id, user_id, email)"
                 f" SELECT 1, g, 'user' || g || '@d' || (g % 50) || '.example' FROM generate_series(1, {int(n)}) g")
    conn.execute(f"VACUUM ANALYZE {table}")


def _seed_worker(url: str, ready, go) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        ready.wait()
        go.wait()
        while True:
            rows = conn.execute(SEED_CLAIM, (SEED_BATCH,)).fetchall()
            if not rows:
                return
            for row in rows:  # the seed's processRow: send (here: nothing), then markSent
                conn.execute(SEED_SENT, (row[0],))


def run_baseline(url: str, conn, n: int) -> float:
    load_seed_table(conn, "bench_seed", n)
    ready, go = mp.Barrier(WORKERS + 1), mp.Event()
    procs = [mp.Process(target=_seed_worker, args=(url, ready, go)) for _ in range(WORKERS)]
    for p in procs:
        p.start()
    ready.wait()
    t0 = time.time()
    go.set()
    for p in procs:
        p.join()
    sent, last = conn.execute("SELECT count(*), extract(epoch FROM max(sent_at)) FROM bench_seed"
                              " WHERE status = 'sent'").fetchone()
    assert sent == n, f"baseline sent {sent} of {n}"
    return n / (float(last) - t0)


def _pgbench(url: str, script: str, n: int) -> float:
    """4 pgbench clients running bench/<script> (each run handles SEED_BATCH
    rows) until n rows are done; returns rows per second."""
    per_client = n // SEED_BATCH // WORKERS
    out = subprocess.run([PGBENCH, "-n", "-f", str(ROOT / "bench" / script), "-c", str(WORKERS),
                          "-j", str(WORKERS), "-t", str(per_client), url],
                         capture_output=True, text=True, check=True)
    tps = float(re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out.stdout).group(1))
    return tps * SEED_BATCH


def run_limit(url: str, conn, n: int) -> float:
    load_seed_table(conn, "bench_limit", n)
    rate = _pgbench(url, "limit.pgbench", n)
    sent = conn.execute("SELECT count(*) FROM bench_limit WHERE status = 'sent'").fetchone()[0]
    assert sent == n, f"limit marked {sent} of {n} sent"
    return rate


def run_mailroom_sql(url: str, conn, n: int) -> float:
    """mailroom's SQL with no runner: pgbench clients calling claim_batch(50)
    and mark_outcomes on what they claimed (bench/mailroom_sql.pgbench)."""
    load_queued(conn, n, "sql")
    rate = _pgbench(url, "mailroom_sql.pgbench", n)
    sent = conn.execute("SELECT count(*) FROM mailroom.messages WHERE status = 'sent'").fetchone()[0]
    assert sent == n, f"mailroom SQL marked {sent} of {n} sent"
    return rate


def run_mailroom(url: str, conn, n: int, procs, tag: str) -> tuple[float, float]:
    """Drain n freshly loaded mails with the (idle) runners; returns (mails/s, CPU seconds per mail)."""
    for p in procs:
        p.proc.send_signal(signal.SIGSTOP)
    try:
        load_queued(conn, n, tag)
        conn.execute("NOTIFY mailroom, 'default'")
        cpu0 = sum(cpu_seconds(p.proc.pid) for p in procs)
    finally:
        t0 = time.time()
        for p in procs:
            p.proc.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + max(120, n / 200)
    while conn.execute("SELECT count(*) FROM mailroom.messages WHERE status IN ('queued', 'sending')"
                       ).fetchone()[0]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"drain of {n} did not finish in time")
        time.sleep(0.1)
    cpu = sum(cpu_seconds(p.proc.pid) for p in procs) - cpu0
    sent, last = conn.execute("SELECT count(*), extract(epoch FROM max(sent_at)) FROM mailroom.messages"
                              " WHERE status = 'sent'").fetchone()
    assert sent == n, f"mailroom sent {sent} of {n}"
    return n / (float(last) - t0), cpu / n


def main() -> int:
    quick = "--quick" in sys.argv
    n = 10_000 if quick else 100_000
    rounds = 2 if quick else 3
    sync_commit = "off" if "--synchronous-commit=off" in sys.argv else "on"
    results: dict[str, list[float]] = {"baseline": [], "limit": [], "sql": [], "null": [], "render": [], "smtp": []}
    cpu: dict[str, list[float]] = {"null": [], "render": [], "smtp": []}
    with scratch_database("mailroom_bench_drain") as url, psycopg.connect(url, autocommit=True) as conn:
        # Every connection of every side (workers, runners, pgbench) commits
        # as production does: PostgreSQL's default, whatever the cluster says.
        conn.execute(f"ALTER DATABASE mailroom_bench_drain SET synchronous_commit = {sync_commit}")
        conn.execute(f"SET synchronous_commit = {sync_commit}")
        conn.execute(SEED_TABLE.format(t="bench_seed"))
        conn.execute(SEED_TABLE.format(t="bench_limit"))
        with mailroom_runners(url, "null://", WORKERS, name="drain") as procs:
            for r in range(rounds):
                results["baseline"].append(run_baseline(url, conn, n))
                results["limit"].append(run_limit(url, conn, n))
                results["sql"].append(run_mailroom_sql(url, conn, n))
                rate, c = run_mailroom(url, conn, n, procs, f"null{r}")
                results["null"].append(rate)
                cpu["null"].append(c)
        with mailroom_runners(url, "null://?render=1", WORKERS, name="drain") as procs:
            rate, c = run_mailroom(url, conn, n, procs, "render")
            results["render"].append(rate)
            cpu["render"].append(c)
        with sink_process() as smtp, mailroom_runners(url, smtp, WORKERS, name="drain") as procs:
            rate, c = run_mailroom(url, conn, n, procs, "smtp")
            results["smtp"].append(rate)
            cpu["smtp"].append(c)

    best = {k: max(v) for k, v in results.items()}
    print(f"mailroom bench: drain {n:,} queued mails, 4 workers each side "
          f"(best of {rounds} alternating rounds for baseline / limit / SQL only / null; 1 round render, smtp);"
          f" synchronous_commit = {sync_commit}")
    print(f"{'side':60} {'mails/s':>9} {'rounds':>24} {'CPU µs/mail':>12}")
    labels = {
        "baseline": "baseline (seed design, 1 UPDATE per row)",
        "limit": "limit (pgbench: claim 50, mark 50)",
        "sql": "mailroom SQL only (pgbench: claim_batch 50, mark_outcomes)",
        "null": "mailroom run, null:// (no mail built)",
        "render": "mailroom run, null://?render=1 (built)",
        "smtp": "mailroom run, SMTP to mailroom sink",
    }
    for k, label in labels.items():
        rs = " ".join(f"{x:.0f}" for x in results[k])
        c = f"{statistics.median(cpu[k]) * 1e6:12.0f}" if k in cpu else f"{'':12}"
        print(f"{label:60} {best[k]:9.0f} {rs:>24} {c}")
    vs_base, vs_limit = best["null"] / best["baseline"], best["null"] / best["limit"]
    print(f"ratio null / baseline {vs_base:.2f}; null / limit {vs_limit:.2f}; SQL only / limit "
          f"{best['sql'] / best['limit']:.2f}; null / SQL only {best['null'] / best['sql']:.2f}; "
          f"render / null {best['render'] / best['null']:.2f}; smtp / null {best['smtp'] / best['null']:.2f}")
    print(f"target drain >= 5 x baseline: {vs_base:.2f} ({'ok' if vs_base >= 5 else 'MISSED'})")
    print(f"target drain >= 0.6 x limit: {vs_limit:.2f} ({'ok' if vs_limit >= 0.6 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
