"""Claim cost under a default domain limit (issue 13, "Why" 6 and "What it
must show"): a claim of 50 with `set_domain_limits('*', 100, 1000)` and
20,000 recently mailed domains, against the same claim with no limit.

Three scratch databases side by side on the same cluster, all with
synchronous_commit = on:

  unlimited  no domain limit;
  limited    the default domain limit, and 20,000 domains mailed just before;
  fresh      the default domain limit, no domain mailed before (what a
             limited claim costs per batch, whatever the history).

In unlimited and limited, 20,000 mails to 20,000 distinct domains are sent
through claim_batch (claims of 1,000) + mark_outcomes. On the limited side
the limit is set after that, and the sends are then recorded in the
per-domain send budgets as the claims that sent them would have recorded them
(mailroom._domain_budgets_spend, what claim_batch spends domains with: one
send per domain in its per-second and per-minute windows, now):
sending 20,000 through limited claims takes minutes, by which time most of
the minute windows have emptied. Then CLAIMS x 50 mails to the same domains
are queued on every side (due a minute ago; 50 consecutive ones go to 50
different domains, so no claim is throttled) and CLAIMS claims of 50 are
timed, the sides taking turns claim by claim so noise hits them alike. The
measurement is cut 45 s after the sends were recorded, so every domain still
counts as mailed within the limit's minute.

The timer covers the claim_batch statement; its COMMIT (synchronous_commit =
on: a WAL flush, the same for every side) is timed apart and printed.
Target: median claim limited / unlimited <= 2 (p95 printed too).
    .venv/bin/python bench/domain_limits.py [--quick] [--domains N]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (bench_parser, insert_mail, live_count, scratch_database, sent_stats, target,  # noqa: E402
                     vacuum_analyze)

BATCH, FILL_BATCH, WINDOW_S = 50, 1000, 45
LIMIT = "SELECT mailroom.set_domain_limits('*', 100, 1000)"


def mail_domains(conn: psycopg.Connection, domains: int) -> float:
    """Queue one mail to each of `domains` domains (r1 ... rN.example) and
    send them all through claim_batch + mark_outcomes; returns the seconds
    the sending took."""
    insert_mail(conn, "delivery_key, to_address, subject, body_text",
                "SELECT 'fill-' || g, 'u@r' || g || '.example', 'Hi', 'Body' FROM generate_series(1, %s) g",
                (domains,), run_at="now() - interval '1 minute'")
    vacuum_analyze(conn)
    t0 = time.perf_counter()
    while True:
        rows = conn.execute("SELECT id, lease_token FROM mailroom.claim_batch('fill', %s)", (FILL_BATCH,)).fetchall()
        if not rows:
            break
        conn.execute("SELECT mailroom.mark_outcomes(%s::jsonb)",
                     (json.dumps([{"id": i, "token": str(t), "outcome": "sent"} for i, t in rows]),))
    elapsed = time.perf_counter() - t0
    sent = sent_stats(conn)[0]
    if sent != domains or live_count(conn):
        raise RuntimeError(f"mailing {domains:,} domains sent {sent:,}, {live_count(conn):,} left")
    return elapsed


def record_sends(conn: psycopg.Connection, domains: int) -> None:
    """One send to each domain r1 ... rN.example, now, in its per-second and
    per-minute windows, as a claim spends them (the default limit's)."""
    conn.execute(
        "SELECT count(*) FROM mailroom._domain_budgets_spend("
        "  ARRAY(SELECT 'r' || g || '.example' FROM generate_series(1, %s) g),"
        "  array_fill(100, ARRAY[%s]), array_fill(1000, ARRAY[%s]), now())",
        (domains, domains, domains))


def queue_claims(conn: psycopg.Connection, domains: int, claims: int) -> None:
    insert_mail(conn, "delivery_key, to_address, subject, body_text",
                "SELECT 'q-' || g, 'u' || g || '@r' || (1 + g %% %s) || '.example', 'Hi', 'Body'"
                " FROM generate_series(1, %s) g", (domains, claims * BATCH),
                run_at="now() - interval '1 minute'")
    conn.execute("ANALYZE mailroom.queue")
    conn.execute("ANALYZE mailroom.contents")


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--domains", type=int, default=20_000)
    args = parser.parse_args()
    domains = args.domains
    claims = 60 if args.quick else 200

    sides = ("unlimited", "limited", "fresh")
    print(f"mailroom bench: claim_batch of {BATCH}, up to {claims} claims each, default domain limit"
          f" ('*', 100/s, 1000/min) vs none, {domains:,} domains mailed just before")
    with ExitStack() as stack:
        urls = {"unlimited": stack.enter_context(scratch_database("mailroom_bench_domains_none", "on")),
                "limited": stack.enter_context(scratch_database("mailroom_bench_domains_limit", "on")),
                "fresh": stack.enter_context(scratch_database("mailroom_bench_domains_fresh", "on"))}
        conns = {k: stack.enter_context(psycopg.connect(u, autocommit=True)) for k, u in urls.items()}
        fill = {side: mail_domains(conns[side], domains) for side in ("unlimited", "limited")}
        print(f"sent {domains:,} mails to as many domains (claims of {FILL_BATCH} + mark_outcomes, no limit):"
              f" {fill['unlimited']:.1f} s and {fill['limited']:.1f} s")
        for side in ("limited", "fresh"):
            conns[side].execute(LIMIT)
        for side in sides:
            queue_claims(conns[side], domains, claims)
        record_sends(conns["limited"], domains)
        mailed_at = time.monotonic()
        counters = conns["limited"].execute(
            "SELECT count(*) FROM mailroom.domain_budgets WHERE expires_at > now()").fetchone()[0]
        print(f"limited side: {counters:,} live per-domain budget rows in mailroom.domain_budgets")

        # The timed claims run in transactions of their own connections: the
        # timer covers the claim_batch statement, the COMMIT (a WAL flush with
        # synchronous_commit = on, the same on every side and on this shared
        # disk often longer than the claim) is timed apart.
        claimers = {k: stack.enter_context(psycopg.connect(u)) for k, u in urls.items()}
        times: dict[str, list[float]] = {k: [] for k in sides}
        commits: dict[str, list[float]] = {k: [] for k in sides}
        sql = "SELECT id FROM mailroom.claim_batch(%s, %s)"
        for i in range(claims):
            if time.monotonic() - mailed_at > WINDOW_S:
                print(f"note: stopped after {i} claims each ({WINDOW_S} s after the sends were recorded: the"
                      " minute windows would empty)")
                break
            for side in (sides if i % 2 == 0 else tuple(reversed(sides))):
                t0 = time.perf_counter()
                rows = claimers[side].execute(sql, (f"bench-{i}", BATCH), prepare=True).fetchall()
                t1 = time.perf_counter()
                claimers[side].commit()
                times[side].append((t1 - t0) * 1000)
                commits[side].append((time.perf_counter() - t1) * 1000)
                if len(rows) != BATCH:
                    print(f"FAIL: {side}: claim {i} got {len(rows)} rows of {BATCH}", file=sys.stderr)
                    return 1
        if len(times["limited"]) < 10:
            print("FAIL: fewer than 10 claims within the window", file=sys.stderr)
            return 1

        def p95(xs: list[float]) -> float:
            return statistics.quantiles(xs, n=20)[-1]

        print(f"{'configuration':44} {'claims':>6} {'median ms':>10} {'p95 ms':>8} {'commit ms':>10}")
        for side, label in (("unlimited", "no domain limit"),
                            ("limited", f"default limit, {domains:,} domains mailed"),
                            ("fresh", "default limit, no domain mailed before")):
            print(f"{label:44} {len(times[side]):6} {statistics.median(times[side]):10.2f} {p95(times[side]):8.2f}"
                  f" {statistics.median(commits[side]):10.2f}")
        med = statistics.median(times["limited"]) / statistics.median(times["unlimited"])
        tail = p95(times["limited"]) / p95(times["unlimited"])
        fresh = statistics.median(times["fresh"]) / statistics.median(times["unlimited"])
        print(f"figure claim of {BATCH} with a default domain limit, no domain mailed before / no limit:"
              f" {fresh:.2f} x (what the limit costs a claim whatever the history; {domains:,} mailed: {med:.2f} x)")
        target(f"claim of {BATCH} with a default domain limit and {domains:,} recently mailed domains"
               " <= 2 x the same claim with no limit (median)",
               f"{med:.2f} x ({statistics.median(times['limited']):.2f} ms vs"
               f" {statistics.median(times['unlimited']):.2f} ms; p95 {tail:.2f} x)", med <= 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
