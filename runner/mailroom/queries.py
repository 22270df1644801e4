"""Every SQL statement the runner sends, as named calls to mailroom's functions.

The runner makes no queue decisions: claiming, retry policy, backoff, leases
and reclaiming all live in the stored functions. Each call here is one
statement on an autocommit connection, so no transaction is ever held open
across an SMTP conversation.

Database errors are translated here, in one place:
- `DatabaseUnavailable`: the connection is gone or cannot be had (reconnect
  with backoff, keep outcomes in memory);
- `QueryError`: the database answered with an error (its SQLSTATE is kept).
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
from psycopg import sql
import psycopg_pool
from psycopg.types.json import Jsonb
from psycopg.types.string import TextLoader

CHANNEL = "mailroom"


class DatabaseUnavailable(Exception):
    """The database cannot be reached right now; try again later."""


class QueryError(Exception):
    """The database refused a call (bad input, missing function, no privilege)."""

    def __init__(self, message: str, sqlstate: str | None):
        super().__init__(message)
        self.sqlstate = sqlstate


def translate(e: BaseException) -> Exception:
    """Map a psycopg / psycopg_pool exception to the package's own."""
    if isinstance(e, (psycopg.OperationalError, psycopg_pool.PoolTimeout, psycopg.InterfaceError)):
        return DatabaseUnavailable(first_line(e))
    if isinstance(e, psycopg.Error):
        sqlstate = e.diag.sqlstate if e.diag else None
        msg = (e.diag.message_primary if e.diag and e.diag.message_primary else str(e)).strip()
        return QueryError(f"{msg} (SQLSTATE {sqlstate})", sqlstate)
    return e  # not ours to translate


def first_line(e: BaseException) -> str:
    """The error's first line, without CONTEXT / query text."""
    diag = getattr(e, "diag", None)
    msg = diag.message_primary if diag is not None and diag.message_primary else str(e)
    lines = [l for l in msg.strip().splitlines() if l.strip()]
    return (lines[0].strip() if lines else type(e).__name__)[:300]


def _call(target: psycopg_pool.ConnectionPool | psycopg.Connection, query: str, params: dict | None = None,
          *, timeout: float = 2.0, as_text: tuple[str, ...] = ()):
    """Run one statement on a connection from the pool, or on the given
    connection (the completer writes outcomes and its on_flush on one).
    as_text: types (by name) whose values come back as their text, unparsed."""
    try:
        if isinstance(target, psycopg.Connection):
            return _execute(target, query, params, as_text)
        with target.connection(timeout=timeout) as conn:
            return _execute(conn, query, params, as_text)
    except (psycopg.Error, psycopg_pool.PoolTimeout) as e:
        raise translate(e) from e


def _execute(conn: psycopg.Connection, query: str, params: dict | None, as_text: tuple[str, ...]) -> list:
    # Through a transaction-mode pooler the session's settings are not ours:
    # the connection carries SET LOCALs that go with each call, in the same
    # query string, so they hold for its implicit transaction (database.py).
    per_call = getattr(conn, "_mailroom_per_call", None)
    with conn.cursor() as cur:
        for type_name in as_text:
            cur.adapters.register_loader(type_name, TextLoader)  # this cursor only
        if per_call is None:
            cur.execute(query, params)
        else:
            cur.execute(per_call + query, params)
            while cur.nextset():  # the SETs' results first, the call's last
                pass
        # rownumber is None without rows to fetch (description, the usual
        # test, builds a Column object per field on every call).
        return cur.fetchall() if cur.rownumber is not None else []


def _seconds(v: float | timedelta) -> timedelta:
    return v if isinstance(v, timedelta) else timedelta(seconds=float(v))


# -- runner calls -------------------------------------------------------------------


# The functions a runner calls: a role that cannot execute one of them is
# refused at start (exit code 4) rather than failing on its first report.
RUNNER_FUNCTIONS = ("claim_batch", "mark_outcomes", "extend_lease", "release", "reclaim",
                    "get_templates", "send_rate_retry_after", "runner_waiting", "enqueues_settled",
                    "stream_settings")


def missing_runner_functions(pool) -> list[str]:
    """The runner functions this role cannot execute (missing, or no EXECUTE
    privilege), by name: signatures change between releases, names do not."""
    return missing_functions(pool, RUNNER_FUNCTIONS)


def missing_functions(pool, names) -> list[str]:
    """Those of the mailroom functions `names` this role cannot execute, in order."""
    rows = _call(
        pool,
        "SELECT f.name FROM unnest(%(names)s::text[]) AS f(name)"
        " WHERE NOT EXISTS (SELECT FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        "                   WHERE n.nspname = 'mailroom' AND p.proname = f.name"
        "                     AND has_schema_privilege(n.oid, 'USAGE')"
        "                     AND has_function_privilege(p.oid, 'EXECUTE'))"
        " ORDER BY 1",
        {"names": list(names)},
    )
    return [r["name"] for r in rows]


def reclaim(pool) -> int:
    """Expired leases back to queued (or review/failed, as the SQL decides)."""
    return _call(pool, "SELECT mailroom.reclaim() AS n")[0]["n"]


def claim_batch(pool, worker: str, limit: int, lease: float | timedelta, sender: str | None) -> list[dict]:
    """Lease up to `limit` due messages for this worker (one lease token per batch).

    `headers` and `template_vars` come as their JSON text: each mail's are
    parsed only where that mail is built (render.read_json_columns). A claim
    then parses no JSON (a sixth of a null:// runner's CPU went to it, for
    mail never built), and a value Python's json cannot read (nested deeper
    than its recursion limit) fails its own mail instead of the whole claim.
    `leased_until` comes as text too: the runner keeps its own (monotonic)
    lease clock and never reads it, and making datetimes of it was a third
    of what the rest of the rows cost to load. So does `lease_token`: the
    runner only groups rows by it and hands it back (extend_lease, release,
    mark_outcomes take its text), and a str hashes and compares in C where a
    uuid.UUID does it in Python, for every row."""
    return _call(
        pool,
        "SELECT * FROM mailroom.claim_batch(p_worker => %(worker)s, p_limit => %(limit)s,"
        " p_lease => %(lease)s, p_sender => %(sender)s)",
        {"worker": worker, "limit": limit, "lease": _seconds(lease), "sender": sender},
        as_text=("jsonb", "timestamptz", "uuid"),
    )


def stream_settings(pool) -> dict[str, bool]:
    """Each stream and whether its mail carries unsubscribe headers."""
    rows = _call(pool, "SELECT name, unsubscribe_headers FROM mailroom.stream_settings()")
    return {r["name"]: r["unsubscribe_headers"] for r in rows}


def send_rate_retry_after(pool, sender: str | None) -> float | None:
    """Seconds until a send-rate budget this runner's mail waits on frees up;
    None when no limit holds it back."""
    wait = _call(
        pool, "SELECT mailroom.send_rate_retry_after(%(sender)s) AS wait", {"sender": sender}
    )[0]["wait"]
    return wait.total_seconds() if wait is not None else None


def _json_as_is(text: str) -> str:
    return text


def mark_outcomes(pool, results: list[str]) -> int:
    """Record the results, each the JSON text of an object {"id", "token",
    "outcome", ...} (completer.Report.json_text), in one call; returns how many applied."""
    return _call(
        pool, "SELECT mailroom.mark_outcomes(%(results)s) AS n",
        {"results": Jsonb("[" + ", ".join(results) + "]", dumps=_json_as_is)},
    )[0]["n"]


def extend_lease(pool, ids: list[int], token, lease: float | timedelta) -> int:
    return _call(
        pool,
        "SELECT mailroom.extend_lease(%(ids)s, %(token)s, %(lease)s) AS n",
        {"ids": list(ids), "token": token, "lease": _seconds(lease)},
    )[0]["n"]


def release(pool, ids: list[int], token) -> int:
    """Hand claims not yet sent back to the queue at once (graceful shutdown)."""
    return _call(
        pool, "SELECT mailroom.release(%(ids)s, %(token)s) AS n", {"ids": list(ids), "token": token}
    )[0]["n"]


def get_templates(pool, keys: list[str]) -> list[dict]:
    return _call(
        pool,
        "SELECT key, subject, body_text, body_html, updated_at FROM mailroom.get_templates(%(keys)s)",
        {"keys": list(keys)},
    )


def runner_waiting(conn: psycopg.Connection, waiting: bool) -> bool:
    """Say on this session whether the runner waits for work (enqueue wakes
    runners only while one does; the hold ends with the session)."""
    try:
        return conn.execute("SELECT mailroom.runner_waiting(%s) AS ok", (waiting,)).fetchone()["ok"]
    except psycopg.Error as e:
        raise translate(e) from e


def enqueues_settled(conn: psycopg.Connection) -> bool:
    """True when no enqueue that decided not to wake runners is still in flight."""
    try:
        return conn.execute("SELECT mailroom.enqueues_settled() AS ok").fetchone()["ok"]
    except psycopg.Error as e:
        raise translate(e) from e


def runner_heartbeat(target: psycopg_pool.ConnectionPool | psycopg.Connection, **fields) -> None:
    """Upsert this runner's row in mailroom.runners (heartbeat.py names every
    field: worker, run_id, host, pid, version, sender, concurrency, interval,
    in_flight, sent, retried, failed, ambiguous, relay_up, relay_error). On the
    completer's flush connection, or one from the pool."""
    _call(
        target,
        "SELECT mailroom.runner_heartbeat(p_worker => %(worker)s, p_run_id => %(run_id)s,"
        " p_host => %(host)s, p_pid => %(pid)s, p_version => %(version)s, p_sender => %(sender)s,"
        " p_concurrency => %(concurrency)s, p_interval => %(interval)s, p_in_flight => %(in_flight)s,"
        " p_sent => %(sent)s, p_retried => %(retried)s, p_failed => %(failed)s,"
        " p_ambiguous => %(ambiguous)s, p_relay_up => %(relay_up)s, p_relay_error => %(relay_error)s)",
        fields,
    )


def deliverability(target: psycopg_pool.ConnectionPool | psycopg.Connection) -> tuple[list[dict], list[dict]]:
    """The adaptive throttle's learned rates and the warm-up schedules, for the metrics."""
    return (_call(target, "SELECT * FROM mailroom.destination_rates()", {}),
            _call(target, "SELECT * FROM mailroom.sender_warmup_status()", {}))


def runner_gone(target: psycopg_pool.ConnectionPool | psycopg.Connection, worker: str, run_id) -> bool:
    """This run stopped cleanly; False when the row is another run's (or gone)."""
    rows = _call(target, "SELECT mailroom.runner_gone(%(worker)s, %(run_id)s) AS ok",
                 {"worker": worker, "run_id": run_id})
    return bool(rows and rows[0]["ok"])


def listen(conn: psycopg.Connection, channel: str = CHANNEL) -> None:
    """Subscribe an autocommit connection to the queue's wake-up channel."""
    try:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    except psycopg.Error as e:
        raise translate(e) from e


# -- demo and test helpers (superuser on the embedded cluster) -----------------------


def upsert_template(pool, key: str, subject: str, body_text: str, body_html: str | None) -> None:
    _call(
        pool,
        "SELECT mailroom.upsert_template(%(k)s, %(s)s, %(t)s, %(h)s)",
        {"k": key, "s": subject, "t": body_text, "h": body_html},
    )


def enqueue_demo_batch(pool, first: int, last: int, template: str, run: str) -> int:
    """Enqueue recipients first..last of the demo, each with its own variables."""
    return _call(
        pool,
        "SELECT count(mailroom.enqueue("
        "  p_to => format('user%%s@demo.mailroom.invalid', i),"
        "  p_template => %(template)s,"
        "  p_vars => jsonb_build_object('name', format('Recipient %%s', i), 'n', i,"
        "                               'code', md5(i::text || %(run)s)),"
        "  p_delivery_key => format('demo:%%s:%%s', %(run)s::text, i))) AS n"
        " FROM generate_series(%(first)s::int, %(last)s::int) AS i",
        {"first": first, "last": last, "template": template, "run": run},
        timeout=30,
    )[0]["n"]


def status_counts(pool) -> dict[str, int]:
    rows = _call(pool, "SELECT status, count(*)::int AS n FROM mailroom.messages GROUP BY status")
    return {r["status"]: r["n"] for r in rows}


def attempt_counts(pool) -> dict[str, int]:
    rows = _call(
        pool,
        "SELECT coalesce(outcome, 'in_flight') AS outcome, count(*)::int AS n"
        " FROM mailroom.attempts GROUP BY 1",
    )
    return {r["outcome"]: r["n"] for r in rows}


# -- feedback (mailroom inbound, provider webhooks; a role granted mailroom_feedback) ---


def message_by_message_id(conn: psycopg.Connection, message_ref: str) -> int | None:
    """The id of the mail a runner-written Message-ID names, or None (provider webhooks)."""
    return _call(conn, "SELECT mailroom.message_by_message_id(%(ref)s) AS id", {"ref": message_ref})[0]["id"]


FEEDBACK_FUNCTIONS = ("record_feedback", "keep_unparsed_inbound", "feedback_message_id_matches")


def record_feedback(conn: psycopg.Connection, *, kind: str, message_id: int | None, address: str | None,
                    status: str | None, detail: str | None, source: str, event_key: str) -> bool:
    """Record one bounce, delay, complaint, delivery or unsubscribe; False when
    that event_key was recorded before (nothing changes twice)."""
    return _call(
        conn,
        "SELECT mailroom.record_feedback(%(kind)s, %(message_id)s, %(address)s, %(status)s, %(detail)s,"
        " %(source)s, %(event_key)s) AS recorded",
        {"kind": kind, "message_id": message_id, "address": address, "status": status, "detail": detail,
         "source": source, "event_key": event_key},
    )[0]["recorded"]


def keep_unparsed_inbound(conn: psycopg.Connection, raw: bytes, reason: str, envelope_from: str | None,
                          envelope_to: str | None) -> int:
    return _call(
        conn,
        "SELECT mailroom.keep_unparsed_inbound(%(raw)s, %(reason)s, %(from)s, %(to)s) AS id",
        {"raw": raw, "reason": reason, "from": envelope_from, "to": envelope_to},
    )[0]["id"]


def feedback_message_id_matches(conn: psycopg.Connection, message_id: int, header: str) -> bool | None:
    return _call(
        conn,
        "SELECT mailroom.feedback_message_id_matches(%(id)s, %(header)s) AS ok",
        {"id": message_id, "header": header},
    )[0]["ok"]


SUBMISSION_FUNCTIONS = ("submission_login", "submission_recipient_refusal", "enqueue", "rate_limit")


def submission_login(target, username: str) -> dict | None:
    """One SMTP submission login: password_hash, sender, allowed_from, stream,
    per_minute; None when there is no such login."""
    rows = _call(target, "SELECT * FROM mailroom.submission_login(%(username)s)", {"username": username})
    return rows[0] if rows else None


def submission_recipient_refusal(target, username: str, address: str) -> str | None:
    """Why a login's recipient would not be mailed ('invalid: ...', 'suppressed'), None when it would."""
    return _call(target, "SELECT mailroom.submission_recipient_refusal(%(username)s, %(address)s) AS refusal",
                 {"username": username, "address": address})[0]["refusal"]


def rate_limit(conn: psycopg.Connection, key: str, limit: int, window: float | timedelta) -> dict:
    """One hit of the fixed-window limiter: allowed, remaining, retry_after."""
    return _call(conn, "SELECT * FROM mailroom.rate_limit(%(key)s, %(limit)s, %(window)s)",
                 {"key": key, "limit": limit, "window": _seconds(window)})[0]


def enqueue_submitted(conn: psycopg.Connection, *, to: str, subject: str, body_text: str | None,
                      body_html: str | None, headers: dict, delivery_key: str, sender: str, stream: str) -> int:
    """Queue one submitted mail (mailroom submit); a repeat of its delivery
    key returns the first mail's id and queues nothing."""
    return _call(
        conn,
        "SELECT mailroom.enqueue(p_to => %(to)s, p_subject => %(subject)s, p_body_text => %(text)s,"
        " p_body_html => %(html)s, p_headers => %(headers)s, p_delivery_key => %(key)s,"
        " p_sender => %(sender)s, p_stream => %(stream)s) AS id",
        {"to": to, "subject": subject, "text": body_text, "html": body_html, "headers": Jsonb(headers),
         "key": delivery_key, "sender": sender, "stream": stream},
    )[0]["id"]


def set_submission_credential(target, *, username: str, password_hash: str, sender: str, allowed_from: list[str],
                              per_minute: int, stream: str) -> bool:
    """Add (True) or replace (False) an SMTP submission login."""
    return _call(
        target,
        "SELECT mailroom.set_submission_credential(%(username)s, %(hash)s, %(sender)s, %(from)s, %(per_minute)s,"
        " %(stream)s) AS created",
        {"username": username, "hash": password_hash, "sender": sender, "from": list(allowed_from),
         "per_minute": per_minute, "stream": stream},
    )[0]["created"]


def drop_submission_credential(target, username: str) -> bool:
    return _call(target, "SELECT mailroom.drop_submission_credential(%(username)s) AS dropped",
                 {"username": username})[0]["dropped"]


def submission_credential_list(target) -> list[dict]:
    return _call(target, "SELECT * FROM mailroom.submission_credential_list()")
