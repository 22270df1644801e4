"""Send rates, full size (about 100 s): the figures behind issue 6.

1. A sender limited to 50/s, 4 runners, 3,000 queued mails: the sink's rate
   over the run must be within 10 % of 50/s and no 1 s bucket above 55.
2. A domain capped at 5/s (150 mails, oldest in the queue) among 2,850 mails
   to other domains: the capped domain likewise (within 10 % of 5/s, no bucket
   above 5), while the others flow at full speed.

Runners are 4 real `mailroom run` processes (--batch 25, default-ish poll
interval of 1 s: after a claim cut short by a send rate a runner waits what
send_rate_retry_after() says) sending to an aiosmtpd sink on loopback
(tests/send_rate_harness.py). Exits non-zero when a bound is missed. Run: make bench, or .venv/bin/python bench/send_rates.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from _common import scratch_database  # noqa: E402
from tests.send_rate_harness import Sink, enqueue, report, run_mailroom_runners as run  # noqa: E402


def check(ok: bool, what: str, failures: list[str]) -> None:
    print(("  ok    " if ok else "  FAIL  ") + what)
    if not ok:
        failures.append(what)


def main() -> int:
    failures: list[str] = []
    kind = "`mailroom run` processes"
    print(f"mailroom bench: send rates (4 {kind}, batch 25, aiosmtpd sink on loopback)")

    with scratch_database("mailroom_bench_sender") as url:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("SELECT mailroom.set_sender_limits('default', 50)")
            enqueue(c, "example.com", 3000)
        with Sink() as sink:
            run(url, sink, 3000, runners=4, timeout=150)
            r = report(sink.arrivals())
        print(r.line("sender limited to 50/s"))
        check(45 <= r.rate <= 55, f"rate {r.rate:.2f}/s within 10 % of 50/s", failures)
        check(r.max_bucket <= 55, f"most in one 1 s bucket {r.max_bucket} <= 55", failures)

    with scratch_database("mailroom_bench_domain") as url:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("SELECT mailroom.set_domain_limits('capped.test', 5)")
            enqueue(c, "capped.test", 150)
            for i in range(10):
                enqueue(c, f"free{i}.test", 285)
        with Sink() as sink:
            run(url, sink, 3000, runners=4, timeout=150)
            capped = report(sink.arrivals("capped.test"))
            others = report(sink.arrivals(exclude="capped.test"))
        print(capped.line("capped.test limited to 5/s"))
        print(others.line("10 other domains, no limit"))
        check(4.5 <= capped.rate <= 5.5, f"capped rate {capped.rate:.2f}/s within 10 % of 5/s", failures)
        check(capped.max_bucket <= 5, f"capped: most in one 1 s bucket {capped.max_bucket} <= 5", failures)
        check(others.last < capped.first + 10,
              f"the other 2,850 were done {others.last - capped.first:.1f} s into the capped domain's "
              f"{capped.duration:.1f} s", failures)

    if failures:
        print(f"{len(failures)} bound(s) missed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
