"""Send rates, full size (about 100 s): the figures behind issue 6.

1. A sender limited to 50/s, 4 runners, 3,000 queued mails: the sink's rate
   over the run must be within 10 % of 50/s and no 1 s bucket above 55.
2. A domain capped at 5/s (150 mails, oldest in the queue) among 2,850 mails
   to other domains: the capped domain likewise (within 10 % of 5/s, no bucket
   above 5), while the others flow at full speed.

Runners are 4 real `mailroom run` processes (--batch 25, default-ish poll
interval of 1 s: after a claim cut short by a send rate a runner waits what
send_rate_retry_after() says) sending to an aiosmtpd sink on loopback
(tests/send_rate_harness.py). Prints a target line per bound. --quick: 600
and 75 mails (12 and 15 s; fewer would put the first second's burst above 10 %). Run: make bench, or .venv/bin/python bench/send_rates.py [--quick].
"""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from _common import bench_parser, scratch_database, target  # noqa: E402
from tests.send_rate_harness import Sink, enqueue, report, run_mailroom_runners as run  # noqa: E402


def main() -> int:
    args = bench_parser(__doc__).parse_args()
    # --quick: 12 and 15 s per limited part instead of 60 s and 30 s
    sender_mails, capped_mails, other_mails = (600, 75, 60) if args.quick else (3000, 150, 285)
    kind = "`mailroom run` processes"
    print(f"mailroom bench: send rates (4 {kind}, batch 25, aiosmtpd sink on loopback)")

    with scratch_database("mailroom_bench_sender") as url:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("SELECT mailroom.set_sender_limits('default', 50)")
            enqueue(c, "example.com", sender_mails)
        with Sink() as sink:
            run(url, sink, sender_mails, runners=4, timeout=150)
            r = report(sink.arrivals())
        print(r.line("sender limited to 50/s"))
        target("sender rate within 10 % of 50/s", f"{r.rate:.2f}/s", 45 <= r.rate <= 55)
        target("sender, most in one 1 s bucket <= 55", str(r.max_bucket), r.max_bucket <= 55)

    with scratch_database("mailroom_bench_domain") as url:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("SELECT mailroom.set_domain_limits('capped.test', 5)")
            enqueue(c, "capped.test", capped_mails)
            for i in range(10):
                enqueue(c, f"free{i}.test", other_mails)
        with Sink() as sink:
            run(url, sink, capped_mails + 10 * other_mails, runners=4, timeout=150)
            capped = report(sink.arrivals("capped.test"))
            others = report(sink.arrivals(exclude="capped.test"))
        print(capped.line("capped.test limited to 5/s"))
        print(others.line("10 other domains, no limit"))
        target("capped domain rate within 10 % of 5/s", f"{capped.rate:.2f}/s", 4.5 <= capped.rate <= 5.5)
        target("capped domain, most in one 1 s bucket <= 5", str(capped.max_bucket), capped.max_bucket <= 5)
        target(f"the other {10 * other_mails:,} done within 10 s of the capped domain's start",
               f"{others.last - capped.first:.1f} s (capped domain took {capped.duration:.1f} s)",
               others.last < capped.first + 10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
