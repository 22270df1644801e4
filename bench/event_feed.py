"""Event feed: what the feed costs the drain, and how fast webhooks go out
(issue 30, item 3).

1. The drain with the feed on and off, in one run: drain.py's "mailroom SQL
   only" side (pgbench, 4 clients, bench/mailroom_sql.pgbench: claim_batch of
   50, then one mark_outcomes reporting the 50 sent) in one scratch database,
   the ledger's trigger attempts_events enabled (every sent mail writes its
   event) or disabled. This is the strictest drain there is: no runner, no
   SMTP, nothing but the SQL the feed adds to. Sides as a palindrome (on, off,
   off, on), the ratio per round, the median printed. Target: on >= 0.9 x off.
2. The runners' drain (4 `mailroom run`, null:// transport, as drain.py's
   "null" side) with the feed off and no webhooks against the feed on and
   every runner delivering webhooks to a slow HTTPS endpoint (50 ms per
   answer) during the drain: delivery must not slow the mail. Sides off, on,
   on, off (the runners started once per side). Target: on >= 0.9 x off.
3. Webhook delivery rate: the sent events of the drain POSTed by one
   WebhookDeliverer (mailroom.send.webhooks, as a runner runs it) to an HTTPS
   receiver on loopback (mailroom.dev.webhook_sink, self-signed certificate
   trusted by the deliverer) in the same process: events/s from the first
   claim to the last report.

    .venv/bin/python bench/event_feed.py [--quick]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, bench_parser, mailroom_runners, scratch_database, target  # noqa: E402
from drain import IDLE, WORKERS, run_mailroom, run_queue_script  # noqa: E402


def _kit():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from mailroom.dev.webhook_sink import WebhookSink
    from mailroom.signing import Keyring, new_key_line
    from tests.runnerkit import self_signed_cert
    return WebhookSink, Keyring, new_key_line, self_signed_cert


def runner_sides(url: str, conn, n: int) -> tuple[float, float, int]:
    """(feed off, feed on with webhooks to a slow endpoint) runner drain rates
    in mails/s, and how many events the slow endpoint took meanwhile."""
    WebhookSink, _, new_key_line, self_signed_cert = _kit()
    rates: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        ctx, cafile = self_signed_cert(Path(tmp))
        secrets = Path(tmp) / "secrets"
        secrets.write_text(new_key_line("bench") + "\n")
        with WebhookSink(ctx, keep=False, delay=0.05) as sink:
            for side, drains in (("off", 1), ("on", 2), ("off", 1)):
                conn.execute("DELETE FROM mailroom.webhook_endpoints")
                conn.execute(f"ALTER TABLE mailroom.attempts {'ENABLE' if side == 'on' else 'DISABLE'} TRIGGER attempts_events")
                args = ("--webhook-secrets", str(secrets), "--webhook-ca-file", cafile) if side == "on" else ()
                if side == "on":
                    conn.execute("SELECT mailroom.webhook_endpoint_set('slow', %s, 'bench')", (sink.url,))
                with mailroom_runners(url, "null://", WORKERS, *IDLE, *args, name=f"feed-{side}") as procs:
                    for i in range(drains):
                        rate, _, _ = run_mailroom(url, conn, n, procs, f"feed-{side}{len(rates[side])}")
                        rates[side].append(rate)
            conn.execute("ALTER TABLE mailroom.attempts ENABLE TRIGGER attempts_events")
            taken = sink.count
    return statistics.fmean(rates["off"]), statistics.fmean(rates["on"]), taken


def webhook_rate(url: str, conn, events: int) -> float:
    WebhookSink, Keyring, new_key_line, self_signed_cert = _kit()
    from mailroom.send.webhooks import WebhookDeliverer

    with tempfile.TemporaryDirectory() as tmp:
        ctx, cafile = self_signed_cert(Path(tmp))
        secrets = Keyring.parse(new_key_line("bench"))
        with WebhookSink(ctx, keep=False) as sink:
            conn.execute("DELETE FROM mailroom.webhook_endpoints")
            conn.execute("SELECT mailroom.webhook_endpoint_set('bench', %s, 'bench', p_from_start => true)",
                         (sink.url,))
            stopping = threading.Event()
            deliverer = WebhookDeliverer(url, secrets, "bench", stopping, ca_file=cafile, poll_interval=0.05)
            t0 = time.perf_counter()
            deliverer.start()
            while True:
                delivered = conn.execute("SELECT delivered FROM mailroom.webhook_status WHERE name = 'bench'"
                                         ).fetchone()[0]
                if delivered >= events:
                    break
                if time.perf_counter() - t0 > 120:
                    raise RuntimeError(f"only {delivered} of {events} events delivered in 120 s")
                time.sleep(0.02)
            elapsed = time.perf_counter() - t0
            stopping.set()
            deliverer.thread.join(10)
    return delivered / elapsed


def main() -> int:
    args = bench_parser(__doc__).parse_args()
    n = 10_000 if args.quick else 20_000
    rounds = 1 if args.quick else 3
    hooks = 2_000 if args.quick else 5_000
    sql_side = run_queue_script("mailroom_sql.pgbench")
    ratios, on_rates, off_rates = [], [], []
    with scratch_database("mailroom_bench_event_feed", synchronous_commit="on") as url, \
            psycopg.connect(url, autocommit=True) as conn:
        for r in range(rounds):
            runs: dict[str, list[float]] = {"on": [], "off": []}
            order = ["on", "off", "off", "on"] if r % 2 == 0 else ["off", "on", "on", "off"]
            for side in order:
                conn.execute(f"ALTER TABLE mailroom.attempts {'ENABLE' if side == 'on' else 'DISABLE'} TRIGGER attempts_events")
                conn.execute("TRUNCATE mailroom.events")
                rate, _ = sql_side(url, conn, n)
                runs[side].append(rate)
            on, off = statistics.fmean(runs["on"]), statistics.fmean(runs["off"])
            on_rates.append(on)
            off_rates.append(off)
            ratios.append(on / off)
        conn.execute("ALTER TABLE mailroom.attempts ENABLE TRIGGER attempts_events")
        feed_events = conn.execute("SELECT count(*) FROM mailroom.events WHERE kind = 'sent'").fetchone()[0]
        assert feed_events == n, f"the last 'on' drain wrote {feed_events} sent events for {n} mails"
        # The last drain was 'on' (the palindrome ends on it in even rounds, see order): its events are there.
        rate = webhook_rate(url, conn, min(hooks, feed_events))
        runner_off, runner_on, slow_taken = runner_sides(url, conn, n)

    ratio = statistics.median(ratios)
    print(f"event feed: {n:,} mails a drain, {rounds} round(s) of on/off/off/on (or off/on/on/off)")
    print(f"{'side':<44} {'mails/s':>10}")
    print(f"{'claim_batch + mark_outcomes, feed on':<44} {statistics.median(on_rates):>10,.0f}")
    print(f"{'claim_batch + mark_outcomes, feed off':<44} {statistics.median(off_rates):>10,.0f}")
    print(f"{'ratio on / off (median of rounds)':<44} {ratio:>10.3f}")
    print(f"{'4 runners (null://), feed off, no webhooks':<44} {runner_off:>10,.0f}")
    print(f"{'4 runners, feed on, webhooks to a slow endpoint':<44} {runner_on:>10,.0f}"
          f"   ({slow_taken:,} events taken at 50 ms each meanwhile)")
    print(f"{'webhook delivery to loopback HTTPS':<44} {rate:>10,.0f} events/s")
    target("drain with the event feed on / off", f"{ratio:.2f} x (>= 0.9 x)", ratio >= 0.9)
    runner_ratio = runner_on / runner_off
    target("runners' drain with feed and slow webhooks / without", f"{runner_ratio:.2f} x (>= 0.9 x)",
           runner_ratio >= 0.9)
    print(f"webhook delivery rate: {rate:,.0f} events/s (one endpoint, one deliverer, events POSTed one by one)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
