"""Recovery drills (issue 5): real runner processes, a real aiosmtpd sink that
records every Message-ID it accepts, and the operator views as the judge.

1. Runners stopped for a while: overdue mail drains in bounded batches.
2. SIGKILL after claim, before send: the lease expires, another runner sends;
   nothing lost, nothing twice.
3. SIGKILL after the sink accepted, before the outcome was recorded: retry
   mail is sent again and shows in duplicate_deliveries; review mail waits in
   review_queue and is not resent.
4. The same delivery key enqueued twice, and late stale outcomes: one
   message; the ledger shows the replay.

Leases are 2 s and runners reclaim every second, so the file runs in seconds.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import threading
import time
from collections import Counter

from aiosmtpd.controller import Controller

from tests.runnerkit import RunnerProcess, enqueue_many, runners_message_id, wait_for
from tests.operatorkit import run as cli

_MESSAGE_ID = re.compile(rb"^Message-ID:[ \t]*(.*?)\r?$", re.I | re.M)


class RecordingSink:
    """An SMTP server that records each accepted Message-ID the moment the
    body is in. With hold_first > 0 it then waits that long before answering
    the first copy of each Message-ID: the mail is accepted, but the sender
    does not know yet (the window in which a crash leaves the outcome unproven)."""

    def __init__(self, hold_first: float = 0.0):
        self.hold_first = hold_first
        self.accepted: Counter[str] = Counter()
        self.lock = threading.Lock()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port, ready_timeout=10)

    async def handle_DATA(self, server, session, envelope):
        head = envelope.original_content.split(b"\r\n\r\n", 1)[0]
        found = _MESSAGE_ID.search(head)
        mid = found.group(1).strip().decode() if found else ""
        with self.lock:
            first = self.accepted[mid] == 0
            self.accepted[mid] += 1
        if first and self.hold_first:
            await asyncio.sleep(self.hold_first)
        return "250 2.0.0 accepted"

    def count(self) -> int:
        with self.lock:
            return sum(self.accepted.values())

    def copies(self, conn, delivery_key: str) -> int:
        mid = runners_message_id(conn, delivery_key)
        with self.lock:
            return self.accepted[mid]

    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def __enter__(self) -> "RecordingSink":
        self.controller.start()
        return self

    def __exit__(self, *exc) -> None:
        self.controller.stop()


class BlackHole:
    """Accepts TCP connections and never says a word: an SMTP client waits for
    the greeting, so a runner pointed here has claimed but cannot send."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)

    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.sock.getsockname()[1]}"

    def __enter__(self) -> "BlackHole":
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()


def runner(db_url: str, smtp: str, worker: str, *extra: str) -> RunnerProcess:
    return RunnerProcess(db_url, smtp, "--worker", worker, "--lease", "2", "--poll-interval", "0.2",
                         "--smtp-timeout", "30", "--grace", "5", *extra)


def count(conn, sql: str, *params) -> int:
    return conn.execute(f"SELECT count(*)::int AS n FROM ({sql}) q", params).fetchone()["n"]


def status_of(conn, keys: list[str]) -> Counter[str]:
    rows = conn.execute("SELECT status FROM mailroom.messages WHERE delivery_key = ANY(%s)", (keys,)).fetchall()
    return Counter(r["status"] for r in rows)


def test_overdue_mail_drains_in_bounded_batches_after_an_outage(db_url, conn):
    with RecordingSink() as sink:
        with runner(db_url, sink.url(), "before", "--batch", "5") as r:
            early = enqueue_many(conn, "early", 3)
            wait_for(lambda: status_of(conn, early)["sent"] == 3, what="the first mails sent")
            r.signal(signal.SIGTERM)
            assert r.wait() == 0, r.log()

        # The outage: mail piles up and becomes overdue.
        backlog = enqueue_many(conn, "backlog", 40, due_ago="1 minute")
        assert count(conn, "SELECT * FROM mailroom.overdue") == 40
        code, out, err = cli("status", "--dsn", db_url, "--json")
        assert code == 0, err
        queued = next(q for q in json.loads(out)["queue"] if q["status"] == "queued")
        assert queued["due"] == 40 and queued["oldest_due_age"] >= 60

        with runner(db_url, sink.url(), "after", "--batch", "5", "--concurrency", "4") as r:
            wait_for(lambda: status_of(conn, backlog)["sent"] == 40, timeout=30, what="the backlog drained")
            r.stop()

    assert count(conn, "SELECT * FROM mailroom.overdue") == 0
    # One lease token per claim: no claim took more than --batch.
    claims = conn.execute(
        "SELECT lease_token, count(*)::int AS n FROM mailroom.attempts WHERE worker = 'after' GROUP BY 1").fetchall()
    assert max(c["n"] for c in claims) <= 5
    assert sum(c["n"] for c in claims) == 40 and len(claims) >= 8
    assert sink.count() == 43 and all(sink.copies(conn, k) == 1 for k in early + backlog)


def test_sigkill_after_claim_before_send(db_url, conn):
    keys = enqueue_many(conn, "k", 6)
    with BlackHole() as hole, runner(db_url, hole.url(), "doomed", "--batch", "10", "--concurrency", "2") as r:
        wait_for(lambda: count(conn, "SELECT * FROM mailroom.messages WHERE worker = 'doomed' AND status = 'sending'") == 6,
                 what="the doomed runner's claim")
        r.signal(signal.SIGKILL)
        r.wait()
    assert status_of(conn, keys) == Counter(sending=6)

    with RecordingSink() as sink, runner(db_url, sink.url(), "rescuer") as r:
        wait_for(lambda: status_of(conn, keys)["sent"] == 6, timeout=20, what="the rescuer sending all six")
        r.stop()

    assert sink.count() == 6 and all(sink.copies(conn, k) == 1 for k in keys), "0 lost, 0 duplicates at the sink"
    ledger = conn.execute(
        "SELECT c.delivery_key, array_agg(a.worker || ':' || a.outcome ORDER BY a.id) AS a"
        " FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id GROUP BY 1").fetchall()
    assert all(row["a"] == ["doomed:expired", "rescuer:sent"] for row in ledger), ledger
    # The ledger cannot know the doomed runner never sent: it says "possible", never "confirmed".
    dupes = conn.execute("SELECT certainty, count(*)::int AS n FROM mailroom.duplicate_deliveries GROUP BY 1").fetchall()
    assert dupes == [{"certainty": "possible", "n": 6}]
    assert count(conn, "SELECT * FROM mailroom.expired_leases WHERE worker = 'doomed' AND reclaimed") == 6


def test_sigkill_after_the_sink_accepted_before_the_outcome(db_url, conn):
    bulk = enqueue_many(conn, "bulk", 3, on_ambiguous="retry")
    careful = enqueue_many(conn, "careful", 3, on_ambiguous="review")
    with RecordingSink(hold_first=60) as sink:
        with runner(db_url, sink.url(), "doomed", "--concurrency", "6", "--smtp-timeout", "90") as r:
            wait_for(lambda: sink.count() == 6, what="all six accepted by the sink (answers held back)")
            r.signal(signal.SIGKILL)
            r.wait()
        assert status_of(conn, bulk + careful) == Counter(sending=6)

        with runner(db_url, sink.url(), "rescuer") as r:
            wait_for(lambda: status_of(conn, bulk)["sent"] == 3 and status_of(conn, careful)["review"] == 3,
                     timeout=20, what="retry mail resent and review mail held")
            time.sleep(1.0)  # several more claim/reclaim rounds: review mail must stay put
            r.stop()

    # retry: sent again; the recipient has two copies and the ledger says so.
    assert [sink.copies(conn, k) for k in bulk] == [2, 2, 2]
    dupes = conn.execute("SELECT delivery_key, certainty, reports FROM mailroom.duplicate_deliveries ORDER BY 1").fetchall()
    assert dupes == [{"delivery_key": k, "certainty": "possible", "reports": ["-/expired", "sent/sent"]} for k in bulk]
    # review: one copy, waiting for a human, never claimed again.
    assert [sink.copies(conn, k) for k in careful] == [1, 1, 1]
    assert status_of(conn, careful) == Counter(review=3)
    review = conn.execute("SELECT delivery_key, last_worker, last_outcome FROM mailroom.review_queue ORDER BY 1").fetchall()
    assert review == [{"delivery_key": k, "last_worker": "doomed", "last_outcome": "expired"} for k in careful]
    assert count(conn, "SELECT * FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id"
                       " WHERE a.worker = 'rescuer' AND c.delivery_key LIKE 'careful%%'") == 0

    # The operator knows the sink has them (Message-IDs) and settles them as sent.
    for k in careful:
        mid = conn.execute("SELECT id FROM mailroom.messages WHERE delivery_key = %s", (k,)).fetchone()["id"]
        code, out, err = cli("review", "resolve", "--dsn", db_url, str(mid), "sent")
        assert code == 0, err
    assert status_of(conn, careful) == Counter(sent=3)
    assert count(conn, "SELECT * FROM mailroom.review_queue") == 0


def test_replayed_key_and_late_stale_outcomes(db_url, conn):
    first = conn.execute("SELECT mailroom.enqueue('a@example.com', 'Order 1', 'B', p_delivery_key => 'order-1') AS id").fetchone()["id"]
    again = conn.execute("SELECT mailroom.enqueue('a@example.com', 'Order 1 (retry by the app)', 'B2', p_delivery_key => 'order-1') AS id").fetchone()["id"]
    assert first == again
    assert conn.execute("SELECT count(*)::int AS n, min(subject) AS s FROM mailroom.messages WHERE delivery_key = 'order-1'").fetchone() == {
        "n": 1, "s": "Order 1"}
    # A runner (here: a plain session) claims order-1 and hangs past its lease.
    ghost1 = conn.execute("SELECT id, lease_token FROM mailroom.claim_batch('ghost', 1, '2 seconds')").fetchone()
    conn.execute("SELECT mailroom.enqueue('b@example.com', 'Invoice', 'B', p_delivery_key => 'invoice-1', p_on_ambiguous => 'review')")
    ghost2 = conn.execute("SELECT id, lease_token FROM mailroom.claim_batch('ghost', 1, '2 seconds')").fetchone()

    with RecordingSink() as sink, runner(db_url, sink.url(), "live") as r:
        wait_for(lambda: status_of(conn, ["order-1"])["sent"] == 1 and status_of(conn, ["invoice-1"])["review"] == 1,
                 timeout=20, what="order-1 resent, invoice-1 in review")
        # The ghost wakes up and reports both as sent, long after losing the leases.
        late = conn.execute(
            "SELECT mailroom.mark_outcome(%s, %s, 'sent') AS a, mailroom.mark_outcome(%s, %s, 'sent') AS b",
            (ghost1["id"], ghost1["lease_token"], ghost2["id"], ghost2["lease_token"])).fetchone()
        time.sleep(0.5)
        r.stop()

    assert late == {"a": False, "b": False}, "stale tokens: nothing applied as a live outcome"
    ledger = conn.execute(
        """SELECT c.delivery_key, a.worker, a.reported, a.outcome, a.duplicate
           FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id
           ORDER BY c.delivery_key, a.id""").fetchall()
    assert [tuple(r.values()) for r in ledger] == [
        ("invoice-1", "ghost", "sent", "stale", False),   # settled the review: no resend
        ("order-1", "ghost", "sent", "stale", True),      # the replay: a second successful send on record
        ("order-1", "live", "sent", "sent", False),
    ]
    assert status_of(conn, ["invoice-1"]) == Counter(sent=1) and sink.copies(conn, "invoice-1") == 0
    assert sink.copies(conn, "order-1") == 1
    assert conn.execute("SELECT delivery_key, certainty FROM mailroom.duplicate_deliveries").fetchall() == [
        {"delivery_key": "order-1", "certainty": "confirmed"}]
    code, out, err = cli("inspect", "--dsn", db_url, "--json", "order-1")
    assert code == 0 and json.loads(out)["successful_sends"] == 2
