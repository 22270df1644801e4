"""Fault drills (issue 8): under faults and load, nothing lost, nothing silent.

Real `mailroom run` processes, a real aiosmtpd sink (mailroom.dev.sink.Sink) that
records every Message-ID it accepts, and the ledger as the judge. Every drill
ends with the same verdict (`judge`): the Message-IDs at the sink are exactly
those of the sent mail, every mail the sink got twice is listed by
duplicate_deliveries (no silent duplicate), the ledger never reports more
successful sends than the sink saw, and no message ever held two overlapping
leases.

1. SIGKILL one of 4 runners every few seconds during a drain, restarting it.
2. PostgreSQL crashes (pg_ctl -m immediate) mid-drain and is back after 5 s.
3. The SMTP server is down mid-drain.
4. The SMTP server takes twice the lease per mail.
5. 16 runners drain one queue.
6. Poisoned mail: a template that raises, an address always answered 4xx.
7. A transaction held open elsewhere during a drain.

`make test` runs them scaled down (about a minute and a half on two cores);
MAILROOM_DRILL_SCALE=full (what `make drill` sets) runs the issue's sizes:
20,000 and 50,000 mails, a 30 s SMTP outage, a 60 s transaction. Each drill
prints one `drill ...` line of figures (shown with pytest -s).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections import Counter

import psycopg
import pytest
from psycopg.rows import dict_row

from mailroom.send.render import message_id
from mailroom.dev.sink import Rule, Sink
from mailroom.net import free_port
from tests.conftest import connect
from tests.operatorkit import run as cli
from tests.runnerkit import MID_DOMAIN, RunnerProcess, enqueue, enqueue_many, statuses, wait_for

pytestmark = pytest.mark.drill

FULL = os.environ.get("MAILROOM_DRILL_SCALE", "").lower() == "full"


def scale(small, full):
    """The size `make test` runs, or the full one under MAILROOM_DRILL_SCALE=full."""
    return full if FULL else small


# Pairs of attempts of one message whose leases overlap, each lease taken as
# [claimed_at, finished_at) from the ledger, and the lease in flight (on the
# message until its ledger row is written) open-ended and last; for how many
# seconds they overlap (NULL: both still open).
OVERLAPPING_LEASES = """
WITH l AS (
  SELECT id, message_id, outcome, tstzrange(claimed_at, finished_at) AS lease  -- no end yet: unbounded
  FROM mailroom.attempts
  WHERE claimed_at IS NOT NULL  -- decisions without an attempt (cancelled, resolved) held no lease
  UNION ALL
  SELECT 9223372036854775807, m.id, NULL, tstzrange(m.claimed_at, NULL)
  FROM mailroom.messages m
  WHERE m.status = 'sending'
    AND NOT EXISTS (SELECT FROM mailroom.attempts o WHERE o.message_id = m.id AND o.lease_token = m.lease_token)
)
SELECT a.message_id, a.id AS first_attempt, a.outcome AS first_outcome, b.id AS second_attempt,
       CASE WHEN NOT upper_inf(a.lease * b.lease)
            THEN extract(epoch FROM upper(a.lease * b.lease) - lower(a.lease * b.lease))::float END AS seconds
FROM l a
JOIN l b ON b.message_id = a.message_id AND b.id > a.id
WHERE a.lease && b.lease
"""

class Fleet:
    """n `mailroom run` processes, worker names <name><i>.<generation>; one can
    be SIGKILLed and replaced by a fresh process."""

    def __init__(self, dsn: str, smtp: str, n: int, *args: str, name: str = "r"):
        self.dsn, self.smtp, self.args, self.name = dsn, smtp, args, name
        self.generation = [0] * n
        self.procs = [self._start(i) for i in range(n)]
        self.dead: list[RunnerProcess] = []

    def _start(self, i: int) -> RunnerProcess:
        return RunnerProcess(self.dsn, self.smtp, "--worker", f"{self.name}{i}.{self.generation[i]}",
                             "--poll-interval", "0.2", *self.args)

    def kill_and_restart(self, i: int) -> None:
        p = self.procs[i]
        p.signal(signal.SIGKILL)
        p.wait()
        self.dead.append(p)
        self.generation[i] += 1
        self.procs[i] = self._start(i)

    def running(self) -> bool:
        return all(p.proc.poll() is None for p in self.procs)

    def stop(self) -> list[int]:
        """SIGTERM to all (once each has installed its handlers), then their exit codes."""
        wait_for(lambda: all("runner.start" in p.log() for p in self.procs), timeout=30, what="runners started")
        for p in self.procs:
            if p.proc.poll() is None:
                p.signal(signal.SIGTERM)
        return [p.wait() for p in self.procs]

    def logs(self) -> list[str]:
        return [p.log() for p in self.procs]

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs + self.dead:
            p.close()


def wait_listening(conn, n: int) -> None:
    """Until n runners wait on LISTEN (started, connected, idle)."""
    wait_for(lambda: conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name LIKE 'mailroom-run%%' AND query ILIKE 'LISTEN%%'").fetchone()["n"] >= n,
        timeout=60, interval=0.2, what=f"{n} runners listening")


def sent_count(conn) -> int:
    return statuses(conn).get("sent", 0)


def judge(conn, received: Counter) -> dict:
    """The verdict every drill ends with; returns its figures."""
    sent = conn.execute("SELECT id, delivery_key FROM mailroom.messages WHERE status = 'sent'").fetchall()
    by_mid = {message_id(r["delivery_key"], r["id"], MID_DOMAIN): r["delivery_key"] for r in sent}
    missing, foreign = set(by_mid) - set(received), set(received) - set(by_mid)
    assert not missing and not foreign, (
        f"{len(missing)} mails sent by the ledger never reached the sink, {len(foreign)} at the sink are not sent")
    twice = {by_mid[m] for m, n in received.items() if n > 1}
    listed = {r["delivery_key"]: r["certainty"] for r in conn.execute(
        "SELECT delivery_key, certainty FROM mailroom.duplicate_deliveries")}
    silent = twice - set(listed)
    assert not silent, f"{len(silent)} silent duplicates (at the sink twice, not in duplicate_deliveries): {sorted(silent)[:5]}"
    confirmed = {k for k, c in listed.items() if c == "confirmed"}
    assert confirmed <= twice, f"confirmed duplicates the sink never got twice: {sorted(confirmed - twice)[:5]}"
    ledger = conn.execute(
        "SELECT c.id, c.delivery_key, count(*) FILTER (WHERE a.reported = 'sent')::int AS reported_sent,"
        " count(*) FILTER (WHERE a.outcome IS DISTINCT FROM 'released' AND a.attempt > 0)::int AS tries"
        " FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id GROUP BY 1, 2").fetchall()
    for row in ledger:
        copies = received.get(message_id(row["delivery_key"], row["id"], MID_DOMAIN), 0)
        assert row["reported_sent"] <= copies <= row["tries"], (row, copies)
    overlaps = conn.execute(OVERLAPPING_LEASES).fetchall()
    assert overlaps == [], f"{len(overlaps)} pairs of overlapping leases, e.g. {overlaps[:3]}"
    broken = conn.execute("SELECT problem, message_id, detail FROM mailroom.integrity_problems()").fetchall()
    assert broken == [], f"{len(broken)} broken invariants of contents/queue/ledger, e.g. {broken[:3]}"
    return {"sent": len(sent), "copies_at_sink": sum(received.values()), "duplicates_at_sink": len(twice),
            "listed_confirmed": len(confirmed), "listed_possible": len(listed) - len(confirmed),
            "attempts": sum(r["tries"] for r in ledger)}


def report(drill: str, **figures) -> None:
    print(f"\ndrill {drill}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))


def outcomes(conn) -> Counter:
    return Counter({r["outcome"]: r["n"] for r in conn.execute(
        "SELECT coalesce(outcome, 'in flight') AS outcome, count(*)::int AS n FROM mailroom.attempts GROUP BY 1")})


# 1 ---------------------------------------------------------------------------------------------

def test_drill_sigkill_a_runner_every_few_seconds(db_url, conn):
    total, every, min_kills = scale(2_000, 20_000), scale(1.0, 3.0), scale(3, 8)
    # The sink's time per mail bounds the drain from below (4 runners x 4
    # connections / delay), so the kills surely land in the middle of it.
    delay = scale(0.03, 0.02)
    # Each kill costs every mail of the killed runner's batch an attempt; on a
    # loaded machine a slow restart can be killed again before it reports, so
    # one mail may be hit more often than the default 5 attempts allow (seen:
    # 14 of 2,000 failed). Running out of attempts is not what this drill checks.
    enqueue_many(conn, "kill", total, max_attempts=20)
    kills = 0
    with Sink(delay=delay) as sink, Fleet(db_url, sink.url(), 4, "--concurrency", "4", "--batch", "50",
                                          "--lease", "3", name="k") as fleet:
        t0 = time.monotonic()
        next_kill, sent_at_last_kill = t0 + every, 0
        while (sent := sent_count(conn)) < total:
            assert time.monotonic() - t0 < scale(120, 600), f"not drained: {statuses(conn)}"
            # A kill waits for some mail to go out since the last one: on a
            # loaded machine a restart can take longer than `every`, and
            # kills on the clock alone would stop the drain altogether.
            if time.monotonic() >= next_kill and sent - sent_at_last_kill >= scale(50, 500):
                fleet.kill_and_restart(kills % 4)
                kills += 1
                next_kill, sent_at_last_kill = time.monotonic() + every, sent
            time.sleep(0.1)
        drained = time.monotonic() - t0
        assert fleet.running()
        assert fleet.stop() == [0, 0, 0, 0], fleet.logs()
        received = sink.accepted_ids()

    assert statuses(conn) == {"sent": total}
    assert kills >= min_kills
    figures = judge(conn, received)
    ledger = outcomes(conn)
    assert ledger["expired"] >= 1, "a SIGKILL leaves leases to expire"
    report("1 sigkill", mails=total, runners=4, kills=kills, seconds=round(drained, 1),
           expired_leases=ledger["expired"], stale_reports=ledger["stale"], **figures)


# 2 ---------------------------------------------------------------------------------------------

class App(threading.Thread):
    """An application enqueueing one mail per transaction and reconnecting
    whenever the database is away. `acked`: keys whose commit came back."""

    def __init__(self, url: str, prefix: str):
        super().__init__(daemon=True)
        self.url, self.prefix = url, prefix
        self.acked: list[str] = []
        self.unknown: list[str] = []  # the commit may or may not have happened
        self.halt = threading.Event()

    def run(self) -> None:
        conn, i = None, 0
        while not self.halt.is_set():
            key = None
            try:
                if conn is None:
                    conn = psycopg.connect(self.url, autocommit=True, connect_timeout=2)
                i += 1
                key = f"{self.prefix}-{i}"
                conn.execute("SELECT mailroom.enqueue(%s, 'Drill', 'Body', p_delivery_key => %s)",
                              (key + "@example.com", key))
                self.acked.append(key)
                self.halt.wait(0.01)
            except psycopg.Error:
                if key is not None:
                    self.unknown.append(key)
                if conn is not None:
                    conn.close()
                conn = None
                self.halt.wait(0.2)
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        self.halt.set()
        self.join(10)


def test_drill_postgres_crash_mid_drain(throwaway):
    quiet = lambda m: None  # noqa: E731
    throwaway.up(log=quiet)
    url, port = throwaway.url(), throwaway.port
    total, down_for = scale(2_000, 10_000), scale(2.0, 5.0)
    with connect(url) as c:
        # What production runs with (the embedded cluster trades it for speed):
        # a commit that returned is on disk.
        c.execute("ALTER DATABASE mailroom SET synchronous_commit = on")
    with connect(url) as c:
        c.execute("SELECT mailroom.cache_set('drill:' || g, to_jsonb(g), NULL) FROM generate_series(1, 100) g")
        assert c.execute("SELECT count(*)::int AS n FROM mailroom.cache").fetchone()["n"] == 100
        enqueue_many(c, "pg", total)

    app = App(url, "app")
    with Sink(delay=0.005) as sink, Fleet(url, sink.url(), 4, "--concurrency", "4", "--batch", "50",
                                          "--lease", "10", name="p") as fleet:
        app.start()
        wait_for(lambda: sink.stats()["received"] >= total // 3, timeout=scale(60, 300), interval=0.02,
                 what="a third of the mail delivered")
        throwaway.crash()
        crashed = time.monotonic()
        time.sleep(down_for)
        starting = time.monotonic()
        throwaway.up(deploy=False, log=quiet)  # crash recovery
        restarted = time.monotonic()
        assert throwaway.port == port, "the cluster came back on another port"
        acked_at_restart = len(app.acked)
        wait_for(lambda: len(app.acked) >= acked_at_restart + 20, timeout=30, what="the application writing again")
        app.stop()
        with connect(url) as c:
            wait_for(lambda: set(statuses(c)) == {"sent"}, timeout=scale(60, 300), interval=0.2,
                     what="every committed mail sent")
            recovered = time.monotonic() - restarted
        assert fleet.running(), "a runner died"
        # Each noticed, and each is back on its own (its next claim after a backoff of at most 10 s).
        back = lambda log: "db.down" in log and "db.up" in log.split("db.down", 1)[1]  # noqa: E731
        wait_for(lambda: all(back(log) for log in fleet.logs()), timeout=30, interval=0.5,
                 what="every runner back on the database")
        assert fleet.stop() == [0, 0, 0, 0]
        logs = fleet.logs()
        received = sink.accepted_ids()

    with connect(url) as c:
        keys = {r["delivery_key"] for r in c.execute("SELECT delivery_key FROM mailroom.messages")}
        lost = set(app.acked) - keys
        assert not lost, f"{len(lost)} committed mails lost: {sorted(lost)[:5]}"
        assert {k for k in keys if k.startswith("pg-")} == {f"pg-{i}" for i in range(1, total + 1)}
        figures = judge(c, received)
        # The cache is UNLOGGED: crash recovery empties it, and it works on.
        assert c.execute("SELECT count(*)::int AS n FROM mailroom.cache").fetchone()["n"] == 0
        assert c.execute("SELECT mailroom.cache_get('drill:1') AS v").fetchone()["v"] is None
        c.execute("SELECT mailroom.cache_set('drill:1', '\"warm again\"', '1 minute')")
        assert c.execute("SELECT mailroom.cache_get('drill:1') AS v").fetchone()["v"] == "warm again"
        ledger = outcomes(c)
    report("2 postgres crash", mails=len(keys), app_commits_acked=len(app.acked), app_commits_unknown=len(app.unknown),
           unknown_that_exist=len(set(app.unknown) & keys), down_seconds=round(restarted - crashed, 1),
           restart_seconds=round(restarted - starting, 1), drained_after_restart_seconds=round(recovered, 1),
           ledger=dict(ledger), **figures)


# 3 ---------------------------------------------------------------------------------------------

def smtp_state_changes(log: str) -> list[str]:
    """The runner's smtp.down / smtp.up lines, in order, as 'down' / 'up'."""
    return re.findall(r" smtp\.(down|up)\b", log)


def test_drill_smtp_server_down_mid_drain(db_url, conn):
    total, down_for = scale(1_000, 10_000), scale(3.0, 30.0)
    runners, concurrency = 4, 4
    conn.execute("SELECT mailroom.set_setting('retry_backoff_base', '1 second')")
    enqueue_many(conn, "smtp", total)
    port = free_port()
    with Fleet(db_url, f"smtp://127.0.0.1:{port}", runners, "--concurrency", str(concurrency), "--batch", "50",
               "--lease", "10", "--smtp-timeout", "5", name="s") as fleet:
        with Sink(port=port, delay=0.005) as before:
            wait_for(lambda: before.stats()["received"] >= total // 3, timeout=scale(60, 300), interval=0.02,
                     what="a third of the mail delivered")
        time.sleep(down_for)  # the server is down
        during = statuses(conn)
        with Sink(port=port, delay=0.005) as after:
            back = time.monotonic()
            wait_for(lambda: sent_count(conn) == total, timeout=scale(60, 300), interval=0.2,
                     what="everything sent after the outage")
            recovered = time.monotonic() - back
            assert fleet.stop() == [0] * runners
            logs = fleet.logs()
        received = before.accepted_ids() + after.accepted_ids()

    assert "failed" not in during, during
    assert statuses(conn) == {"sent": total}, "0 failed"
    figures = judge(conn, received)
    # One line per state change, not one per probe or per mail: what is
    # guaranteed is that every runner (all were sending) logged the outage,
    # that its downs and ups alternate, and that some runner saw it back. (A
    # runner whose probe backoff had not come round when the others finished
    # may still be down.) A second down after an up is a real second outage as
    # that runner saw it — on a loaded machine a connect to the new sink can
    # time out, or a probe can reach the old one while it closes — so the
    # count of downs is not fixed: v0.3.0's drill asserted exactly one each
    # and failed with [3, 1, 1, 1].
    for log in logs:
        changes = smtp_state_changes(log)
        assert changes[:1] == ["down"], log
        assert all(a != b for a, b in zip(changes, changes[1:])), changes  # down, up, down, ...
    assert any("up" in smtp_state_changes(log) for log in logs), logs
    assert sum(log.count("smtp.down") for log in logs) <= 100, "one line per state change, not per probe"
    ledger = outcomes(conn)
    retried = ledger["retry"] + ledger["ambiguous"]
    # Only sends in flight when it went down fail, and each thread's next one (its connect is
    # refused, which marks the server down); the rest are handed back unsent, not hammered.
    assert 1 <= retried <= 2 * runners * concurrency, ledger
    # Backoff: the next try of a retried mail came retry_backoff_base * 2^(attempt-1), jitter
    # halving at most, after the failure.
    early = conn.execute(
        """SELECT count(*)::int AS n FROM (
             SELECT a.outcome, a.attempt, a.finished_at,
                    lead(a.claimed_at) OVER (PARTITION BY a.message_id ORDER BY a.id) AS next_claimed_at
             FROM mailroom.attempts a) x
           WHERE x.outcome IN ('retry', 'ambiguous')
             AND x.next_claimed_at - x.finished_at < make_interval(secs => 0.5 * power(2, x.attempt - 1))""").fetchone()["n"]
    assert early == 0
    report("3 smtp down", mails=total, down_seconds=down_for, retried=retried, released=ledger["released"],
           drained_after_return_seconds=round(recovered, 1), **figures)


# 4 ---------------------------------------------------------------------------------------------

def test_drill_smtp_server_taking_twice_the_lease(db_url, conn):
    lease = 2.0  # the shortest a runner takes
    # Each runner claims more than its threads send at once: the rest waits in
    # its batch, under a lease that only extension keeps alive.
    runners, concurrency, batch, total = scale((2, 2, 4, 4), (4, 4, 10, 160))
    enqueue_many(conn, "slow", total)
    with Sink(delay=2 * lease) as sink, Fleet(db_url, sink.url(), runners, "--concurrency", str(concurrency),
                                              "--batch", str(batch), "--lease", str(lease), name="l") as fleet:
        t0 = time.monotonic()
        reclaimed = 0
        while sent_count(conn) < total:  # a reclaimer besides the runners, all the while
            assert time.monotonic() - t0 < scale(90, 300), f"not drained: {statuses(conn)}"
            reclaimed += conn.execute("SELECT mailroom.reclaim() AS n").fetchone()["n"]
            time.sleep(0.2)
        drained = time.monotonic() - t0
        assert fleet.stop() == [0] * runners
        received = sink.accepted_ids()

    assert reclaimed == 0
    figures = judge(conn, received)
    assert figures["duplicates_at_sink"] == 0 and figures["listed_possible"] == figures["listed_confirmed"] == 0
    assert outcomes(conn) == Counter(sent=total), "one attempt per mail, none expired"
    longest = conn.execute(
        "SELECT extract(epoch FROM max(finished_at - claimed_at))::float AS s FROM mailroom.attempts").fetchone()["s"]
    assert longest > 3 * lease, "some mail waited in its batch, under a lease extended several times"
    report("4 slow smtp", mails=total, runners=runners, lease_seconds=lease, seconds_per_mail=2 * lease,
           longest_claim_seconds=round(longest, 1), seconds=round(drained, 1), **figures)


# 5 ---------------------------------------------------------------------------------------------

def test_drill_sixteen_runners_never_overlap_leases(db_url, conn):
    total, runners, concurrency = scale(4_000, 50_000), scale(8, 16), scale(2, 4)
    with Sink() as sink, Fleet(db_url, sink.url(), runners, "--concurrency", str(concurrency), "--batch", "50",
                               "--lease", "60", name="m") as fleet:
        wait_listening(conn, runners)  # all of them compete from the first claim
        t0 = time.monotonic()
        enqueue_many(conn, "many", total)
        wait_for(lambda: sent_count(conn) == total, timeout=scale(120, 600), interval=0.5, what="the drain")
        drained = time.monotonic() - t0
        assert fleet.running()
        assert fleet.stop() == [0] * runners
        received = sink.accepted_ids()

    assert statuses(conn) == {"sent": total}
    figures = judge(conn, received)
    assert figures["duplicates_at_sink"] == 0 and figures["listed_possible"] == figures["listed_confirmed"] == 0
    per_worker = conn.execute(
        "SELECT count(DISTINCT worker)::int AS workers, count(DISTINCT lease_token)::int AS claims"
        " FROM mailroom.attempts").fetchone()
    assert per_worker["workers"] == runners
    report("5 sixteen runners", mails=total, runners=runners, claims=per_worker["claims"],
           seconds=round(drained, 1), per_second=round(total / drained), **figures)


def test_the_lease_check_sees_two_leases_at_once(conn):
    """The check drill 5 (and every verdict) relies on can fail: a second
    claim recorded while the first lease is still open is found."""
    enqueue_many(conn, "twice", 1)
    conn.execute("SELECT count(*) FROM mailroom.claim_batch('first', 1, '1 minute')")
    assert conn.execute(OVERLAPPING_LEASES).fetchall() == []
    # What a broken claim would leave behind: another attempt while the first is in flight.
    conn.execute("""INSERT INTO mailroom.attempts (message_id, attempt, worker, lease_token, claimed_at, finish_key)
                    SELECT id, 2, 'second', gen_random_uuid(), claimed_at + interval '1 second',
                           nextval('mailroom.attempts_id_seq')
                    FROM mailroom.queue WHERE status = 'sending'""")
    assert len(conn.execute(OVERLAPPING_LEASES).fetchall()) == 1


# 6 ---------------------------------------------------------------------------------------------

def test_drill_poisoned_mail_fails_and_the_rest_flows(db_url, conn):
    total, max_attempts = scale(300, 3_000), 3
    conn.execute("SELECT mailroom.set_setting('retry_backoff_base', '100 milliseconds')")
    conn.execute("SELECT mailroom.upsert_template('poison', 'Poison', 'One divided by zero: {{ n // 0 }}')")
    enqueue(conn, "poison-template@example.com", template="poison", vars={"n": 1},
            delivery_key="poison-template", max_attempts=max_attempts)
    enqueue(conn, "poison-4xx@example.com", subject="Busy", body_text="b",
            delivery_key="poison-4xx", max_attempts=max_attempts)
    enqueue_many(conn, "flow", total)
    busy = Rule(451, "4.2.1 Mailbox busy, try again later", stage="rcpt", rcpt_contains="poison-4xx@")
    with Sink(rules=[busy]) as sink, Fleet(db_url, sink.url(), 2, "--concurrency", "4", "--batch", "50",
                                           name="x") as fleet:
        wait_for(lambda: statuses(conn) == {"sent": total, "failed": 2}, timeout=scale(60, 120), interval=0.2,
                 what="the flow sent and both poisons failed")
        assert fleet.stop() == [0, 0]
        received, rejected = sink.accepted_ids(), sink.stats()["rejected"]

    figures = judge(conn, received)
    assert figures["sent"] == total and figures["duplicates_at_sink"] == 0
    ledger = {r["delivery_key"]: r for r in conn.execute(
        """SELECT m.delivery_key, m.status, m.status_reason, m.attempts, m.last_error,
                  array_agg(a.outcome ORDER BY a.id) AS outcomes, array_agg(a.smtp_code ORDER BY a.id) AS codes
           FROM mailroom.messages m JOIN mailroom.attempts a ON a.message_id = m.id
           WHERE m.delivery_key LIKE 'poison-%%' GROUP BY 1, 2, 3, 4, 5""")}
    # Always answered 4xx: retried with backoff until max_attempts, then failed.
    busy_row = ledger["poison-4xx"]
    assert busy_row["status"] == "failed" and busy_row["status_reason"] == "attempts exhausted"
    assert busy_row["attempts"] == max_attempts and busy_row["codes"] == [451] * max_attempts
    assert busy_row["outcomes"] == ["retry"] * max_attempts, busy_row
    assert "4.2.1" in busy_row["last_error"]
    assert rejected == {"451": max_attempts}
    # A template that raises cannot render better next time: failed at its first attempt.
    tpl_row = ledger["poison-template"]
    assert tpl_row["status"] == "failed" and tpl_row["attempts"] == 1 and tpl_row["outcomes"] == ["failed"]
    assert "render" in tpl_row["last_error"] and "ZeroDivisionError" in tpl_row["last_error"], tpl_row
    report("6 poison", mails=total, poison_4xx_attempts=busy_row["attempts"],
           poison_template_attempts=tpl_row["attempts"], **figures)


# 7 ---------------------------------------------------------------------------------------------

def _warnings(dsn: str) -> dict[str, str]:
    code, out, err = cli("status", "--dsn", dsn)
    assert code == 0, err
    lines = out.split("\nWARNINGS\n", 1)[1].splitlines()
    return {line[2:].split(":", 1)[0]: line for line in lines if line.startswith("! ")}


def test_drill_a_transaction_held_open_during_a_drain(db_url, conn):
    hold, warn_after, backlog = scale(6.0, 60.0), scale(2, 30), scale(1_000, 10_000)
    conn.execute("SELECT mailroom.set_setting('lease_warning_after', %s)", [f"{warn_after} seconds"])
    locked = enqueue_many(conn, "locked", 1)[0]
    holder = psycopg.connect(db_url, row_factory=dict_row)
    holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    holder.execute("SELECT count(*) FROM mailroom.messages")  # a snapshot: the xmin horizon stays here
    holder.execute("SELECT q.id FROM mailroom.queue q JOIN mailroom.contents c USING (id)"
                   " WHERE c.delivery_key = %s FOR UPDATE OF q", [locked])
    pid = holder.info.backend_pid
    opened = time.monotonic()
    enqueue_many(conn, "backlog", backlog)
    trickled: list[tuple[float, list[str]]] = []
    try:
        with Sink(delay=0.002) as sink, Fleet(db_url, sink.url(), 4, "--concurrency", "4", "--batch", "50",
                                              name="t") as fleet:
            warned = None
            while time.monotonic() - opened < hold:
                trickled.append((time.monotonic(), enqueue_many(conn, f"trickle{len(trickled)}", 10)))
                if warned is None and time.monotonic() - opened > warn_after + 1:
                    warned = _warnings(db_url)
                time.sleep(0.5)
            # Still inside the transaction: claims went on stepping over its locked row.
            due = [k for at, keys in trickled if at < time.monotonic() - 3 for k in keys]
            wait_for(lambda: sent_count(conn) >= backlog + len(due), timeout=10,
                     what="the backlog and the trickle sent while the transaction is open")
            held = conn.execute("SELECT backend_xmin IS NOT NULL AS pinned, state FROM pg_stat_activity WHERE pid = %s",
                                [pid]).fetchone()
            assert held == {"pinned": True, "state": "idle in transaction"}
            assert statuses(conn)["queued"] >= 1
            assert conn.execute("SELECT status, attempts FROM mailroom.messages WHERE delivery_key = %s",
                                [locked]).fetchone() == {"status": "queued", "attempts": 0}
            held_for = time.monotonic() - opened
            holder.commit()
            total = backlog + 1 + sum(len(keys) for _, keys in trickled)
            wait_for(lambda: sent_count(conn) == total, timeout=30, what="everything sent after the commit")
            after = _warnings(db_url)
            assert fleet.stop() == [0, 0, 0, 0]
            received = sink.accepted_ids()
    finally:
        holder.close()

    assert warned is not None and "xmin_horizon" in warned, warned
    assert f"pid {pid} " in warned["xmin_horizon"], warned
    assert "xmin_horizon" not in after and "long_transaction" not in after, after
    assert statuses(conn) == {"sent": total}
    figures = judge(conn, received)
    report("7 held transaction", mails=total, held_seconds=round(held_for, 1),
           warned_about=warned["xmin_horizon"].split(" back: ", 1)[1].split(". ", 1)[0],
           **figures)


# 8 ---------------------------------------------------------------------------------------------

def _partition(received: Counter, conn) -> Counter:
    """The sink's copies of the mail this database sent (Message-IDs name the mail's id and key)."""
    ids = {message_id(r["delivery_key"], r["id"], MID_DOMAIN)
           for r in conn.execute("SELECT id, delivery_key FROM mailroom.messages")}
    return Counter({m: n for m, n in received.items() if m in ids})


def test_drill_a_shards_postgresql_killed_mid_drain(db_url, conn, throwaway):
    """One runner over two databases on two PostgreSQL servers; the second
    server crashes (pg_ctl stop -m immediate) in the middle of its drain.
    The first database's mail all goes while the second is down, the runner
    says which database is down, the second resumes once its server is back:
    every mail sent, none lost, every copy the sink got twice listed."""
    per_db = scale(600, 10_000)
    throwaway.up(log=lambda m: None)  # its own cluster, the plan deployed by Sqitch
    other_url = throwaway.url()
    with connect(other_url) as b:
        enqueue_many(b, "b", per_db, max_attempts=20)
    enqueue_many(conn, "a", per_db, max_attempts=20)
    label = f"127.0.0.1:{throwaway.port}/mailroom"
    with Sink(delay=0.02) as sink, RunnerProcess(db_url, sink.url(), "--dsn", other_url, "--lease", "3",
                                                  "--poll-interval", "0.2", "--concurrency", "4",
                                                  "--batch", "20") as r:
        with connect(other_url) as b:
            wait_for(lambda: sent_count(b) >= per_db // 10, timeout=120, what="the second database sending")
            sent_before = sent_count(b)
        throwaway.crash()
        wait_for(lambda: f"database={label}" in r.log() and "db.down" in r.log(), timeout=60,
                 what="db.down for the crashed database")
        wait_for(lambda: sent_count(conn) == per_db, timeout=scale(120, 600),
                 what="the first database drained while the second is down")
        assert r.proc.poll() is None, r.log()
        throwaway.up(deploy=False, log=lambda m: None)
        with connect(other_url) as b:
            wait_for(lambda: sent_count(b) == per_db, timeout=scale(180, 900),
                     what="the second database drained once back")
        wait_for(lambda: re.search(rf"db\.up .*database={re.escape(label)}", r.log()), timeout=30,
                 what="db.up for it")
        assert r.stop(timeout=60) == 0, r.log()
        received = sink.accepted_ids()

    with connect(other_url) as b:
        assert statuses(b) == {"sent": per_db}
        received_b = _partition(received, b)
        figures_b = judge(b, received_b)
    received_a = _partition(received, conn)
    assert statuses(conn) == {"sent": per_db}
    figures_a = judge(conn, received_a)
    assert sum(received_a.values()) + sum(received_b.values()) == sum(received.values()), \
        "copies at the sink that neither database sent"
    report("8 shard killed", mails=2 * per_db, sent_by_b_before_the_crash=sent_before,
           **{f"a_{k}": v for k, v in figures_a.items()}, **{f"b_{k}": v for k, v in figures_b.items()})
