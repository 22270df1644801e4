"""A stray advisory lock on the wake-up handshake's keys cannot stall the
runner (issue 13, item 4, the runner's side): runner_waiting and
enqueues_settled run on a connection whose lock_timeout is 200 ms, so the
runner falls back to polling and goes on delivering. (v0.3.0 waited on the
lock for ever in its main loop: no more claims, and a SIGTERM was never acted on.)"""

from __future__ import annotations

import time

from mailroom.dev.sink import Sink
from tests.conftest import connect
from tests.runnerkit import RunnerProcess, enqueue, statuses, wait_for

WAITING_KEY = (1835100525, 2)  # deploy/runner_waiting.sql: the lock runners hold while waiting


def test_a_stray_lock_on_the_waiting_key_does_not_stall_the_runner(db_url, conn):
    with connect(db_url) as stray, Sink() as sink:
        # An exclusive hold blocks runner_waiting(true)'s shared one.
        stray.execute("SELECT pg_advisory_lock(%s, %s)", WAITING_KEY)
        with RunnerProcess(db_url, sink.url(), "--poll-interval", "0.5", "--grace", "2") as r:
            wait_for(lambda: "runner.start" in r.log(), what="the runner started")
            time.sleep(1.0)  # it has found the queue empty and tried to say it waits
            enqueue(conn, "late@example.com", subject="s", body_text="b")
            wait_for(lambda: statuses(conn) == {"sent": 1}, timeout=15, what="the mail sent despite the lock")
            assert r.stop(timeout=30) == 0, r.log()  # the stray lock is still held
        stray.execute("SELECT pg_advisory_unlock(%s, %s)", WAITING_KEY)
    assert sink.stats()["received"] == 1
