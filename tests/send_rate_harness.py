"""Send-rate drills shared by tests/test_send_rates.py (short) and
bench/send_rates.py (the full 3,000-mail runs).

A real SMTP sink (aiosmtpd on 127.0.0.1) stamps the arrival time of every
recipient. Runners are real `mailroom run` processes; after a claim cut
short by a send rate they wait what mailroom.send_rate_retry_after() says,
so a normal poll interval is enough.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import psycopg
from aiosmtpd.controller import Controller


class _Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.arrivals: list[tuple[float, str]] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's hook name
        now = time.time()
        with self.lock:
            self.arrivals.extend((now, rcpt) for rcpt in envelope.rcpt_tos)
        return "250 OK"


class Sink:
    """An SMTP server on loopback that records (arrival time, recipient)."""

    def __init__(self) -> None:
        self.recorder = _Recorder()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.controller = Controller(self.recorder, hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> "Sink":
        self.controller.start()
        return self

    def __exit__(self, *exc) -> None:
        self.controller.stop()

    def count(self) -> int:
        with self.recorder.lock:
            return len(self.recorder.arrivals)

    def arrivals(self, domain: str | None = None, exclude: str | None = None) -> list[float]:
        with self.recorder.lock:
            rows = list(self.recorder.arrivals)
        return sorted(
            t for t, rcpt in rows
            if (domain is None or rcpt.endswith("@" + domain))
            and (exclude is None or not rcpt.endswith("@" + exclude))
        )


def enqueue(conn, domain: str, n: int, *, sender: str = "default", tag: str = "") -> None:
    conn.execute(
        """SELECT mailroom.enqueue('u' || g || %(at)s, 'Rate drill', 'Body',
                                   p_delivery_key => %(key)s || g, p_sender => %(sender)s)
           FROM generate_series(1, %(n)s) AS g""",
        {"at": "@" + domain, "key": f"drill-{tag}{domain}-", "sender": sender, "n": n},
    )


def run_mailroom_runners(db_url: str, sink: Sink, expected: int, *, runners: int = 4, batch: int = 25,
                         poll: float = 1.0, timeout: float = 120.0) -> None:
    """Start `runners` real `mailroom run` processes against the sink, wait until
    it has `expected` mails, stop them with SIGTERM."""
    from tests.runnerkit import RunnerProcess

    procs = [RunnerProcess(db_url, f"smtp://127.0.0.1:{sink.port}?timeout=10",
                           "--batch", str(batch), "--poll-interval", str(poll), "--concurrency", "4",
                           "--worker", f"drill-{i}", "--log-level", "warning")
             for i in range(runners)]
    try:
        deadline = time.monotonic() + timeout
        while sink.count() < expected and time.monotonic() < deadline:
            dead = [p for p in procs if p.proc.poll() is not None]
            assert not dead, "a runner exited:\n" + dead[0].log()
            time.sleep(0.05)
        for p in procs:
            p.stop()
    finally:
        for p in procs:
            p.close()
    assert sink.count() >= expected, f"only {sink.count()} of {expected} mails arrived within {timeout} s"


@dataclass
class RateReport:
    n: int
    first: float
    last: float
    per_bucket: Counter = field(repr=False)

    @property
    def duration(self) -> float:
        return self.last - self.first

    @property
    def rate(self) -> float:
        """Mails per second over the run (first to last arrival)."""
        return self.n / self.duration if self.duration > 0 else float("inf")

    @property
    def max_bucket(self) -> int:
        """Most mails that arrived within one wall-clock second (epoch-aligned buckets)."""
        return max(self.per_bucket.values())

    def line(self, label: str) -> str:
        return (f"{label}: {self.n} mails in {self.duration:.2f} s = {self.rate:.2f}/s; "
                f"most in one 1 s bucket: {self.max_bucket}")


def busiest_claim_second(conn, domain: str | None = None) -> tuple[int, float]:
    """From the ledger: the most claims within any 1 s span (what the limiter
    promises, at claim time, whatever the machine's load does to delivery
    afterwards), and the seconds from the first claim to the last."""
    row = conn.execute(
        """SELECT coalesce(max(n), 0) AS busiest,
                  coalesce(extract(epoch FROM max(claimed_at) - min(claimed_at)), 0)::float8 AS span
           FROM (SELECT a.claimed_at,
                        count(*) OVER (ORDER BY a.claimed_at
                                       RANGE BETWEEN CURRENT ROW AND '999999 microseconds' FOLLOWING) AS n
                 FROM mailroom.attempts a JOIN mailroom.messages m ON m.id = a.message_id
                 WHERE %(domain)s::text IS NULL OR m.to_domain = %(domain)s) AS claims""",
        {"domain": domain},
    ).fetchone()
    return row["busiest"], row["span"]


def report(times: list[float]) -> RateReport:
    assert times, "no mail arrived"
    return RateReport(len(times), times[0], times[-1], Counter(int(t) for t in times))
