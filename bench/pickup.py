"""Pickup latency: how soon an idle runner claims and sends a mail that was
just enqueued.

4 idle `mailroom run` processes (default settings, SMTP to an aiosmtpd sink
on loopback that stamps each arrival with time.time()); 200 mails enqueued
one at a time, 20 ms apart, each in its own transaction. Per mail:

- commit to claim: attempts.claimed_at (the claiming transaction's start)
  minus the client's clock right after COMMIT returned;
- enqueue to SMTP accept: the sink's arrival time minus the same commit time.

Same machine, same clock.

    .venv/bin/python bench/pickup.py [--quick]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from _common import mailroom_runners, pct, scratch_database  # noqa: E402
from tests.send_rate_harness import Sink  # noqa: E402

GAP = 0.020


def main() -> int:
    quick = "--quick" in sys.argv
    n = 100 if quick else 200
    committed: dict[str, float] = {}
    with scratch_database("mailroom_bench_pickup") as url, Sink() as sink:
        with mailroom_runners(url, f"smtp://127.0.0.1:{sink.port}?timeout=10", 4, name="pickup") as procs, \
                psycopg.connect(url, autocommit=True) as conn:
            next_at = time.monotonic()
            for i in range(n):
                key = f"pickup-{i}"
                conn.execute("SELECT mailroom.enqueue(%s, 'Pickup', 'Body', p_delivery_key => %s)",
                             (f"u{i}@pickup.example", key))
                committed[key] = time.time()  # autocommit: COMMIT has returned
                next_at += GAP
                time.sleep(max(0.0, next_at - time.monotonic()))
            deadline = time.monotonic() + 30
            while sink.count() < n and time.monotonic() < deadline:
                time.sleep(0.05)
            claimed = dict(conn.execute(
                "SELECT c.delivery_key, extract(epoch FROM min(a.claimed_at))::float8"
                " FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id"
                " GROUP BY c.delivery_key").fetchall())
        with sink.recorder.lock:
            arrivals = {rcpt: t for t, rcpt in sink.recorder.arrivals}
    to_claim = [(claimed[k] - t) * 1000 for k, t in committed.items() if k in claimed]
    to_accept = [(arrivals[f"u{k.rsplit('-', 1)[1]}@pickup.example"] - t) * 1000
                 for k, t in committed.items() if f"u{k.rsplit('-', 1)[1]}@pickup.example" in arrivals]
    print(f"mailroom bench: pickup latency, 4 idle runners, {n} mails enqueued one at a time {GAP * 1000:.0f} ms apart")
    print(f"{'measure':34} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'mails':>6}")
    for label, v in (("enqueue commit -> claim", to_claim), ("enqueue commit -> SMTP accept", to_accept)):
        if v:
            print(f"{label:34} {statistics.median(v):8.2f} {pct(v, 99):8.2f} {max(v):8.2f} {len(v):6}")
        else:
            print(f"{label:34} {'-':>8} {'-':>8} {'-':>8} {0:6}")
    p50 = statistics.median(to_claim) if to_claim else float("inf")
    p99 = pct(to_claim, 99) if to_claim else float("inf")
    print(f"target pickup commit to claim p50 <= 5 ms: {p50:.2f} ms ({'ok' if p50 <= 5 else 'MISSED'})")
    print(f"target pickup commit to claim p99 <= 15 ms: {p99:.2f} ms ({'ok' if p99 <= 15 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
