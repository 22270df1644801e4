"""How long each page of the operator console (`mailroom web`) takes over a
large history.

Fills a scratch database with --history finished mails (the operator
benchmarks' fill, bench/_common.py:fill_history: 40 days of history and
20,000 overdue queued mails), a campaign of --campaign recipients half sent,
2,000 suppressions, 200 schedules and send-rate limits; then serves the
console as a login that holds mailroom_operator only and times every page
through Flask's WSGI test client (the server side: queries and templates;
no network), best of 3 after one warm-up. Target: every page under 300 ms.

    .venv/bin/python bench/console_pages.py            (1,000,000 mails of history)
    .venv/bin/python bench/console_pages.py --quick    (100,000)
"""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runner"))
from _common import bench_parser, fill_history, scratch_database, target, vacuum_analyze  # noqa: E402

from mailroom.web.console import create_app  # noqa: E402
from mailroom.web.console.auth import Accounts, hash_password  # noqa: E402
from mailroom.send.render import message_id  # noqa: E402

TARGET_MS = 300


def fill_console_extras(conn, campaign: int) -> None:
    conn.execute("SELECT mailroom.upsert_template('bench-news', 'News', 'Hello {{ name }}')")
    conn.execute(
        "SELECT mailroom.enqueue_campaign('bench-campaign', 'bench-news', %s, p_send_at => now() - interval '1 hour')",
        (f"SELECT g::text AS recipient_id, 'c' || g || '@example.net' AS email, '{{}}'::jsonb AS vars"
         f" FROM generate_series(1, {campaign}) g",))
    # Half of it sent within the last hour, as a runner would have left it.
    conn.execute(
        """
        WITH done AS (
          DELETE FROM mailroom.queue q
          WHERE q.id IN (SELECT c.id FROM mailroom.contents c WHERE c.campaign_id IS NOT NULL
                         ORDER BY c.id LIMIT %(n)s)
          RETURNING q.id, q.sender)
        INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finished_at,
                                       reported_at, reported, outcome, smtp_code, finished_as)
        SELECT d.id, 1, 'bench', gen_random_uuid(), t, t + interval '1 second', t + interval '1 second',
               'sent', 'sent', 250, 'sent'
        FROM done d, LATERAL (SELECT now() - random() * interval '1 hour' AS t) x
        """, {"n": campaign // 2})
    conn.execute("SELECT mailroom.suppress('s' || g || '@example.org', 'manual', 'bench') FROM generate_series(1, 2000) g")
    conn.execute(
        """
        SELECT mailroom.schedule_upsert('weekly-' || g, 'w' || g || '@example.org', '0 8 * * 1', 'Europe/Paris',
                                        'bench-news', '{}')
        FROM generate_series(1, 200) g
        """)
    conn.execute("SELECT mailroom.set_sender_limits('news', 50, 2000)")
    conn.execute("SELECT mailroom.set_domain_limits('example.com', 20, NULL)")
    conn.execute("SELECT mailroom.set_domain_limits('*', NULL, 600)")


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--history", type=int, default=1_000_000, help="finished mails in the history")
    ap.add_argument("--queued", type=int, default=20_000, help="queued, overdue mails")
    ap.add_argument("--campaign", type=int, default=100_000, help="recipients of one campaign")
    args = ap.parse_args()
    if args.quick:
        args.history, args.campaign = min(args.history, 100_000), min(args.campaign, 20_000)

    with scratch_database("mailroom_bench_console") as url:
        role = f"bench_console_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(url, autocommit=True) as conn:
            t0 = time.perf_counter()
            fill_history(conn, args.history, args.queued)
            fill_console_extras(conn, args.campaign)
            vacuum_analyze(conn)
            conn.execute(f'CREATE ROLE "{role}" LOGIN IN ROLE mailroom_operator')
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM mailroom.contents), (SELECT count(*) FROM mailroom.queue),"
                " (SELECT count(*) FROM mailroom.attempts)").fetchone()
            print(f"filled {counts[0]:,} mails ({counts[1]:,} live) and {counts[2]:,} ledger rows"
                  f" in {time.perf_counter() - t0:.1f} s")
            some = conn.execute("SELECT id, delivery_key, to_address FROM mailroom.contents"
                                " WHERE delivery_key = %s", (f"h-{args.history - 1234}",)).fetchone()
            # Message-IDs and recipients are looked for among the latest mail: a campaign's.
            recent = conn.execute("SELECT delivery_key, to_address, id FROM mailroom.contents"
                                  " WHERE campaign_id IS NOT NULL ORDER BY id DESC LIMIT 1 OFFSET 5000").fetchone()
        try:
            operator_url = re.sub(r"//[^@/]*@", f"//{role}@", url, count=1)
            app = create_app(operator_url, accounts=Accounts.parse(f"bench:{hash_password('bench')}", "bench"),
                             secret_key=os.urandom(32))
            client = app.test_client()
            page = client.get("/login").get_data(as_text=True)
            token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
            assert client.post("/login", data={"csrf_token": token, "username": "bench", "password": "bench"}
                               ).status_code == 302
            mid = message_id(recent[0], recent[2], "bench.invalid")
            pages = [
                ("overview", "/"),
                ("campaigns", "/campaigns"),
                ("review queue", "/review"),
                ("message by id", f"/messages/{some[0]}"),
                ("find by delivery key", f"/messages?q={some[1]}"),
                ("find by Message-ID", f"/messages?q={mid}"),
                ("find by recipient", f"/messages?q={recent[1]}"),
                ("find, no match (full scan)", "/messages?q=nobody@example.invalid"),
                ("suppressions", "/suppressions"),
                ("suppression search", "/suppressions?q=s1999"),
                ("schedules", "/schedules"),
                ("send rates", "/rates"),
            ]
            print(f"{'page':28} {'first ms':>9} {'best of 3 ms':>13} {'status':>7}")
            worst = ("", 0.0)
            for label, path in pages:
                times = []
                for _ in range(4):
                    t = time.perf_counter()
                    response = client.get(path)
                    response.get_data()
                    times.append((time.perf_counter() - t) * 1000)
                best = min(times[1:])
                print(f"{label:28} {times[0]:9.1f} {best:13.1f} {response.status_code:7}", flush=True)
                if response.status_code not in (200, 302):
                    print(f"FAIL: {label} answered {response.status_code}", file=sys.stderr)
                    sys.exit(1)
                worst = max(worst, (label, best), key=lambda x: x[1])
            print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())} (2 shared cores)")
            target(f"slowest console page over {args.history:,} mails of history ({worst[0]}) < {TARGET_MS} ms",
                   f"{worst[1]:.0f} ms", worst[1] < TARGET_MS)
            app.extensions["mailroom"]["db"].close()
        finally:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP OWNED BY "{role}"')
                conn.execute(f'DROP ROLE "{role}"')


if __name__ == "__main__":
    main()
