"""Retention under load (issue 13, "history that retires cheaply"): claim
latency of runners claiming and reporting, without and while prune retires
1,000,000 old finished mails, and prune's rate.

One scratch database: --history finished mails that finished 40 days ago
(contents + finishing ledger row each, 2 % with an earlier retry row), a tenth
as many finished yesterday (kept: inside attempts_retention), and a queue of
due mail, written with INSERT ... SELECT as the owner, then VACUUM ANALYZE.
Then four sides of the same load, --workers connections each looping
claim_batch(50) -> mark_outcomes(all sent):
  baseline   load alone;
  paced      while one more connection retires 5,000 old mails a second
             (prune('30 days', 5000), one batch a call): retention in
             steady state, about as fast as the runners finish mail;
  catch-up   while it calls prune('30 days') back to back (the pg_cron job's
             call, default batches) until nothing old is left;
  cpu hog    control: one more connection that only burns CPU
             (generate_series), to tell prune's own harm from that of any
             busy backend on the same cores.
The claim slows down as the load drains the queue, so the sides compared
alternate: baseline and paced in --seconds/4 slices, ABBA twice (--seconds
of each); the cpu hog for --seconds/2 before the catch-up and again after.
Claim latency is each claim_batch call's round trip. Where claim_batch and
mark_outcomes are not yet the v0.4 functions (a branch before core-hot is
merged), the load runs their statements instead - the claim's UPDATE ...
FOR UPDATE SKIP LOCKED on mailroom.queue and the report's DELETE from the
queue + INSERT of finishing ledger rows - and the output says so.
--quick: 100,000 mails of history, --seconds 8.

Targets: claim p50 and p99 while paced <= 1.5 x baseline; during the
catch-up <= 1.5 x during the CPU hog; every old mail retired, none of
yesterday's.
    .venv/bin/python bench/prune_under_load.py [--quick] [--history N]
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_parser, scratch_database, target  # noqa: E402

BATCH = 50
PACED_BATCH = 5000

# The v0.4 hot path's statements, for a branch whose claim_batch and
# mark_outcomes still work on v0.3's table.
RAW_CLAIM = """
    UPDATE mailroom.queue q
    SET status = 'sending', attempts = q.attempts + 1, lease_token = gen_random_uuid(),
        leased_until = now() + interval '5 minutes', worker = %(worker)s, claimed_at = now(), updated_at = now()
    FROM (SELECT id FROM mailroom.queue WHERE status = 'queued' AND run_at <= now()
          ORDER BY priority DESC, run_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED) d
    WHERE q.id = d.id
    RETURNING q.id, q.lease_token
"""
RAW_REPORT = """
    WITH done AS (
      DELETE FROM mailroom.queue q USING unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) r(id, token)
      WHERE q.id = r.id AND q.lease_token = r.token
      RETURNING q.id, q.attempts, q.worker, q.lease_token, q.claimed_at
    )
    INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at, reported_at,
                                   reported, outcome, smtp_code, finished_as)
    SELECT id, attempts, worker, lease_token, claimed_at, now(), now(), 'sent', 'sent', 250, 'sent' FROM done
"""


def fill(conn: psycopg.Connection, history: int, queued: int) -> None:
    # Old history: finished 40 days ago, spread over a day; 2 % retried once first.
    conn.execute(
        """
        INSERT INTO mailroom.contents (id, delivery_key, sender, to_address, subject, body_text, created_at)
        SELECT g, 'h-' || g, 'default', 'u' || g || '@d' || (g %% 500) || '.example', 'Hello', 'Body',
               now() - interval '41 days' + (g::float8 / %(n)s) * interval '1 day'
        FROM generate_series(1, %(n)s) g
        """, {"n": history})
    conn.execute(
        """
        INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at, reported_at,
                                       reported, outcome, smtp_code, finished_as)
        SELECT c.id, 1, 'bench', gen_random_uuid(), c.created_at, c.created_at + interval '2 seconds',
               c.created_at + interval '2 seconds', 'sent', 'sent', 250, 'sent'
        FROM mailroom.contents c
        """)
    conn.execute(
        """
        INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at, reported_at,
                                       reported, outcome, smtp_code, finish_key)
        SELECT c.id, 1, 'bench', gen_random_uuid(), c.created_at - interval '1 minute', c.created_at - interval '59 seconds',
               c.created_at - interval '59 seconds', 'retry', 'retry', 451, nextval('mailroom.attempts_id_seq')
        FROM mailroom.contents c WHERE c.id % 50 = 0
        """)
    # Recent history, to keep: finished yesterday.
    conn.execute(
        """
        WITH c AS (
          INSERT INTO mailroom.contents (id, delivery_key, sender, to_address, subject, body_text, created_at)
          SELECT %(n)s + g, 'r-' || g, 'default', 'r' || g || '@d' || (g %% 500) || '.example', 'Hello', 'Body',
                 now() - interval '1 day'
          FROM generate_series(1, %(r)s) g
          RETURNING id, created_at
        )
        INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at, reported_at,
                                       reported, outcome, smtp_code, finished_as)
        SELECT id, 1, 'bench', gen_random_uuid(), created_at, created_at, created_at, 'sent', 'sent', 250, 'sent' FROM c
        """, {"n": history, "r": history // 10})
    # The live queue the runners drain.
    conn.execute(
        """
        WITH c AS (
          INSERT INTO mailroom.contents (id, delivery_key, sender, to_address, subject, body_text, created_at)
          SELECT %(n)s + g, 'q-' || g, 'default', 'q' || g || '@d' || (g %% 50) || '.example', 'Hi', 'Body',
                 now() - interval '1 minute'
          FROM generate_series(%(r)s + 1, %(r)s + %(q)s) g
          RETURNING id, created_at
        )
        INSERT INTO mailroom.queue (id, run_at, sender, max_attempts, on_ambiguous, updated_at)
        SELECT id, created_at, 'default', 5, 'retry', created_at FROM c
        """, {"n": history, "r": history // 10, "q": queued})
    conn.execute("SELECT setval('mailroom.message_ids', (SELECT max(id) FROM mailroom.contents))")
    for table in ("contents", "queue", "attempts"):
        conn.execute(f"VACUUM ANALYZE mailroom.{table}")


class Load:
    """--workers connections claiming and reporting until stopped; claim latencies in ms."""

    def __init__(self, url: str, workers: int, raw: bool) -> None:
        self.url, self.workers, self.raw = url, workers, raw
        self.latencies: list[float] = []
        self.mails = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.errors: list[str] = []

    def _worker(self, n: int) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as c:
                while not self.stop.is_set():
                    t0 = time.perf_counter()
                    if self.raw:
                        rows = c.execute(RAW_CLAIM, {"worker": f"w{n}", "n": BATCH}).fetchall()
                    else:
                        rows = c.execute("SELECT id, lease_token FROM mailroom.claim_batch(%s, %s, '5 minutes')",
                                         (f"w{n}", BATCH)).fetchall()
                    ms = (time.perf_counter() - t0) * 1000
                    if not rows:
                        self.errors.append("the queue ran dry: raise the queued mail")
                        return
                    if self.raw:
                        c.execute(RAW_REPORT, {"ids": [r[0] for r in rows], "tokens": [r[1] for r in rows]})
                    else:
                        c.execute("SELECT mailroom.mark_outcomes(%s::jsonb)",
                                  (json.dumps([{"id": r[0], "token": str(r[1]), "outcome": "sent", "smtp_code": 250}
                                               for r in rows]),))
                    with self.lock:
                        self.latencies.append(ms)
                        self.mails += len(rows)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            self.errors.append(f"worker {n}: {e}")

    def run(self, until) -> tuple[list[float], int, float]:
        """Run the load until until() returns; (latencies, mails, seconds)."""
        self.latencies, self.mails = [], 0
        self.stop.clear()
        threads = [threading.Thread(target=self._worker, args=(i,), daemon=True) for i in range(self.workers)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        until()
        self.stop.set()
        for t in threads:
            t.join()
        if self.errors:
            raise RuntimeError("; ".join(self.errors))
        return list(self.latencies), self.mails, time.perf_counter() - t0


def hot_path_is_v04(url: str) -> bool:
    """Whether claim_batch and mark_outcomes work on the v0.4 tables here."""
    with psycopg.connect(url) as c:
        try:
            c.execute("SELECT mailroom.enqueue('probe@example.com', 'probe', 'probe', p_delivery_key => 'probe')")
            rows = c.execute("SELECT id, lease_token FROM mailroom.claim_batch('probe', 1, '1 minute')").fetchall()
            c.execute("SELECT mailroom.mark_outcomes(%s::jsonb)",
                      (json.dumps([{"id": r[0], "token": str(r[1]), "outcome": "sent"} for r in rows]),))
            # The claim may hand out any due mail (the filled queue's come first), so the
            # ledger is asked about the mail claimed, not the probe.
            ok = len(rows) == 1 and c.execute(
                "SELECT count(*) FROM mailroom.attempts WHERE message_id = %s AND finished_as = 'sent'",
                (rows[0][0],)).fetchone()[0] == 1
        except psycopg.Error:
            ok = False
        c.rollback()
    return ok


def pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100)[q - 1] if len(xs) >= 2 else (xs[0] if xs else float("nan"))


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--history", type=int, default=None, help="old finished mails to retire")
    parser.add_argument("--workers", type=int, default=2, help="claiming connections")
    parser.add_argument("--seconds", type=float, default=None, help="seconds of load for each of baseline and paced")
    args = parser.parse_args()
    history = args.history or (100_000 if args.quick else 1_000_000)
    # Slices of whole seconds: a paced slice calls prune once a second.
    seconds = args.seconds or (8.0 if args.quick else 20.0)
    # Enough for every slice at the embedded cluster's speed (synchronous_commit = off:
    # two connections finish 10,000-40,000 mails a second) over about 3.5 x --seconds.
    queued = 1_000_000 if args.quick else 3_000_000

    print(f"mailroom bench: {args.workers} connections claiming {BATCH} and reporting them sent,"
          f" without and while prune retires {history:,} old finished mails")
    with scratch_database("mailroom_bench_prune_under_load") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            t = time.perf_counter()
            fill(conn, history, queued)
            sizes = conn.execute(
                "SELECT pg_size_pretty(pg_total_relation_size('mailroom.contents')),"
                "       pg_size_pretty(pg_total_relation_size('mailroom.attempts'))").fetchone()
            print(f"filled in {time.perf_counter() - t:.0f} s: {history:,} old + {history // 10:,} recent finished mails,"
                  f" {queued:,} queued; contents {sizes[0]}, attempts {sizes[1]} (tables + indexes)")
            raw = not hot_path_is_v04(url)
            if raw:
                print("claim_batch/mark_outcomes are not the v0.4 ones on this branch: the load runs their"
                      " statements on mailroom.queue and the ledger instead")

            load = Load(url, args.workers, raw)
            calls: list[tuple[float, int]] = []

            def prune_calls(p: psycopg.Connection, pace: float | None, until: float | None) -> None:
                """prune('30 days') again and again: every `pace` seconds (one batch a call) until
                `until`, or back to back (default batches) until it says there is no more."""
                while until is None or time.perf_counter() < until:
                    t0 = time.perf_counter()
                    if pace:
                        row = p.execute("SELECT * FROM mailroom.prune('30 days', %s)", (PACED_BATCH,)).fetchone()
                    else:
                        row = p.execute("SELECT * FROM mailroom.prune('30 days')").fetchone()
                    calls.append((time.perf_counter() - t0, row[0]))
                    if not row[3] and not pace:
                        return
                    if pace:
                        time.sleep(max(0.0, pace - (time.perf_counter() - t0)))

            # The claim slows as the runners drain the queue (the dead entries they leave at the
            # head of the claim index until autovacuum: bench/bloat.py), whether or not anything
            # prunes: run one after the other, a paced phase 20 s after the baseline measured
            # 2.9 x its p50 with no prune call in it at all. So each comparison alternates its
            # sides in the order ABBA, which cancels a steady drift.
            sides: dict[str, list] = {}  # side -> [latencies, mails, seconds], its slices pooled

            def measured(slices: list[tuple[str, Callable[[], None]]]) -> None:
                for side, until in slices:
                    xs, mails, secs = load.run(until)
                    pooled = sides.setdefault(side, [[], 0, 0.0])
                    pooled[0] += xs
                    pooled[1] += mails
                    pooled[2] += secs

            slice_s = seconds / 4

            # Steady state: retire about as fast as the runners finish mail
            # (one batch of PACED_BATCH a second), as the hourly job does over time.
            conn.execute("SELECT mailroom.set_setting('prune_max_batches', '1')")
            with psycopg.connect(url, autocommit=True) as p:
                def alone() -> None:
                    time.sleep(slice_s)

                def paced() -> None:
                    prune_calls(p, 1.0, time.perf_counter() + slice_s)

                measured([("baseline", alone), ("paced", paced), ("paced", paced), ("baseline", alone)] * 2)
            paced_retired = sum(m for _, m in calls)
            conn.execute("SELECT mailroom.set_setting('prune_max_batches', '20')")

            # Catching up: back to back with the default batches until nothing is left,
            # between two controls: one more backend burning CPU and nothing else.
            hog_s = seconds / 2

            def burn() -> None:
                with psycopg.connect(url, autocommit=True) as b:
                    end_at = time.perf_counter() + hog_s
                    while time.perf_counter() < end_at:
                        b.execute("SELECT count(*) FROM generate_series(1, 2000000)")

            calls.clear()
            prune_s = 0.0

            def catch_up() -> None:
                nonlocal prune_s
                t0 = time.perf_counter()
                with psycopg.connect(url, autocommit=True) as p:
                    prune_calls(p, None, None)
                prune_s = time.perf_counter() - t0

            measured([("cpu hog", burn), ("catch-up", catch_up), ("cpu hog", burn)])
            retired = sum(m for _, m in calls)
            longest = max(s for s, _ in calls)
            ncalls = len(calls)
            phases = [(side, xs, mails, secs) for side, (xs, mails, secs) in sides.items()]
            base, paced_xs = sides["baseline"][0], sides["paced"][0]
            during, hog = sides["catch-up"][0], sides["cpu hog"][0]

            left = conn.execute(
                "SELECT count(*) FILTER (WHERE delivery_key LIKE 'h-%'), count(*) FILTER (WHERE delivery_key LIKE 'r-%')"
                " FROM mailroom.contents").fetchone()
            problems = conn.execute("SELECT count(*) FROM mailroom.integrity_problems()").fetchone()[0]

        print(f"{'phase':>14} {'claims':>7} {'mails/s':>8} {'p50 ms':>7} {'p99 ms':>7}")
        for label, xs, mails, secs in phases:
            print(f"{label:>14} {len(xs):7} {mails / secs:8.0f} {pct(xs, 50):7.2f} {pct(xs, 99):7.2f}")
        print(f"prune, paced: {paced_retired:,} mails in {seconds:.0f} s;"
              f" catching up: {retired:,} mails in {prune_s:.1f} s ({retired / prune_s:,.0f} mails/s), {ncalls} calls,"
              f" longest call {longest:.2f} s; left: {left[0]:,} old, {left[1]:,} recent; integrity problems: {problems}")
        print(f"(phases alternate: baseline and paced in {slice_s:.0f} s slices, ABBA twice; the cpu hog, one backend"
              f" running generate_series - what any busy backend costs the claimers on this machine - {hog_s:.0f} s"
              " before and after the catch-up)")
        for q in (50, 99):
            r = pct(paced_xs, q) / pct(base, q)
            target(f"claim p{q} while prune retires {PACED_BATCH}/s / without <= 1.5", f"{r:.2f}", r <= 1.5)
        for q in (50, 99):
            r = pct(during, q) / pct(hog, q)
            target(f"claim p{q} during a catch-up prune / during a CPU hog <= 1.5", f"{r:.2f}", r <= 1.5)
        target(f"prune retires all {history:,} old mails and none of the recent",
               f"{retired + paced_retired:,} retired, {left[0]:,} old and {left[1]:,} of {history // 10:,} recent left",
               left[0] == 0 and left[1] == history // 10 and problems == 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
