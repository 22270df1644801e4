"""The rate limiter under concurrency: 8 connections x 1,000 hits on one key.

Each call records the p_now the function judged it by (now(), the default,
selected in the same statement), so the checks below read the limiter's own
clock, not the test's."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import psycopg
import pytest

from mailroom.client.ratelimit import rate_limit

LIMIT = 100
WINDOW = timedelta(seconds=1)


def hammer(db_url: str, fn: str, key: str, connections: int = 8, hits: int = 1000):
    """Every connection calls fn `hits` times as fast as it can; returns the
    p_now of every allowed call and the number of calls."""
    start = threading.Barrier(connections)
    allowed: list = []
    lock = threading.Lock()
    errors = []

    def worker():
        try:
            with psycopg.connect(db_url, autocommit=True) as c:
                sql = f"SELECT r.allowed, now() FROM mailroom.{fn}(%s, %s, %s) AS r"
                mine = []
                start.wait()
                for _ in range(hits):
                    ok, at = c.execute(sql, (key, LIMIT, WINDOW)).fetchone()
                    if ok:
                        mine.append(at)
                with lock:
                    allowed.extend(mine)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return sorted(allowed)


def test_fixed_window_never_allows_more_than_the_limit_per_window(db_url):
    allowed = hammer(db_url, "rate_limit", "api:tenant-1")
    per_window = Counter(int(at.timestamp()) for at in allowed)  # 1 s windows aligned to the epoch
    assert max(per_window.values()) == LIMIT, per_window
    # The limiter is not trivially denying: every full window it saw reached the limit.
    full = sorted(per_window)[1:-1]  # first and last windows are partial
    assert all(per_window[w] == LIMIT for w in full), per_window
    assert len(allowed) >= LIMIT


def test_sliding_window_never_allows_more_than_the_limit_in_any_span(db_url):
    allowed = hammer(db_url, "rate_limit_sliding", "api:tenant-2")
    assert len(allowed) >= LIMIT, f"only {len(allowed)} allowed"
    # Any LIMIT + 1 consecutive grants must be spread over more than a window.
    for i in range(len(allowed) - LIMIT):
        span = allowed[i + LIMIT] - allowed[i]
        assert span > WINDOW, f"{LIMIT + 1} grants within {span} (from {allowed[i]})"
    # ... and it still lets the limit through in one window's time.
    spans = [allowed[i + LIMIT - 1] - allowed[i] for i in range(len(allowed) - LIMIT + 1)]
    assert min(spans) < WINDOW, f"{LIMIT} grants never fit in one window: {min(spans)}"


def test_the_caller_chooses_fail_open_or_fail_closed(db_url):
    c = psycopg.connect(db_url, autocommit=True)
    # an hour's sliding window: a fixed 1 s window lets the second call
    # through whenever the two calls straddle a second on a busy machine
    assert rate_limit(c, "k", 1, 3600, on_error="deny", sliding=True).allowed is True
    assert rate_limit(c, "k", 1, 3600, on_error="deny", sliding=True).allowed is False
    c.close()  # the database is unreachable now
    opened = rate_limit(c, "k", 1, 1, on_error="allow")
    closed = rate_limit(c, "k", 1, 1, on_error="deny")
    assert (opened.allowed, opened.degraded) == (True, True)
    assert (closed.allowed, closed.degraded) == (False, True)
    with pytest.raises(TypeError):
        rate_limit(c, "k", 1, 1)  # no silent default


def test_bad_arguments_raise_whatever_the_policy(conn):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="limit: must be at least 1"):
        rate_limit(conn, "k", 0, 1, on_error="allow")


def test_a_failed_call_inside_a_transaction_leaves_it_usable(db_url):
    with psycopg.connect(db_url) as c:
        c.execute("SELECT 1")
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            rate_limit(c, "mailroom/x", 1, 1, on_error="allow", sliding=True)
        assert c.execute("SELECT 2").fetchone() == (2,)
