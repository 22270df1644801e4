"""Operator reads against the length of the history (issue 32, item 7).

Builds two scratch databases with the same recent traffic and compares each
read on them: SMALL holds only that (the last day's 10,000 finished mails
with retries, 2,000 overdue queued mails, 1,000 suppressions, one campaign
with 5,000 mails left queued and 500 finished); LARGE holds the same plus
history: 200,000 older finished mails (40 days ending 8 days ago), the
campaign's 200,000 finished mails (so 400,000 finished mails besides the
last day's) and 49,000 older suppressions (50,000 in all). Each read is
timed on both (median of --runs after one warm-up); a read passes when
LARGE takes at most 2 x SMALL.

    .venv/bin/python bench/operator_reads.py            (the sizes above)
    .venv/bin/python bench/operator_reads.py --quick    (history a quarter of that)
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_parser, fill_history, scratch_database, target, vacuum_analyze  # noqa: E402

LIVE = 5_000          # the campaign's mail still queued, in both databases
RECENT = 10_000       # finished mails of the last day, in both
RECENT_SUPPRESSED = 1_000
MAX_RATIO = 2.0

READS = [
    ("repeated_attempts (all)", "SELECT count(*) FROM mailroom.repeated_attempts"),
    ("repeated_attempts (one recipient)", "SELECT * FROM mailroom.repeated_attempts WHERE recipient = 'r50@example.com'"),
    ("suppression_search (newest)", "SELECT * FROM mailroom.suppression_search()"),
    ("suppression_search (substring)", "SELECT * FROM mailroom.suppression_search('s-r99')"),
    ("suppression_search (reason)", "SELECT * FROM mailroom.suppression_search('hard_bounce')"),
    ("find_messages (recipient)", "SELECT * FROM mailroom.find_messages('r50@example.com')"),
    ("find_messages (no match)", "SELECT * FROM mailroom.find_messages('nobody@example.invalid')"),
    ("campaign_summaries", "SELECT * FROM mailroom.campaign_summaries()"),
    ("pause_campaign + resume_campaign", None),
]


def fill_campaign(conn, finished: int, ended: str) -> int:
    """One campaign of finished + LIVE mails: the first `finished` sent over
    the 40 days that ended `ended` ago, the last LIVE queued. Returns its id."""
    conn.execute("SELECT mailroom.upsert_template('bench-news', 'News', 'Hello {{ name }}')")
    cid = conn.execute(
        "SELECT mailroom.enqueue_campaign('bench-campaign', 'bench-news', %s)",
        (f"SELECT g::text AS recipient_id, 'c' || g || '@example.net' AS email, '{{}}'::jsonb AS vars"
         f" FROM generate_series(1, {finished + LIVE}) g",)).fetchone()[0]
    # Its first `finished` mails sent (the first chunk's queue rows out), then the rest
    # queued: the queue is as big as the live mail, as lazy queueing keeps it.
    conn.execute(
        """
        WITH done AS (SELECT c.id FROM mailroom.contents c WHERE c.campaign_id = %(c)s ORDER BY c.id LIMIT %(n)s),
        out AS (DELETE FROM mailroom.queue q USING done d WHERE q.id = d.id)
        INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at,
                                       reported_at, reported, outcome, smtp_code, finished_as)
        SELECT d.id, 1, 'bench', gen_random_uuid(), t, t + interval '1 second', t + interval '1 second',
               'sent', 'sent', 250, 'sent'
        FROM done d, LATERAL (SELECT now() - %(ended)s::interval - random() * interval '40 days' AS t) x
        """, {"c": cid, "n": finished, "ended": ended})
    conn.execute("SELECT mailroom._campaign_queue_all(%s, now())", (cid,))
    return cid


def fill_suppressions(conn, n: int, prefix: str, ended: str) -> None:
    """n suppressions s-<prefix><i>@example.org created over the 40 days that ended `ended` ago
    (a tenth hard bounces, the rest unsubscribes)."""
    conn.execute(
        """
        INSERT INTO mailroom.suppressions (address_key, address, reason, source, created_at)
        SELECT a, a, CASE WHEN g %% 10 = 0 THEN 'hard_bounce' ELSE 'unsubscribed' END,
               CASE WHEN g %% 10 = 0 THEN 'smtp 5.1.1 user unknown' ELSE 'app' END,
               now() - %(ended)s::interval - (g::float / %(n)s) * interval '40 days'
        FROM generate_series(1, %(n)s) g, LATERAL (SELECT 's-' || %(p)s || g || '@example.org' AS a) x
        """, {"n": n, "p": prefix, "ended": ended})


def build(conn, history: int, campaign_finished: int, old_suppressed: int) -> int:
    if history:
        fill_history(conn, history, 0, ended="8 days", key="old", address="o")
    cid = fill_campaign(conn, campaign_finished, "8 days")
    # The last day's traffic, the same in both: 5,000 recipients r<n>, 2% retried.
    fill_history(conn, RECENT, 2_000, span="1 day", key="h", address="r", recipients=5_000)
    if old_suppressed:
        fill_suppressions(conn, old_suppressed, "o", "1 day")
    fill_suppressions(conn, RECENT_SUPPRESSED, "r", "0")
    conn.execute("VACUUM ANALYZE mailroom.suppressions")
    vacuum_analyze(conn)
    return cid


def timed(conn, sql: str | None, cid: int, runs: int) -> float:
    times = []
    for i in range(runs + 1):
        if sql is None:
            conn.execute("VACUUM mailroom.queue")
            t = time.perf_counter()
            with conn.transaction():
                conn.execute("SELECT mailroom.pause_campaign(%s)", (cid,))
                conn.execute("SELECT mailroom.resume_campaign(%s)", (cid,))
        else:
            t = time.perf_counter()
            conn.execute(sql).fetchall()
        if i:  # the first is a warm-up
            times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--history", type=int, default=200_000, help="older finished mails besides the campaign's")
    ap.add_argument("--campaign", type=int, default=200_000, help="the campaign's finished mails (LARGE)")
    ap.add_argument("--suppressions", type=int, default=49_000, help="older suppressions (LARGE)")
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    if args.quick:
        args.history, args.campaign, args.suppressions = args.history // 4, args.campaign // 4, args.suppressions // 4
    results: dict[str, dict[str, float]] = {}
    for size, (history, finished, suppressed) in (("small", (0, 500, 0)),
                                                   ("large", (args.history, args.campaign, args.suppressions))):
        with scratch_database(f"mailroom_bench_operator_reads_{size}") as url:
            with psycopg.connect(url, autocommit=True) as conn:
                t0 = time.perf_counter()
                cid = build(conn, history, finished, suppressed)
                counts = conn.execute(
                    "SELECT (SELECT count(*) FROM mailroom.contents), (SELECT count(*) FROM mailroom.queue),"
                    " (SELECT count(*) FROM mailroom.attempts WHERE finished_as IS NOT NULL),"
                    " (SELECT count(*) FROM mailroom.suppressions)").fetchone()
                print(f"{size}: {counts[0]:,} mails ({counts[1]:,} live, {counts[2]:,} finished),"
                      f" {counts[3]:,} suppressions, built in {time.perf_counter() - t0:.1f} s", flush=True)
                for label, sql in READS:
                    results.setdefault(label, {})[size] = timed(conn, sql, cid, args.runs)
    print(f"\n{'read':36} {'small ms':>9} {'large ms':>9} {'ratio':>6}  (median of {args.runs}; pass: <= {MAX_RATIO:g} x)")
    for label, _ in READS:
        small, large = results[label]["small"], results[label]["large"]
        ratio = large / small
        print(f"{label:36} {small:9.1f} {large:9.1f} {ratio:6.1f}  {'PASS' if ratio <= MAX_RATIO else 'FAIL'}")
    for label, _ in READS:
        small, large = results[label]["small"], results[label]["large"]
        target(f"{label}, large / small history <= {MAX_RATIO:g} x", f"{large / small:.2f} x"
               f" ({small:.1f} -> {large:.1f} ms)", large / small <= MAX_RATIO)


if __name__ == "__main__":
    main()
