"""Drain: how fast 4 `mailroom run` processes empty a queue, next to the seed
article's design (baseline) and the least a batched SKIP LOCKED queue can do
(limit), measured in the same run on the same cluster; with the WAL each
side writes per mail (issue 13, "What it must show": figures 1 to 4 and the
ledger foreign-key question).

- baseline: 4 Python processes, one connection each, the seed article's worker:
  claim 50 with FOR UPDATE SKIP LOCKED (one UPDATE ... RETURNING), then one
  `UPDATE ... SET status = 'sent'` per row; on its own plain table
  (bench_seed, the seed's columns and partial pending index).
- limit: pgbench, 4 clients, bench/limit.pgbench: one UPDATE ... FROM (SELECT
  ... FOR UPDATE SKIP LOCKED LIMIT 50) RETURNING claiming 50 rows, one UPDATE
  ... WHERE id = ANY marking the 50 sent, on a narrow table of its own
  (bench_limit, the seed's shape: no content, one partial index). The
  reference every ratio ("x limit") is taken against.
- where the gap to the limit goes, pgbench, 4 clients, 50 per claim, on the
  v0.4 tables: the limit's claim on mailroom.queue and the v0.4 report
  (DELETE the queue rows + INSERT the finishing ledger rows) with none of
  mailroom's functions (queue_raw.pgbench); then mailroom's functions
  claim_batch and mark_outcomes, all sent (mailroom_sql.pgbench: the gate,
  leases, input checks, duplicate and late-report handling): what a database
  serving runners on other hosts sees. The same again with a foreign key
  attempts.message_id -> contents(id) added to this scratch database for that
  side only: what the FK v0.4 dropped would cost.
- the same two in one pgbench run (interleaved): each client draws the
  script of every batch at random, limit's or mailroom's (-f limit@1 -f
  mailroom_sql@1), so both meet the same moment of the shared machine; the
  ratio is of their mean batch latencies. This is the SQL-alone target's
  figure: the ratio of separate runs (above, median of rounds) moved 0.54 to
  0.88 between rounds of identical code on this machine, the interleaved one
  0.77 to 0.78 (bench/RESULTS.md, session 9).
- mailroom: 4 `mailroom run` processes with their default concurrency and
  batch, `null://` (accepts without building the mail: the queue machinery);
  then `null://?render=1` (the mail is built and discarded: what rendering
  adds), then SMTP to `mailroom sink` on loopback (30,000 mails: the sink, one
  Python process, bounds the rate), with the runners' CPU time per mail
  (user + system of the 4 processes over the drain).

WAL per mail: pg_current_wal_lsn() after the side minus before, divided by
the mails drained (the whole cluster: autovacuum working meanwhile counts
too). Each side's rows are loaded right after a CHECKPOINT, so the pages it
drains already carry their full-page images and the figure is the side's own
records; a checkpoint in production adds one image per page touched first
after it. Records and full-page images per mail (pg_stat_wal) are printed
for the pgbench sides (its counters are exact once the clients exit).

Every side drains freshly loaded rows; baseline, limit and the others take
turns, and ratios are taken within each round (median over rounds). In a
round the pgbench sides run in a palindrome around the runners' null://
drain (limit, queue, sql, sql+FK, null://, sql+FK, sql, queue, limit; the
next round in another order), each pgbench side's figure being the mean of
its two runs, so drift in the shared machine's load hits every side alike; the FK's cost is the median over the back-to-back
sql / sql+FK pairs. Runners
start, go idle, are stopped (SIGSTOP) while the rows are loaded and continued
(SIGCONT): the clock starts warm, as for the baseline processes. The drain
ends at the last finish (sent_at, or the finishing ledger row's finished_at).

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
from _common import (PGBENCH, PGBENCH_BATCH, PGBENCH_CLIENTS, ROOT, cpu_seconds, live_count, load_queued,  # noqa: E402
                     mailroom_runners, pgbench_rate as _pgbench, scratch_database, sent_stats, sink_process,
                     target, wal_mark, wal_since)

WORKERS, SEED_BATCH = PGBENCH_CLIENTS, PGBENCH_BATCH
# Runners wake on NOTIFY only: an idle runner then makes no database call at
# all, so none can be frozen (SIGSTOP) holding a lock the next load needs.
IDLE = ("--poll-interval", "3600")

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
    conn.execute("CHECKPOINT")  # as load_queued: WAL measured after it is the drain's own
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


def run_baseline(url: str, conn, n: int) -> tuple[float, tuple]:
    load_seed_table(conn, "bench_seed", n)
    ready, go = mp.Barrier(WORKERS + 1), mp.Event()
    procs = [mp.Process(target=_seed_worker, args=(url, ready, go)) for _ in range(WORKERS)]
    for p in procs:
        p.start()
    ready.wait()
    mark = wal_mark(conn)
    t0 = time.time()
    go.set()
    for p in procs:
        p.join()
    wal = wal_since(conn, mark, n)
    sent, last = conn.execute("SELECT count(*), extract(epoch FROM max(sent_at)) FROM bench_seed"
                              " WHERE status = 'sent'").fetchone()
    assert sent == n, f"baseline sent {sent} of {n}"
    return n / (float(last) - t0), wal


def run_limit(url: str, conn, n: int) -> tuple[float, tuple]:
    load_seed_table(conn, "bench_limit", n)
    mark = wal_mark(conn)
    rate = _pgbench(url, "limit.pgbench", n)
    wal = wal_since(conn, mark, n)
    sent = conn.execute("SELECT count(*) FROM bench_limit WHERE status = 'sent'").fetchone()[0]
    assert sent == n, f"limit marked {sent} of {n} sent"
    return rate, wal


# The foreign key v0.3 had on the ledger (attempts.message_id -> messages),
# pointed at what a ledger row now belongs to; added for one side only.
LEDGER_FK = "bench_attempts_message_id_fkey"


def run_queue_script(script: str, fk: bool = False):
    def run(url: str, conn, n: int) -> tuple[float, tuple]:
        load_queued(conn, n, script.split(".")[0] + ("-fk" if fk else ""))
        if fk:
            conn.execute(f"ALTER TABLE mailroom.attempts ADD CONSTRAINT {LEDGER_FK}"
                         " FOREIGN KEY (message_id) REFERENCES mailroom.contents (id)")
        try:
            mark = wal_mark(conn)
            rate = _pgbench(url, script, n)
            wal = wal_since(conn, mark, n)
        finally:
            if fk:
                conn.execute(f"ALTER TABLE mailroom.attempts DROP CONSTRAINT {LEDGER_FK}")
        sent = sent_stats(conn)[0]
        assert sent == n, f"{script}{' with the FK' if fk else ''} finished {sent} of {n} as sent"
        return rate, wal
    return run


def run_interleaved(url: str, conn, n: int) -> float:
    """The limit's and mailroom's SQL in one pgbench run, 4 clients, each
    batch's script drawn at random; returns the limit's mean batch latency /
    mailroom's (their throughput ratio under the same load). n of each are
    loaded and about n / 2 of each drained, so neither runs dry."""
    load_seed_table(conn, "bench_limit", n)
    load_queued(conn, n, "interleaved")
    out = subprocess.run([PGBENCH, "-n", "-c", str(WORKERS), "-j", str(WORKERS), "-t", str(n // SEED_BATCH // WORKERS),
                          "-f", str(ROOT / "bench" / "limit.pgbench") + "@1",
                          "-f", str(ROOT / "bench" / "mailroom_sql.pgbench") + "@1", url],
                         capture_output=True, text=True)
    latency = {}
    for block in out.stdout.split("SQL script ")[1:]:
        name = Path(block.split(":", 1)[1].split("\n")[0].strip()).name
        m = re.search(r"latency average = ([0-9.]+) ms", block)
        if m:
            latency[name] = float(m.group(1))
    if out.returncode != 0 or set(latency) != {"limit.pgbench", "mailroom_sql.pgbench"}:
        raise RuntimeError(f"interleaved pgbench failed:\n{out.stdout}\n{out.stderr}")
    return latency["limit.pgbench"] / latency["mailroom_sql.pgbench"]


def run_mailroom(url: str, conn, n: int, procs, tag: str) -> tuple[float, float, float]:
    """Drain n freshly loaded mails with the (idle) runners; returns (mails/s,
    CPU seconds per mail, WAL bytes per mail)."""
    for p in procs:
        p.proc.send_signal(signal.SIGSTOP)
    try:
        load_queued(conn, n, tag)
        mark = wal_mark(conn)
        conn.execute("NOTIFY mailroom, 'default'")
        cpu0 = sum(cpu_seconds(p.proc.pid) for p in procs)
    finally:
        t0 = time.time()
        for p in procs:
            p.proc.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + max(120, n / 200)
    while live_count(conn):
        if time.monotonic() > deadline:
            raise RuntimeError(f"drain of {n} did not finish in time")
        time.sleep(0.1)
    cpu = sum(cpu_seconds(p.proc.pid) for p in procs) - cpu0
    wal = wal_since(conn, mark, n)[0]
    sent, last = sent_stats(conn)
    assert sent == n, f"mailroom sent {sent} of {n}"
    return n / (float(last) - t0), cpu / n, wal


SIDES = {
    "baseline": "baseline (seed design, 1 UPDATE per row)",
    "limit": "limit (pgbench: claim 50, mark 50; own table)",
    "queue": "  limit's SQL on queue + v0.4 finish (pgbench)",
    "sql": "  claim_batch(50) + mark_outcomes (pgbench)",
    "sql_fk": "  ... + FK attempts -> contents (pgbench)",
    "null": "mailroom run, null:// (no mail built)",
    "render": "mailroom run, null://?render=1 (built, discarded)",
    "smtp": "mailroom run, SMTP to mailroom sink",
}
ROUNDED = ("baseline", "limit", "queue", "sql", "sql_fk", "null")  # measured every round


def median_ratio(results: dict, a: str, b: str) -> float:
    return statistics.median(x / y for x, y in zip(results[a], results[b]))


def main() -> int:
    quick = "--quick" in sys.argv
    n = 10_000 if quick else 100_000
    n_smtp = 3_000 if quick else 30_000  # bounded by the sink (one Python process): fewer rows suffice
    rounds = 1 if quick else 2
    sync_commit = "off" if "--synchronous-commit=off" in sys.argv else "on"
    results: dict[str, list[float]] = {k: [] for k in SIDES}
    wal: dict[str, list[tuple]] = {k: [] for k in SIDES}
    cpu: dict[str, list[float]] = {"null": [], "render": [], "smtp": []}
    fk_pairs: list[tuple[float, float]] = []  # (without, with) the ledger FK, measured back to back
    interleaved: list[float] = []  # limit / mailroom's SQL, both in one pgbench run
    pgbench_sides = {"limit": run_limit, "queue": run_queue_script("queue_raw.pgbench"),
                     "sql": run_queue_script("mailroom_sql.pgbench"),
                     "sql_fk": run_queue_script("mailroom_sql.pgbench", fk=True)}
    # Every connection of every side (workers, runners, pgbench) commits
    # as production does: PostgreSQL's default, whatever the cluster says.
    with scratch_database("mailroom_bench_drain", synchronous_commit=sync_commit) as url, \
            psycopg.connect(url, autocommit=True) as conn:
        fks = conn.execute("SELECT string_agg(conname, ', ') FROM pg_constraint"
                           " WHERE conrelid = 'mailroom.attempts'::regclass AND contype = 'f'").fetchone()[0]
        if fks:
            print(f"note: the deployed ledger has foreign keys ({fks}): the FK side adds one more")
        conn.execute(SEED_TABLE.format(t="bench_seed"))
        conn.execute(SEED_TABLE.format(t="bench_limit"))
        with mailroom_runners(url, "null://", WORKERS, *IDLE, name="drain") as procs:
            for r in range(rounds):
                rate, w = run_baseline(url, conn, n)
                results["baseline"].append(rate)
                wal["baseline"].append(w)
                # The pgbench sides in a palindrome (each twice, mirrored in time:
                # drift of the shared machine's load hits every side alike);
                # each side's figure in a round is the mean of its two runs.
                keys = list(pgbench_sides) if r % 2 == 0 else ["limit", "sql_fk", "sql", "queue"]
                # The runners' drain sits at the palindrome's centre.
                runs: dict[str, list] = {k: [] for k in keys}
                for key in keys + ["null"] + keys[::-1]:
                    if key == "null":
                        rate, c, w = run_mailroom(url, conn, n, procs, f"null{r}")
                        results["null"].append(rate)
                        cpu["null"].append(c)
                        wal["null"].append((w,))
                    else:
                        runs[key].append(pgbench_sides[key](url, conn, n))
                for key, got in runs.items():
                    results[key].append(statistics.fmean(rate for rate, _ in got))
                    wal[key].append(tuple(statistics.fmean(x) for x in zip(*(w for _, w in got))))
                # sql and sql_fk run back to back (twice): the FK's cost, pair by pair.
                fk_pairs.extend((a[0], b[0]) for a, b in zip(runs["sql"], runs["sql_fk"]))
                interleaved.append(run_interleaved(url, conn, n))
        with mailroom_runners(url, "null://?render=1", WORKERS, *IDLE, name="drain") as procs:
            rate, c, w = run_mailroom(url, conn, n, procs, "render")
            results["render"].append(rate)
            cpu["render"].append(c)
            wal["render"].append((w,))
        with sink_process() as smtp, mailroom_runners(url, smtp, WORKERS, *IDLE, name="drain") as procs:
            rate, c, w = run_mailroom(url, conn, n_smtp, procs, "smtp")
            results["smtp"].append(rate)
            cpu["smtp"].append(c)
            wal["smtp"].append((w,))

    print(f"mailroom bench: drain {n:,} queued mails ({n_smtp:,} over SMTP), 4 workers or clients each side, "
          f"synchronous_commit = {sync_commit}; baseline, limit, the pgbench breakdown and null:// in "
          f"{rounds} alternating round(s), render and SMTP once")
    print(f"{'side':50} {'mails/s':>8} {'x limit':>7} {'rounds':>13} {'WAL B/mail':>10} {'rec/mail':>8}"
          f" {'FPI/mail':>8} {'CPU µs/mail':>11}")

    def wal_median(k: str, i: int) -> float:
        return statistics.median(w[i] for w in wal[k])

    for k, label in SIDES.items():
        best = max(results[k])
        rs = " ".join(f"{x:.0f}" for x in results[k])
        ratio = median_ratio(results, k, "limit") if k in ROUNDED else best / max(results["limit"])
        records = f"{wal_median(k, 1):8.2f} {wal_median(k, 2):8.3f}" if len(wal[k][0]) > 1 else f"{'':8} {'':8}"
        c = f"{statistics.median(cpu[k]) * 1e6:11.0f}" if k in cpu else f"{'':11}"
        print(f"{label:50} {best:8.0f} {ratio:7.2f} {rs:>13} {wal_median(k, 0):10.0f} {records} {c}")
    x = {k: median_ratio(results, k, "limit") for k in ("queue", "sql", "sql_fk", "null")}
    w = {k: wal_median(k, 0) for k in SIDES}
    print(f"runner CPU: null:// {statistics.median(cpu['null']) * 1e6:.0f} µs/mail, building the mail adds "
          f"{(statistics.median(cpu['render']) - statistics.median(cpu['null'])) * 1e6:.0f}, SMTP another "
          f"{(statistics.median(cpu['smtp']) - statistics.median(cpu['render'])) * 1e6:.0f}")
    print(f"note: with no runner at all, the limit's claim on mailroom.queue with the v0.4 finish (delete + "
          f"ledger row) reaches {x['queue']:.2f} x limit; mailroom's claim_batch + mark_outcomes {x['sql']:.2f}; "
          f"4 runners with null:// on the same 2 cores {x['null']:.2f} (the runners' own CPU, "
          f"{statistics.median(cpu['null']) * 1e6:.0f} µs/mail, shares the cores with PostgreSQL; null:// claims "
          f"100 at a time, pgbench 50).")
    fk = statistics.median(b / a for a, b in fk_pairs)
    print(f"figure ledger FK: claim_batch + mark_outcomes with a FK attempts.message_id -> contents(id) / without: "
          f"{fk:.2f} x the mails/s (median of {len(fk_pairs)} back-to-back pairs: "
          f"{' '.join(f'{b / a:.2f}' for a, b in fk_pairs)}; WAL {w['sql_fk']:.0f} vs {w['sql']:.0f} B/mail)")
    print(f"figure WAL per mail, raw limit (claim + mark): {w['limit']:.0f} B "
          f"({wal_median('limit', 1):.2f} records); queue_raw: {w['queue']:.0f} B; whole drain, 4 runners null://: "
          f"{w['null']:.0f} B")
    inter = statistics.median(interleaved)
    print(f"figure SQL alone interleaved with the limit in one pgbench run (limit's batch latency / mailroom's): "
          f"{' '.join(f'{v:.3f}' for v in interleaved)} by round; separate runs, median of rounds: {x['sql']:.2f}")
    target(f"mailroom's SQL alone (claim_batch + mark_outcomes, pgbench, 4 clients, 50 a batch) >= 0.75 x limit "
           f"(interleaved in one run)", f"{inter:.2f} (separate runs {x['sql']:.2f})", inter >= 0.75)
    target(f"drain of {n:,} by 4 `mailroom run` null:// on the same machine >= 0.5 x limit",
           f"{x['null']:.2f}", x["null"] >= 0.5)
    target("WAL per mail, claim_batch + mark_outcomes <= 1,200 bytes",
           f"{w['sql']:.0f} B ({wal_median('sql', 1):.2f} records, {wal_median('sql', 2):.3f} FPI; "
           f"raw limit {w['limit']:.0f} B = {w['sql'] / w['limit']:.2f} x)", w["sql"] <= 1200)
    vs_base = median_ratio(results, "null", "baseline")
    target("drain >= 5 x baseline (v0.3's own bound)", f"{vs_base:.2f}", vs_base >= 5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
