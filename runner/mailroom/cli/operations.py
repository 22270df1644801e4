"""Operator commands: `mailroom status`, `inspect`, `retry`, `cancel`, `review`.

Every command is a thin reader of the recovery contract in the database (the
operator views and functions of the `mailroom` schema); nothing here decides
anything the SQL does not. The DSN's role needs `mailroom_operator`.

Exit codes: 0 ok, 1 nothing found, 2 bad input (SQLSTATE 22023, 55000,
P0002), 3 database unreachable, 4 permission denied (role lacks mailroom_operator).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click
import psycopg
from psycopg.rows import dict_row

from mailroom.formatting import human


# --- SQL, in one place -------------------------------------------------------

SQL_QUEUE_STATS = "SELECT * FROM mailroom.queue_stats"
SQL_METRICS = "SELECT * FROM mailroom.delivery_metrics(%(window)s::interval)"
SQL_LEASES = """
    SELECT count(*) FILTER (WHERE NOT reclaimed) AS expired_unreclaimed,
           count(*) FILTER (WHERE reclaimed AND expired_at > now() - interval '1 hour') AS expired_last_hour
    FROM mailroom.expired_leases
"""
SQL_DUPLICATES = """
    SELECT certainty, count(*) AS keys
    FROM mailroom.duplicate_deliveries
    WHERE last_sent_at > now() - %(window)s::interval
    GROUP BY certainty ORDER BY certainty
"""
SQL_CAMPAIGNS = "SELECT * FROM mailroom.campaign_progress"
SQL_RUNNERS = "SELECT * FROM mailroom.runner_status"
SQL_RUNNER_WARNINGS = "SELECT * FROM mailroom.runner_warnings()"
SQL_STREAMS = "SELECT * FROM mailroom.stream_overview"
# The circuit breaker: what it paused or warns about (ok rows are left out).
SQL_BREAKER = """
    SELECT scope, key, campaign_name, state, delivered, bounced, complained, bounce_rate, complaint_rate,
           tripped_at, reason
    FROM mailroom.breaker_status WHERE state <> 'ok' ORDER BY state DESC, scope, key"""
# What the adaptive throttle learned and the warm-up schedules (docs/deliverability.md).
SQL_THROTTLES = "SELECT * FROM mailroom.destination_rates()"
SQL_WARMUPS = "SELECT * FROM mailroom.sender_warmup_status()"
# Webhook endpoints that deliver nothing: paused, or waiting for a key no runner offers.
SQL_WEBHOOK_WARNINGS = ("SELECT name, status, paused_reason, warning, events_behind FROM mailroom.webhook_status"
                        " WHERE status = 'paused' OR warning IS NOT NULL ORDER BY name")
# A fleet directory (fleet/, docs/fleet.md): PL/Proxy over every shard.
# shard_status asks each shard on its own: one that does not answer is a row
# marked answered = false, the others still answer.
SQL_FLEET_SHARDS = "SELECT * FROM mailroom_fleet.shard_status() ORDER BY shard"
SQL_RESUME_CAMPAIGN = "SELECT mailroom.resume_campaign(%(campaign)s) AS resumed"
SQL_RESUME_SENDER = "SELECT mailroom.resume_sender(%(sender)s) AS resumed"
SQL_INSPECT = "SELECT mailroom.inspect(%(ref)s) AS message"
SQL_RETRY = "SELECT * FROM mailroom.retry(%(ids)s::bigint[])"
SQL_RETRY_CAMPAIGN = "SELECT mailroom.retry_campaign(%(campaign)s) AS retried"
SQL_CANCEL = "SELECT * FROM mailroom.cancel(%(ids)s::bigint[], %(reason)s)"
SQL_REVIEW_LIST = "SELECT * FROM mailroom.review_queue LIMIT %(limit)s"
SQL_RESOLVE = "SELECT mailroom.resolve_review(%(id)s, %(decision)s) AS status"
SQL_FORGET = "SELECT part, rows FROM mailroom.forget(%(address)s)"

EXIT_NOT_FOUND = 1
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3
EXIT_FORBIDDEN = 4


class OperatorError(click.ClickException):
    """A one-line message and an exit code for the operator."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: Any = None) -> None:
        click.echo(f"mailroom: {self.message}", err=True)


def _default_dsn() -> str:
    from mailroom.dev.embedded import Cluster, ClusterError  # the test-only cluster: imported when used

    try:
        return Cluster.for_checkout().url()
    except ClusterError as e:
        raise OperatorError(f"no --dsn or MAILROOM_DSN given, and no embedded cluster: {e}", EXIT_UNREACHABLE) from e


@contextmanager
def _connection(dsn: str | None) -> Iterator[psycopg.Connection]:
    """An autocommit connection; database errors become OperatorError by SQLSTATE."""
    try:
        conn = psycopg.connect(dsn or _default_dsn(), autocommit=True, row_factory=dict_row,
                               application_name="mailroom-operator")
    except psycopg.OperationalError as e:
        raise OperatorError(f"cannot connect: {str(e).strip().splitlines()[0]}", EXIT_UNREACHABLE) from e
    try:
        with conn:
            yield conn
    except psycopg.Error as e:
        state = e.diag.sqlstate or ""
        text = e.diag.message_primary or str(e).strip()
        if state == "42501":
            raise OperatorError(f"{text} (the role needs mailroom_operator)", EXIT_FORBIDDEN) from e
        if state in ("22023", "55000", "P0002", "22007", "22008", "22P02"):
            raise OperatorError(text.removeprefix("mailroom: "), EXIT_BAD_INPUT) from e
        if isinstance(e, psycopg.OperationalError):
            raise OperatorError(f"database connection lost: {text}", EXIT_UNREACHABLE) from e
        raise


# --- rendering ---------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, default=_json_default, indent=2, sort_keys=False))


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], max_width: int = 60) -> str:
    """A plain aligned text table of the given (key, heading) columns."""
    cells = [[human(r.get(key))[:max_width] for key, _ in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h) in enumerate(columns)]
    lines = ["  ".join(h.ljust(w) for (_, h), w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


# --- commands ----------------------------------------------------------------

dsn_option = click.option(
    "--dsn", envvar="MAILROOM_DSN", default=None, metavar="URL",
    help="libpq URL of the database (role with mailroom_operator). Default: $MAILROOM_DSN, "
         "else the embedded cluster of this checkout.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for machines instead of a table.")


@click.command("status")
@dsn_option
@json_option
@click.option("--window", default="1 hour", show_default=True, help="Window for the delivery metrics (a PostgreSQL interval).")
@click.option("--fleet", is_flag=True,
              help="--dsn is a fleet directory (docs/fleet.md): every shard's queue in a row, the fleet's total, "
                   "every shard's warnings.")
def status(dsn: str | None, as_json: bool, window: str, fleet: bool) -> None:
    """Queue depth and age per sender and status, leases, review items,
    duplicates, delivery metrics, campaigns and warnings."""
    if fleet:
        _fleet_status(dsn, as_json)
        return
    with _connection(dsn) as conn:
        stats = conn.execute(SQL_QUEUE_STATS).fetchall()
        metrics = conn.execute(SQL_METRICS, {"window": window}).fetchall()
        leases = conn.execute(SQL_LEASES).fetchone()
        duplicates = {r["certainty"]: r["keys"] for r in conn.execute(SQL_DUPLICATES, {"window": window})}
        campaigns = conn.execute(SQL_CAMPAIGNS).fetchall()
        runners = conn.execute(SQL_RUNNERS).fetchall()
        runner_warnings = conn.execute(SQL_RUNNER_WARNINGS).fetchall()
        streams = conn.execute(SQL_STREAMS).fetchall()
        breaker = conn.execute(SQL_BREAKER).fetchall()
        throttles = conn.execute(SQL_THROTTLES).fetchall()
        warmups = conn.execute(SQL_WARMUPS).fetchall()
        webhooks = conn.execute(SQL_WEBHOOK_WARNINGS).fetchall()
    queue = [r for r in stats if r["kind"] == "queue"]
    warnings = [{"warning": r["warning"], "count": r["messages"], "oldest_age": r["oldest_age"], "detail": r["detail"]}
                for r in stats if r["kind"] == "warning"]
    warnings += [{"warning": r["warning"], "count": r["messages"], "oldest_age": r["oldest_age"], "detail": r["detail"]}
                 for r in runner_warnings]
    warnings += [{"warning": f"{r['scope']}_paused_by_breaker", "count": None, "oldest_age": None,
                  "detail": f"{r['scope']} {r['key']}: {r['reason']} (mailroom resume --{r['scope']} {r['key']})"}
                 for r in breaker if r["state"] == "paused"]
    warnings += [{"warning": "webhook_paused" if r["status"] == "paused" else "webhook_key_not_offered",
                  "count": r["events_behind"], "oldest_age": None,
                  "detail": f"endpoint {r['name']}: {r['paused_reason'] if r['status'] == 'paused' else r['warning']}"}
                 for r in webhooks]
    review = sum(r["messages"] for r in queue if r["status"] == "review")
    report = {
        "queue": [{k: r[k] for k in ("sender", "status", "messages", "due", "oldest_age", "oldest_due_age")} for r in queue],
        "leases": {"sending": sum(r["messages"] for r in queue if r["status"] == "sending"), **leases},
        "review": review,
        "duplicates": {"window": window, "confirmed": duplicates.get("confirmed", 0), "possible": duplicates.get("possible", 0)},
        "metrics": {"window": window, "rows": metrics},
        "campaigns": campaigns,
        "streams": streams,
        "runners": runners,
        "breaker": breaker,
        "throttles": throttles,
        "warmups": warmups,
        "warnings": warnings,
    }
    if as_json:
        _emit_json(report)
        return

    click.echo("QUEUE")
    if queue:
        click.echo(_table(queue, [("sender", "sender"), ("status", "status"), ("messages", "messages"), ("due", "due"),
                                  ("oldest_age", "oldest"), ("oldest_due_age", "overdue")]))
    else:
        click.echo("(empty)")
    lease = report["leases"]
    click.echo(f"\nLEASES   sending {lease['sending']}, expired and not reclaimed {lease['expired_unreclaimed']}, "
               f"expired in the last hour {lease['expired_last_hour']}")
    click.echo(f"REVIEW   {review} waiting (mailroom review)")
    click.echo(f"DUPLICATES ({window})   confirmed {report['duplicates']['confirmed']}, possible {report['duplicates']['possible']}")
    click.echo(f"\nDELIVERY ({window})")
    click.echo(_table(metrics, [("split", "split"), ("sender", "sender"), ("time_zone", "zone"), ("attempts", "attempts"),
                                ("deliveries", "sent"), ("failures", "failed"), ("latency_p50", "p50"), ("latency_p95", "p95"),
                                ("oldest_overdue", "overdue"), ("expired_leases", "expired"),
                                ("attempts_per_delivery", "tries/mail"), ("duplicates", "dupes")]))
    click.echo("\n" + _runners_section(runners))
    click.echo("\nSTREAMS  (suppressed: addresses suppressed for that stream alone; the last row: for all streams)")
    click.echo(_table([{**r, "stream": r["stream"] or "(all streams)",
                        "unsubscribe_headers": "" if r["unsubscribe_headers"] is None
                        else ("yes" if r["unsubscribe_headers"] else "no")} for r in streams],
                      [("stream", "stream"), ("unsubscribe_headers", "unsubscribe headers"),
                       ("suppressed", "suppressed"), ("description", "description")]))
    click.echo("\nCAMPAIGNS")
    click.echo(_table(campaigns, [(k, k) for k in campaigns[0].keys()]) if campaigns else "(none)")
    click.echo("\nCIRCUIT BREAKER")
    rows = [{**r, "what": f"{r['scope']} {r['key']}" + (f" ({r['campaign_name']})" if r["campaign_name"] else ""),
             "bounces": f"{r['bounce_rate'] * 100:.2f} %", "complaints": f"{r['complaint_rate'] * 100:.3f} %",
             "reason": r["reason"] or ""} for r in breaker]
    click.echo(_table(rows, [("what", "what"), ("state", "state"), ("delivered", "delivered"), ("bounced", "bounced"),
                             ("bounces", "bounce rate"), ("complained", "complained"), ("complaints", "complaint rate"),
                             ("reason", "reason")], max_width=80)
               if rows else "all clear")
    click.echo("\n" + _throttles_section(throttles))
    click.echo("\n" + _warmups_section(warmups))
    click.echo("\nWARNINGS")
    if warnings:
        for w in warnings:
            click.echo(f"! {w['warning']}: {w['detail']}")
    else:
        click.echo("none")


def _throttles_section(throttles: list[dict[str, Any]]) -> str:
    """The adaptive throttle: each destination group's learned rate, why and since when it is lowered."""
    lowered = [t for t in throttles if t["in_effect"]]
    if not lowered:
        return "THROTTLE  no destination throttled" + (f" ({len(throttles)} recovered)" if throttles else "")
    rows = [{"group": t["group_name"], "rate": f"{t['rate_per_minute']}/min", "ceiling": f"{t['ceiling_per_minute']}/min",
             "since": human(t["lowered_since"]), "deferrals": t["deferrals"], "why": t["last_deferral"] or ""}
            for t in lowered]
    return "THROTTLE  (learned send rates; lowered by the last deferral)\n" + _table(
        rows, [("group", "group"), ("rate", "rate"), ("ceiling", "ceiling"), ("since", "lowered since"),
               ("deferrals", "deferrals"), ("why", "why")], max_width=80)


def _warmups_section(warmups: list[dict[str, Any]]) -> str:
    """Warm-up schedules: each sender's day and what is left of its budget today."""
    if not warmups:
        return "WARM-UP  no sender warming up"
    rows = [{"sender": w["sender"], "day": "done" if w["done"] else f"{w['day']} of {w['days']}",
             "budget": "" if w["done"] else w["budget"], "used": w["used"],
             "remaining": "" if w["done"] else w["remaining"],
             "broadcast": "" if w["done"] else w["broadcast_remaining"]} for w in warmups]
    return "WARM-UP  (mails per UTC day; broadcast waits once only the transactional reserve is left)\n" + _table(
        rows, [("sender", "sender"), ("day", "day"), ("budget", "budget today"), ("used", "used"),
               ("remaining", "remaining"), ("broadcast", "broadcast may use")])


def _fleet_status(dsn: str | None, as_json: bool) -> None:
    """One row per shard from the directory (mailroom_fleet.shard_status). A
    shard that does not answer is shown as DOWN with its error, the others
    still answer, and the command exits 3: the total is only of the shards
    that answered."""
    with _connection(dsn) as conn:
        try:
            conn.execute("SET statement_timeout = '60s'")  # a hung shard is not ended by PL/Proxy's timeouts
            rows = conn.execute(SQL_FLEET_SHARDS).fetchall()
        except (psycopg.errors.UndefinedFunction, psycopg.errors.InvalidSchemaName) as e:
            raise OperatorError("this database is no fleet directory (deploy fleet/ there: docs/fleet.md)",
                                EXIT_BAD_INPUT) from e
        except psycopg.errors.QueryCanceled as e:
            raise OperatorError("the fleet did not answer within 60 s: a shard accepts connections and never "
                                "answers (docs/fleet.md)", EXIT_UNREACHABLE) from e
    shards = [r for r in rows if r["answered"]]
    down = [r for r in rows if not r["answered"]]
    warnings = [{"shard": r["shard"], **w} for r in shards for w in r["warning_list"]]
    keys = ("messages", "due", "queued", "sending", "paused", "review")
    total = {"shard": f"all {len(shards)} shards" if not down else f"{len(shards)} of {len(rows)} shards",
             **{k: sum(r[k] for r in shards) for k in keys},
             "oldest_age": max((r["oldest_age"] for r in shards if r["oldest_age"] is not None), default=None),
             "oldest_due_age": max((r["oldest_due_age"] for r in shards if r["oldest_due_age"] is not None),
                                   default=None),
             "warnings": sum(r["warnings"] for r in shards)}
    if as_json:
        _emit_json({"shards": [{k: v for k, v in r.items() if k != "warning_list"} for r in rows],
                    "fleet": total, "warnings": warnings, "down": [r["shard"] for r in down]})
    else:
        click.echo("SHARDS")
        shown = [r if r["answered"] else {**r, **{k: "DOWN" for k in keys}} for r in rows]
        click.echo(_table(shown + [total], [("shard", "shard"), *((k, k) for k in keys), ("oldest_age", "oldest"),
                                            ("oldest_due_age", "overdue"), ("warnings", "warnings")]))
        click.echo("\nWARNINGS")
        for r in down:
            click.echo(f"! {r['shard']}: shard_down: {r['error']}")
        for w in warnings:
            click.echo(f"! {w['shard']}: {w['warning']}: {w['detail']}")
        if not warnings and not down:
            click.echo("none")
    if down:
        raise OperatorError(f"{len(down)} of {len(rows)} shards did not answer: "
                            + "; ".join(r["error"].splitlines()[0] for r in down), EXIT_UNREACHABLE)


def _runners_section(runners: list[dict[str, Any]]) -> str:
    """RUNNERS: the live ones as a table, the others counted."""
    alive = [r for r in runners if r["alive"]]
    others = len(runners) - len(alive)
    head = f"RUNNERS  {len(alive)} alive" + (
        f", {others} stopped or lost in the last day (SELECT * FROM mailroom.runner_status)" if others else "")
    if not alive:
        return head
    rows = [{**r, "seen": f"{human(r['seen_ago'])} ago",
             # down for: until its last heartbeat, and since then
             "relay": "up" if r["relay_up"]
             else f"DOWN for {human(r['last_seen'] - r['relay_down_since'] + r['seen_ago'])}"}
            for r in alive]
    return head + "\n" + _table(rows, [("worker", "worker"), ("host", "host"), ("version", "version"), ("seen", "last seen"),
                                       ("in_flight", "in flight"), ("sent_per_second", "sent/s"), ("sent", "sent"),
                                       ("retried", "retried"), ("failed", "failed"), ("relay", "relay")])


def _runners_message_id(delivery_key: str, mail_id: int, from_address: str, message_id_domain: str | None) -> str:
    """The Message-ID runners give this mail: render's function of the delivery
    key and id, on the domain they work out from the same two settings."""
    from mailroom.send.render import Renderer, message_id  # Jinja2 and MIME only for this command

    try:
        domain = Renderer(from_address, message_id_domain).domain
    except ValueError as e:
        raise OperatorError(str(e), EXIT_BAD_INPUT) from None
    return message_id(delivery_key, mail_id, domain)


@click.command("inspect")
@dsn_option
@json_option
@click.option("--from", "from_address", default="mailroom@localhost", show_default=True, metavar="ADDRESS",
              envvar="MAILROOM_FROM", show_envvar=True,
              help="The runners' --from: its domain is the Message-ID domain unless --message-id-domain is set.")
@click.option("--message-id-domain", default=None, metavar="DOMAIN", envvar="MAILROOM_MESSAGE_ID_DOMAIN",
              show_envvar=True, help="The runners' --message-id-domain.")
@click.argument("ref")
def inspect(dsn: str | None, as_json: bool, from_address: str, message_id_domain: str | None, ref: str) -> None:
    """Show one message (by delivery key, or by numeric id), how it finished, and its ledger.

    message_id is the Message-ID header runners give it (to search for in the
    relay's logs or the recipient's mailbox): give the runners' --from or
    --message-id-domain (or their MAILROOM_ variables) for the right domain.
    """
    with _connection(dsn) as conn:
        message = conn.execute(SQL_INSPECT, {"ref": ref}).fetchone()["message"]
    if message is None:
        raise OperatorError(f"no message with delivery key or id {ref!r}", EXIT_NOT_FOUND)
    message["message_id"] = _runners_message_id(message["delivery_key"], message["id"], from_address,
                                               message_id_domain)
    if as_json:
        _emit_json(message)
        return
    ledger = message.pop("ledger")
    for key in ("id", "delivery_key", "message_id", "status", "status_reason", "sender", "stream", "to_address", "subject", "template_key",
                "priority", "run_at", "attempts", "max_attempts", "on_ambiguous", "worker", "leased_until",
                "campaign_id", "schedule_id", "last_error", "created_at", "sent_at", "finished_at", "successful_sends"):
        click.echo(f"{key + ':':<17} {human(message.get(key))}")
    scopes = message.get("suppressions") or []
    click.echo(f"{'suppressed:':<17} " + ("; ".join(
        f"{s['stream'] or 'all streams'} ({s['reason']}{', stops this mail' if s['stops_this_mail'] else ''})"
        for s in scopes) or "no"))
    click.echo("\nLEDGER")
    click.echo(_table(ledger, [("attempt", "#"), ("worker", "worker"), ("claimed_at", "claimed"),
                               ("finished_at", "finished"), ("reported", "reported"), ("outcome", "outcome"),
                               ("duplicate", "dup"), ("smtp_code", "smtp"), ("smtp_enhanced", "enh"),
                               ("smtp_text", "reply"), ("provider_id", "provider id")]) if ledger else "(no attempts)")


def _changes(rows: list[dict[str, Any]], verb: str, as_json: bool) -> None:
    """What changed (a table, or JSON); exit 1 afterwards when an id is no message at all."""
    if as_json:
        _emit_json(rows)
    else:
        columns = [("id", "id"), ("previous_status", "was"), ("status", "now")]
        if any(r.get("not_retried_because") for r in rows):
            columns.append(("not_retried_because", "why not"))
        click.echo(_table(rows, columns, max_width=100))
        changed = sum(1 for r in rows if r["previous_status"] is not None and r["status"] != r["previous_status"])
        click.echo(f"{verb} {changed} of {len(rows)}")
    missing = [str(r["id"]) for r in rows if r["previous_status"] is None]
    if missing:
        raise OperatorError(f"no such message: {', '.join(missing)}", EXIT_NOT_FOUND)


@click.command("retry")
@dsn_option
@json_option
@click.option("--campaign", type=int, default=None, help="Retry every failed or review mail of this campaign.")
@click.argument("ids", nargs=-1, type=int)
def retry(dsn: str | None, as_json: bool, campaign: int | None, ids: tuple[int, ...]) -> None:
    """Put failed or review mail back in the queue (attempts reset, due now).

    Give message IDS, or --campaign N. Mail to a suppressed address is left
    alone. Retrying review mail accepts that the recipient may get it twice.
    """
    if bool(ids) == (campaign is not None):
        raise OperatorError("give message ids or --campaign, not both and not neither", EXIT_BAD_INPUT)
    with _connection(dsn) as conn:
        if campaign is not None:
            retried = conn.execute(SQL_RETRY_CAMPAIGN, {"campaign": campaign}).fetchone()["retried"]
            if as_json:
                _emit_json({"campaign": campaign, "retried": retried})
            else:
                click.echo(f"retried {retried} mail(s) of campaign {campaign}")
            return
        rows = conn.execute(SQL_RETRY, {"ids": list(ids)}).fetchall()
    _changes(rows, "retried", as_json)


@click.command("cancel")
@dsn_option
@json_option
@click.option("--reason", default="cancelled by operator", show_default=True, help="Recorded as the status reason.")
@click.argument("ids", nargs=-1, type=int, required=True)
def cancel(dsn: str | None, as_json: bool, reason: str, ids: tuple[int, ...]) -> None:
    """Cancel queued, paused, review or failed mail by message IDS."""
    with _connection(dsn) as conn:
        rows = conn.execute(SQL_CANCEL, {"ids": list(ids), "reason": reason}).fetchall()
    _changes(rows, "cancelled", as_json)


@click.group("review", invoke_without_command=True)
@dsn_option
@json_option
@click.pass_context
def review(ctx: click.Context, dsn: str | None, as_json: bool) -> None:
    """Mail whose delivery could not be proven: list it (the default), then
    resolve each item."""
    ctx.obj = {"dsn": dsn, "as_json": as_json}
    if ctx.invoked_subcommand is None:
        ctx.invoke(review_list, dsn=dsn, as_json=as_json)


@review.command("list")
@dsn_option
@json_option
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100000))
@click.pass_context
def review_list(ctx: click.Context, dsn: str | None = None, as_json: bool = False, limit: int = 100) -> None:
    """List the review queue, longest waiting first."""
    parent = ctx.obj or {}
    dsn = dsn or parent.get("dsn")
    as_json = as_json or parent.get("as_json", False)
    with _connection(dsn) as conn:
        rows = conn.execute(SQL_REVIEW_LIST, {"limit": limit}).fetchall()
    if as_json:
        _emit_json(rows)
        return
    if not rows:
        click.echo("review queue is empty")
        return
    click.echo(_table(rows, [("id", "id"), ("delivery_key", "delivery key"), ("to_address", "to"),
                             ("subject", "subject"), ("last_outcome", "last outcome"), ("last_worker", "worker"),
                             ("waiting_for", "waiting"), ("last_smtp_reply", "reply")], max_width=40))
    click.echo(f"{len(rows)} waiting. Decide each: mailroom review resolve ID sent|retry|cancel")


@review.command("resolve")
@dsn_option
@click.argument("message_id", type=int)
@click.argument("decision", type=click.Choice(["sent", "retry", "cancel"]))
@click.pass_context
def review_resolve(ctx: click.Context, dsn: str | None, message_id: int, decision: str) -> None:
    """Decide one review item: sent (the recipient has it), retry (send again;
    may duplicate) or cancel."""
    dsn = dsn or (ctx.obj or {}).get("dsn")
    with _connection(dsn) as conn:
        new_status = conn.execute(SQL_RESOLVE, {"id": message_id, "decision": decision}).fetchone()["status"]
    click.echo(f"message {message_id}: {new_status}")


@click.command("resume")
@dsn_option
@json_option
@click.option("--campaign", type=int, default=None, help="Resume this paused campaign (by hand or by the breaker).")
@click.option("--sender", default=None, help="Resume this sender, paused by the circuit breaker.")
def resume(dsn: str | None, as_json: bool, campaign: int | None, sender: str | None) -> None:
    """Resume a campaign or a sender: its held mail is queued again and its
    circuit breaker starts a fresh window."""
    if (campaign is None) == (sender is None):
        raise OperatorError("give --campaign or --sender, one of them", EXIT_BAD_INPUT)
    with _connection(dsn) as conn:
        if campaign is not None:
            n = conn.execute(SQL_RESUME_CAMPAIGN, {"campaign": campaign}).fetchone()["resumed"]
        else:
            n = conn.execute(SQL_RESUME_SENDER, {"sender": sender}).fetchone()["resumed"]
    what = f"campaign {campaign}" if campaign is not None else f"sender {sender}"
    if as_json:
        _emit_json({"resumed": what, "queued": n})
    else:
        click.echo(f"resumed {what}: {n} mail(s) queued again")


@click.command("forget")
@dsn_option
@json_option
@click.option("--yes", is_flag=True, help="Confirm: this erases the person's mail content and cannot be undone.")
@click.argument("address")
def forget(dsn: str | None, as_json: bool, yes: bool, address: str) -> None:
    """Erase ADDRESS (GDPR/CCPA): its mail's content, the relay's answers,
    feedback, unparsed inbound mail, cache entries, schedules and
    suppressions; live mail is cancelled. Only a keyed hash is kept, which
    refuses new mail to it on every stream. Idempotent. See docs/erasure.md.
    """
    if not yes:
        raise OperatorError(f"forget erases what mailroom holds about {address} and cannot be undone:"
                            " run again with --yes", EXIT_BAD_INPUT)
    with _connection(dsn) as conn:
        removed = {r["part"]: r["rows"] for r in conn.execute(SQL_FORGET, {"address": address}).fetchall()}
    if as_json:
        _emit_json(removed)
        return
    click.echo(_table([{"part": k, "rows": v} for k, v in removed.items()], [("part", "part"), ("rows", "rows")]))
    click.echo("forgotten now" if removed.get("forgotten_addresses") else "was forgotten already")
    if removed.get("in_flight"):
        click.echo(f"{removed['in_flight']} mail(s) were being sent: run forget again once they are reported,"
                   " to erase the relay's answers", err=True)


COMMANDS: tuple[click.Command, ...] = (status, inspect, retry, cancel, review, resume, forget)


def register(group: click.Group) -> None:
    """Add the operator commands to the `mailroom` group."""
    for command in COMMANDS:
        group.add_command(command)
