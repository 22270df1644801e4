"""Beyond one database (issue 29): one runner fleet over several databases,
and the runner through PgBouncer in transaction mode, against the same
runners on one database directly, in one run on the same cluster.

- databases: 2 `mailroom run` processes (null://: the queue machinery, no
  mail built) drain 1 database of N mails, and the same 2 processes, each
  given all 4 databases (--dsn four times), drain 4 databases of N/4 each.
  The fleet's aggregate rate over the single database's: >= 0.9 (the box is
  CPU-bound with 2 cores, so this shows no overhead, not linear scale).
- pgbouncer: the same 2 runners drain 1 database of N/2 directly and through
  a PgBouncer 1.18 in pool_mode = transaction (--pooled, --listen-dsn for the
  wake-ups on a direct session): >= 0.8.
- pickup: one idle runner, mails enqueued one at a time 50 ms apart, commit
  to claim (attempts.claimed_at): directly (LISTEN), through PgBouncer with
  --listen-dsn (wake-ups on a direct session), and through PgBouncer without
  it (polling every --poll-interval, 1 s here): what the direct session buys.

Sides alternate (A B B A) and each ratio is the median over rounds. Runners
are stopped (SIGSTOP) while the rows are loaded and continued together; a
drain ends at the last finishing ledger row.

    .venv/bin/python bench/scale.py [--quick]
"""

from __future__ import annotations

import signal
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from _common import (bench_parser, live_count, load_queued, pct, scratch_database,  # noqa: E402
                     sent_stats, target)
from tests.pgbouncerkit import PgBouncer  # noqa: E402
from tests.runnerkit import RunnerProcess  # noqa: E402

RUNNERS = 2
POLL = "0.2"


def _start(dsn_args: list[str], n: int = RUNNERS, *extra: str) -> list[RunnerProcess]:
    """n runners, each given every --dsn of dsn_args; returned once each has logged its start and gone idle."""
    procs = [RunnerProcess(dsn_args[1], "null://", *dsn_args[2:], "--worker", f"scale-{i}",
                           "--log-level", "info", "--poll-interval", POLL, *extra) for i in range(n)]
    deadline = time.monotonic() + 60
    while not all("runner.start" in p.log() for p in procs):
        dead = [p for p in procs if p.proc.poll() is not None]
        if dead or time.monotonic() > deadline:
            raise RuntimeError("a runner did not start:\n" + (dead[0] if dead else procs[0]).log())
        time.sleep(0.05)
    time.sleep(1.0)  # past the first, empty claims
    return procs


def _stop(procs: list[RunnerProcess]) -> None:
    for p in procs:
        try:
            p.stop(timeout=60)
        finally:
            p.close()


def _drain(procs: list[RunnerProcess], urls: list[str], per_db: int, tag: str) -> float:
    """Mails per second of the runners draining per_db fresh mails in each database."""
    conns = [psycopg.connect(u, autocommit=True) for u in urls]
    try:
        for p in procs:
            p.proc.send_signal(signal.SIGSTOP)
        try:
            for c in conns:
                load_queued(c, per_db, tag)
        finally:
            t0 = time.time()
            for p in procs:
                p.proc.send_signal(signal.SIGCONT)
            for c in conns:
                c.execute("NOTIFY mailroom, 'default'")
        deadline = time.monotonic() + max(180, per_db * len(urls) / 100)
        while any(live_count(c) for c in conns):
            if time.monotonic() > deadline:
                raise RuntimeError(f"drain {tag} did not finish in time")
            time.sleep(0.1)
        lasts = []
        for c in conns:
            sent, last = sent_stats(c)
            assert sent == per_db, f"{tag}: sent {sent} of {per_db}"
            lasts.append(float(last))
        return per_db * len(urls) / (max(lasts) - t0)
    finally:
        for c in conns:
            c.close()


def _dsn_args(urls: list[str]) -> list[str]:
    return [a for u in urls for a in ("--dsn", u)]


def _pickup(url: str, dsn_args: list[str], n: int, *extra: str) -> list[float]:
    """ms from an enqueue's commit to its claim, one idle runner."""
    procs = _start(dsn_args, 1, *extra)
    committed = {}
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for i in range(n):
                key = f"pickup-{time.monotonic_ns()}-{i}"
                conn.execute("SELECT mailroom.enqueue(%s, 'Pickup', 'Body', p_delivery_key => %s)",
                             (f"u{i}@pickup.example", key))
                committed[key] = time.time()
                time.sleep(0.05)
            deadline = time.monotonic() + 30
            while live_count(conn) and time.monotonic() < deadline:
                time.sleep(0.05)
            claimed = dict(conn.execute(
                "SELECT c.delivery_key, extract(epoch FROM min(a.claimed_at))::float8"
                " FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id"
                " WHERE c.delivery_key = ANY(%s) GROUP BY c.delivery_key", (list(committed),)).fetchall())
    finally:
        _stop(procs)
    return [(claimed[k] - t) * 1000 for k, t in committed.items() if k in claimed]


def main() -> int:
    args = bench_parser(__doc__).parse_args()
    n = 20_000 if args.quick else 100_000
    rounds = 2
    pickups = 40 if args.quick else 100
    print(f"mailroom bench: scale, {RUNNERS} runner processes, null://, {n:,} mails a side, {rounds} rounds (A B B A)")
    with ExitStack() as stack:
        urls = [stack.enter_context(scratch_database(f"mailroom_bench_scale_{i}", synchronous_commit="on"))
                for i in range(4)]
        bouncer = stack.enter_context(PgBouncer(urls[0], pool_mode="transaction", pool_size=8))
        pooled = bouncer.url(psycopg.conninfo.conninfo_to_dict(urls[0])["dbname"])

        one, four = [], []
        for r in range(rounds):
            for side in (("one", "four") if r % 2 == 0 else ("four", "one")):
                if side == "one":
                    procs = _start(_dsn_args(urls[:1]))
                    try:
                        one.append(_drain(procs, urls[:1], n, f"one-{r}"))
                    finally:
                        _stop(procs)
                else:
                    procs = _start(_dsn_args(urls))
                    try:
                        four.append(_drain(procs, urls, n // 4, f"four-{r}"))
                    finally:
                        _stop(procs)
        direct, bounced = [], []
        for r in range(rounds):
            for side in (("direct", "bounced") if r % 2 == 0 else ("bounced", "direct")):
                if side == "direct":
                    procs = _start(["--dsn", urls[0]])
                    target_list = direct
                else:
                    procs = _start(["--dsn", pooled], RUNNERS, "--pooled", "--listen-dsn", urls[0])
                    target_list = bounced
                try:
                    target_list.append(_drain(procs, urls[:1], n // 2, f"{side}-{r}"))
                finally:
                    _stop(procs)
        pick = {
            "direct (LISTEN)": _pickup(urls[0], ["--dsn", urls[0]], pickups),
            "PgBouncer + --listen-dsn": _pickup(urls[0], ["--dsn", pooled], pickups, "--pooled", "--listen-dsn",
                                                 urls[0]),
            "PgBouncer, polling (1 s)": _pickup(urls[0], ["--dsn", pooled], pickups, "--pooled",
                                                "--poll-interval", "1"),
        }

    ratio_db = statistics.median(f / o for o, f in zip(one, four))
    ratio_pg = statistics.median(b / d for d, b in zip(direct, bounced))
    print(f"{'side':52} mails/s by round")
    for label, rates in ((f"1 database x {n:,}", one), (f"4 databases x {n // 4:,} (one fleet)", four),
                         (f"1 database x {n // 2:,}, direct", direct),
                         (f"1 database x {n // 2:,}, PgBouncer transaction mode", bounced)):
        print(f"{label:52} {' '.join(f'{x:8.0f}' for x in rates)}")
    print(f"{'pickup, commit -> claim':34} {'p50 ms':>8} {'p99 ms':>8} {'mails':>6}")
    for label, v in pick.items():
        print(f"{label:34} {statistics.median(v):8.1f} {pct(v, 99):8.1f} {len(v):6}")
    target("4 databases x N/4 / 1 database x N, aggregate drain >= 0.9", f"{ratio_db:.2f}", ratio_db >= 0.9)
    target("drain through PgBouncer transaction mode / direct >= 0.8", f"{ratio_pg:.2f}", ratio_pg >= 0.8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
