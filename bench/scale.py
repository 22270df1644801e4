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

- fleet limit (bench/scale.py --fleet runs only this and the next): the 4
  databases under a PL/Proxy directory (tests/fleetkit.py), mail to one
  domain on every shard in uneven amounts, a fleet limit of 200/s on it
  (mailroom_fleet.set_domain_limit), 2 runners draining all 4 and the
  rebalance run every 5 s (the pg_cron job runs it every minute: this
  drives more share changes through a drain); the busiest second of claims
  (attempts.claimed_at) summed over the shards, in 1-second buckets and over
  any 1-second span, against the bound.
- fleet suppress: from the start of mailroom_fleet.suppress(address) to the
  last shard refusing that address at claim time: on each shard a thread
  watches for the suppression row and then claims a probe mail to the
  address enqueued before the call (sender 'probe', due); the shard refuses
  when that claim finishes the probe cancelled, reason suppressed.
- suppression sync lag: a suppression made on shard A (mailroom.suppress,
  with 1 or 10,000 (QUICK: 1,000) pending there) to shard B refusing a probe
  mail to it at claim time, through one direct
  mailroom_fleet.sync_suppressions() call paged to take them all: the work
  itself. The pg_cron job adds up to its 1-minute period (stated, not waited).

Sides alternate (A B B A) and each ratio is the median over rounds. Runners
are stopped (SIGSTOP) while the rows are loaded and continued together; a
drain ends at the last finishing ledger row.

    .venv/bin/python bench/scale.py [--quick] [--fleet]
"""

from __future__ import annotations

import bisect
import signal
import statistics
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from _common import (EMPTY_QUEUE, _server_url, bench_parser, insert_mail, live_count,  # noqa: E402
                     load_queued, pct, scratch_database, sent_stats, target)
from tests.fleetkit import build_fleet  # noqa: E402
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



# -- the fleet: a domain limit across shards, a suppression reaching all ------------

FLEET_DOMAIN = "limit.example"
FLEET_LIMIT = 200


def _busiest_second(times: list[float]) -> tuple[int, int]:
    """(most claims in one 1-second bucket, most in any span of 1 second) of sorted epoch times."""
    buckets: dict[int, int] = {}
    for t in times:
        buckets[int(t)] = buckets.get(int(t), 0) + 1
    sliding = max((bisect.bisect_right(times, t + 1.0) - i for i, t in enumerate(times)), default=0)
    return max(buckets.values(), default=0), sliding


def _fleet_limit(urls: list[str], directory, per_shard: list[int]) -> dict:
    conns = [psycopg.connect(u, autocommit=True) for u in urls]
    try:
        for c, n in zip(conns, per_shard):
            c.execute(EMPTY_QUEUE)
            insert_mail(c, "delivery_key, to_address, subject, body_text",
                        "SELECT 'fleet-' || g, 'user' || g || '@' || %s, 'Hi', 'Body' FROM generate_series(1, %s) g",
                        (FLEET_DOMAIN, n))
            c.execute("VACUUM ANALYZE mailroom.queue")
        with psycopg.connect(directory.directory, autocommit=True) as d:
            d.execute("SELECT * FROM mailroom_fleet.set_domain_limit(%s, %s)", (FLEET_DOMAIN, FLEET_LIMIT)).fetchall()
            shares = [r[0] for r in d.execute(
                "SELECT share_per_second FROM mailroom_fleet.list_domain_limits() WHERE domain = %s ORDER BY shard",
                (FLEET_DOMAIN,))]
        stop = threading.Event()
        rebalances: list[list[int]] = []

        def rebalance():
            with psycopg.connect(directory.directory, autocommit=True) as d:
                while not stop.wait(5):
                    rebalances.append([r[0] for r in d.execute(
                        "SELECT per_second FROM mailroom_fleet.rebalance_domain_limits(%s) ORDER BY shard",
                        (FLEET_DOMAIN,))])
        procs = _start(_dsn_args(urls))
        worker = threading.Thread(target=rebalance, daemon=True)
        worker.start()
        try:
            deadline = time.monotonic() + sum(per_shard) / FLEET_LIMIT * 3 + 60
            while any(live_count(c) for c in conns):
                if time.monotonic() > deadline:
                    raise RuntimeError("the fleet-limit drain did not finish in time")
                time.sleep(0.2)
        finally:
            stop.set()
            worker.join(30)
            _stop(procs)
        times = sorted(t for c in conns for (t,) in c.execute(
            "SELECT extract(epoch FROM claimed_at)::float8 FROM mailroom.attempts WHERE claimed_at IS NOT NULL"))
        bucket, sliding = _busiest_second(times)
        with psycopg.connect(directory.directory, autocommit=True) as d:
            d.execute("SELECT * FROM mailroom_fleet.clear_domain_limit(%s)", (FLEET_DOMAIN,)).fetchall()
        return {"claims": len(times), "seconds": times[-1] - times[0], "bucket": bucket, "sliding": sliding,
                "shares": shares, "rebalances": rebalances}
    finally:
        for c in conns:
            c.close()


def _fleet_suppress(urls: list[str], directory, rounds: int) -> tuple[list[float], list[float]]:
    """ms from the start of mailroom_fleet.suppress to the last shard refusing
    the address at claim time, and ms the call itself took, per round."""
    conns = [psycopg.connect(u, autocommit=True) for u in urls]
    latencies, calls = [], []
    try:
        for c in conns:
            c.execute(EMPTY_QUEUE)
        with psycopg.connect(directory.directory, autocommit=True) as d:
            for r in range(rounds):
                address = f"probe{r}-{time.monotonic_ns()}@suppress.example"
                probes = [c.execute("SELECT mailroom.enqueue(%s, 'Probe', 'Body', p_sender => 'probe')",
                                    (address,)).fetchone()[0] for c in conns]
                refused: dict[int, float] = {}
                go = threading.Barrier(len(conns) + 1)

                def watch(i: int, url: str) -> None:
                    with psycopg.connect(url, autocommit=True) as c:
                        go.wait()
                        while True:
                            if c.execute("SELECT FROM mailroom.suppressions WHERE address_key = mailroom._address_key(%s)",
                                         (address,)).fetchone() is not None:
                                c.execute("SELECT * FROM mailroom.claim_batch('probe', 10, p_sender => 'probe')").fetchall()
                                status = c.execute("SELECT status, status_reason FROM mailroom.messages WHERE id = %s",
                                                   (probes[i],)).fetchone()
                                if status == ("cancelled", "suppressed"):
                                    refused[i] = time.perf_counter()
                                    return
                                raise RuntimeError(f"shard {i}: the probe was not refused: {status}")
                            time.sleep(0.001)
                threads = [threading.Thread(target=watch, args=(i, u)) for i, u in enumerate(urls)]
                for t in threads:
                    t.start()
                go.wait()
                t0 = time.perf_counter()
                d.execute("SELECT * FROM mailroom_fleet.suppress(%s)", (address,)).fetchall()
                calls.append((time.perf_counter() - t0) * 1000)
                for t in threads:
                    t.join(30)
                if len(refused) != len(urls):
                    raise RuntimeError("a shard never refused the suppressed probe")
                latencies.append((max(refused.values()) - t0) * 1000)
    finally:
        for c in conns:
            c.close()
    return latencies, calls


def _sync_lag(urls: list[str], directory, pending: int, samples: int) -> tuple[list[float], list[float]]:
    """ms from a suppression committed on shard A (with `pending` - 1 others
    written there since the last sync) to shard B refusing the address at
    claim time, through one direct mailroom_fleet.sync_suppressions() call
    paged to take them all; and ms that call took, per sample."""
    a, b = (psycopg.connect(u, autocommit=True) for u in urls[:2])
    lags, calls = [], []
    try:
        with psycopg.connect(directory.directory, autocommit=True) as d:
            d.execute("SELECT count(*) FROM mailroom_fleet.sync_suppressions(100000)").fetchall()
            for r in range(samples):
                tag = f"{pending}-{r}-{time.monotonic_ns()}"
                address = f"lag{tag}@sync.example"
                probe = b.execute("SELECT mailroom.enqueue(%s, 'Probe', 'Body', p_sender => 'probe')",
                                  (address,)).fetchone()[0]
                a.execute("SELECT count(mailroom.suppress('fill' || g || '-' || %s || '@sync.example', 'hard_bounce'))"
                          " FROM generate_series(1, %s) g", (tag, pending - 1))
                a.execute("SELECT mailroom.suppress(%s, 'hard_bounce')", (address,))
                t0 = time.perf_counter()
                d.execute("SELECT count(*) FROM mailroom_fleet.sync_suppressions(%s)", (max(1000, pending),)).fetchall()
                calls.append((time.perf_counter() - t0) * 1000)
                b.execute("SELECT * FROM mailroom.claim_batch('probe', 10, p_sender => 'probe')").fetchall()
                status = b.execute("SELECT status, status_reason FROM mailroom.messages WHERE id = %s",
                                   (probe,)).fetchone()
                if status != ("cancelled", "suppressed"):
                    raise RuntimeError(f"shard B did not refuse the synced address: {status}")
                lags.append((time.perf_counter() - t0) * 1000)
    finally:
        a.close()
        b.close()
    return lags, calls


def fleet_figures(urls: list[str], quick: bool) -> list[tuple[str, str, bool]]:
    """Print the two fleet figures; return their target lines."""
    per_shard = [1200, 600, 300, 100] if quick else [2400, 1200, 600, 200]
    with build_fleet(_server_url(), None, partitions=4, shard_urls=urls) as directory:
        lim = _fleet_limit(urls, directory, per_shard)
        lat, calls = _fleet_suppress(urls, directory, 20 if quick else 50)
        # 10,000 pending take about 11 s a call here: 3 samples keep the run under 2 minutes.
        lags = {n: _sync_lag(urls, directory, n, 3 if quick or n > 1 else 5) for n in (1, 1_000 if quick else 10_000)}
    print(f"fleet domain limit {FLEET_LIMIT}/s, 4 shards x {'/'.join(map(str, per_shard))} mails to {FLEET_DOMAIN},"
          f" {RUNNERS} runners, rebalance every 5 s")
    print(f"  first shares {lim['shares']}; shares after each rebalance: "
          + "; ".join("/".join(map(str, r)) for r in lim["rebalances"]))
    print(f"  {lim['claims']} claims, first to last {lim['seconds']:.1f} s;"
          f" busiest 1-s bucket {lim['bucket']}, busiest 1-s span {lim['sliding']} (bound {FLEET_LIMIT})")
    print(f"fleet suppress over 4 shards, {len(lat)} rounds: suppress() call p50 {statistics.median(calls):.1f} ms,"
          f" to the last shard refusing p50 {statistics.median(lat):.1f} ms, p99 {pct(lat, 99):.1f} ms,"
          f" max {max(lat):.1f} ms")
    for n, (lag, sync_calls) in lags.items():
        print(f"suppression sync, 4 shards, {n:,} pending on shard A, {len(lag)} samples: one sync_suppressions()"
              f" call p50 {statistics.median(sync_calls):.1f} ms, p99 {pct(sync_calls, 99):.1f} ms;"
              f" suppress on A to B refusing p50 {statistics.median(lag):.1f} ms, p99 {pct(lag, 99):.1f} ms")
    print("  with the pg_cron job (every minute; a run pages through the whole backlog): up to 60 s plus the call")
    return [(f"fleet domain limit: busiest second over 4 shards <= {FLEET_LIMIT}",
             f"{lim['bucket']} (bucket), {lim['sliding']} (any span)", lim["sliding"] <= FLEET_LIMIT)]

def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--fleet", action="store_true", help="only the fleet figures (domain limit, suppress)")
    args = parser.parse_args()
    if args.fleet:
        with ExitStack() as stack:
            urls = [stack.enter_context(scratch_database(f"mailroom_bench_scale_{i}", synchronous_commit="on"))
                    for i in range(4)]
            for line in fleet_figures(urls, args.quick):
                target(*line)
        return 0
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
        fleet_targets = fleet_figures(urls, args.quick)

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
    for line in fleet_targets:
        target(*line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
