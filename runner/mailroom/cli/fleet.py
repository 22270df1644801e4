"""`mailroom fleet ...`: the steps of adding and retiring a shard
(docs/fleet.md) that are more than one ALTER SERVER.

    check               the map's problems (mailroom_fleet.map_check)
    settle              wait until no directory transaction older than now is
                        open: from then on every call routes by the map in force
    copy-suppressions   every suppression of the source shards onto the targets
    drained             whether a shard still holds anything a runner has to do

Exit codes: 0 ok, 1 not yet (problems found, not settled, not drained), 2 bad
input, 3 database unreachable, 4 permission denied.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import click
import psycopg

from mailroom.cli.operations import (EXIT_BAD_INPUT, EXIT_FORBIDDEN, OperatorError, _connection, _emit_json, _table,
                                     json_option)
from mailroom.formatting import human

EXIT_NOT_YET = 1

SQL_MAP_CHECK = "SELECT * FROM mailroom_fleet.map_check()"
SQL_SHARD_MAP = "SELECT partition, connstr FROM mailroom_fleet.shard_map ORDER BY partition"
SQL_ROUTED_TO = ("SELECT coalesce(array_agg(p ORDER BY p), '{}') AS partitions"
                 " FROM mailroom_fleet.shards s, unnest(s.partitions) p WHERE s.dbname = %(database)s")
SQL_OLD_CALLS = "SELECT * FROM mailroom_fleet.calls_begun_before(%(moment)s)"
# Suppressions are read from the table itself: no operator function lists
# all of them (suppression_search shows the newest 1,000 at most), so the
# source login must be allowed to read it (its owner, or a superuser).
SQL_SUPPRESSIONS = ("SELECT address, reason, source, stream FROM mailroom.suppressions"
                    " ORDER BY address_key, stream NULLS FIRST")
SQL_SUPPRESS_MANY = """
    SELECT count(mailroom.suppress(u.address, u.reason, u.source, u.stream)) AS n
    FROM unnest(%(address)s::text[], %(reason)s::text[], %(source)s::text[], %(stream)s::text[])
         AS u(address, reason, source, stream)"""
SQL_SUPPRESSED_TOTAL = "SELECT coalesce(sum(suppressed), 0)::bigint AS n FROM mailroom.stream_overview"
# What a shard still has to do. queue_stats counts the hot queue and the
# campaign mail not queued yet (backlog), by status.
SQL_LIVE = """
    SELECT status, sum(messages)::bigint AS messages, sum(due)::bigint AS due
    FROM mailroom.queue_stats WHERE kind = 'queue' AND messages > 0
    GROUP BY status ORDER BY status"""
SQL_ACTIVE_SCHEDULES = "SELECT count(*) FILTER (WHERE active) AS n FROM mailroom.schedule_list(10000)"
SQL_WEBHOOKS_BEHIND = ("SELECT name, status, events_behind FROM mailroom.webhook_status"
                       " WHERE events_behind > 0 ORDER BY name")
SQL_DATABASE = "SELECT current_database() AS name"

COPY_BATCH = 5000

from_option = click.option("--from", "sources", multiple=True, required=True, metavar="URL",
                           help="A shard to copy from (repeatable); its login must read mailroom.suppressions "
                                "(the owner or a superuser).")
to_option = click.option("--to", "targets", multiple=True, required=True, metavar="URL",
                         help="A shard to copy onto (repeatable), as a login holding mailroom_operator.")
directory_option = click.option("--dsn", "dsn", envvar="MAILROOM_FLEET_DSN", required=True, metavar="URL",
                                help="The fleet directory, as a login holding mailroom_fleet_operator.")


def _no_directory(e: psycopg.Error) -> OperatorError:
    return OperatorError("this database is no fleet directory with the reshard change (deploy fleet/ there: "
                         f"docs/fleet.md): {e.diag.message_primary}", EXIT_BAD_INPUT)


def _safe_connstr(connstr: str) -> str:
    """A partition's connect string as it may be shown: dbname, host, port."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(connstr)
    except psycopg.ProgrammingError:
        return "(unparsable)"
    return " ".join(f"{k}={info[k]}" for k in ("dbname", "host", "port") if k in info)


@click.group("fleet")
def fleet() -> None:
    """Change a fleet's shard map with mail in flight (docs/fleet.md)."""


@fleet.command("check")
@directory_option
@json_option
def check(dsn: str, as_json: bool) -> None:
    """The shard map and its problems: a partition at a shard that does not
    answer, refuses writes (retired, a standby) or has no mailroom schema,
    and a database name behind two connect strings. Exit 1 when there is one."""
    with _connection(dsn) as conn:
        conn.execute("SET statement_timeout = '60s'")  # a hung shard is not ended by PL/Proxy's timeouts
        try:
            layout = conn.execute(SQL_SHARD_MAP).fetchall()
            problems = conn.execute(SQL_MAP_CHECK).fetchall()
        except (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as e:
            raise _no_directory(e) from e
    layout = [{"partition": r["partition"], "connstr": _safe_connstr(r["connstr"])} for r in layout]
    if as_json:
        _emit_json({"map": layout, "problems": problems})
    else:
        click.echo(f"MAP  {len(layout)} partitions")
        click.echo(_table(layout, [("partition", "partition"), ("connstr", "connect string")], max_width=100))
        click.echo("\nPROBLEMS")
        for p in problems:
            click.echo(f"! {p['problem']}: {p['detail']}")
        if not problems:
            click.echo("none")
    if problems:
        raise OperatorError(f"{len(problems)} problem(s) in the shard map: "
                            + ", ".join(f"{p['problem']} {p['shard']}" for p in problems), EXIT_NOT_YET)


@fleet.command("settle")
@directory_option
@json_option
@click.option("--timeout", type=click.FloatRange(0, 86400), default=300.0, show_default=True,
              help="Seconds to wait for the older transactions to end.")
def settle(dsn: str, as_json: bool, timeout: float) -> None:
    """Run after ALTER SERVER: wait until every directory transaction that
    began before this command has ended. PL/Proxy routes a transaction by the
    map it began with, so until then an old transaction may still enqueue on
    a shard whose partitions moved away, or suppress without the shard that
    took them. Exit 1 on timeout, listing who holds one open."""
    deadline = time.monotonic() + timeout
    with _connection(dsn) as conn:
        try:
            moment = conn.execute("SELECT now() AS t").fetchone()["t"]
            while True:
                old = conn.execute(SQL_OLD_CALLS, {"moment": moment}).fetchall()
                if not old or time.monotonic() >= deadline:
                    break
                time.sleep(0.2)
        except (psycopg.errors.UndefinedFunction, psycopg.errors.InvalidSchemaName) as e:
            raise _no_directory(e) from e
    if as_json:
        _emit_json({"since": moment, "settled": not old, "open": old})
    elif old:
        click.echo(_table(old, [("pid", "pid"), ("usename", "user"), ("application_name", "application"),
                                ("state", "state"), ("open_for", "open for")]))
    else:
        click.echo(f"settled: no directory transaction from before {human(moment)} is open; "
                   "every call routes by the map in force")
    if old:
        raise OperatorError(f"{len(old)} directory transaction(s) from before {human(moment)} still open after "
                            f"{timeout:g} s: they may route by the old map; wait, or end them with "
                            "pg_terminate_backend(pid)", EXIT_NOT_YET)


def _source_batches(url: str) -> Iterator[list[tuple[str, str, str | None, str | None]]]:
    """The source's suppressions, COPY_BATCH at a time (a server-side cursor:
    a list of millions is never held whole)."""
    with _connection(url) as conn:
        try:
            with conn.transaction(), conn.cursor("suppressions") as cur:
                cur.execute(SQL_SUPPRESSIONS)
                while batch := cur.fetchmany(COPY_BATCH):
                    yield [(r["address"], r["reason"], r["source"], r["stream"]) for r in batch]
        except psycopg.errors.InsufficientPrivilege as e:
            raise OperatorError(f"--from {_safe_connstr(url)}: {e.diag.message_primary}: reading every suppression "
                                "needs the table's owner (mailroom_owner) or a superuser", EXIT_FORBIDDEN) from e


@fleet.command("copy-suppressions")
@from_option
@to_option
@json_option
def copy_suppressions(sources: tuple[str, ...], targets: tuple[str, ...], as_json: bool) -> None:
    """Every suppression of the --from shards onto each --to shard, with its
    reason, source and stream scope, through mailroom.suppress (idempotent:
    what a target has already stays, the first reason wins). Run it before a
    new shard takes partitions, again after `settle`, and from a retiring
    shard onto the shards that take its partitions."""
    read: dict[str, int] = {}
    with ExitStack() as stack:
        conns = [stack.enter_context(_connection(url)) for url in targets]
        before = [c.execute(SQL_SUPPRESSED_TOTAL).fetchone()["n"] for c in conns]
        for url in sources:
            read[_safe_connstr(url)] = 0
            for batch in _source_batches(url):
                read[_safe_connstr(url)] += len(batch)
                columns = dict(zip(("address", "reason", "source", "stream"), (list(col) for col in zip(*batch))))
                for c in conns:
                    c.execute(SQL_SUPPRESS_MANY, columns)
        written = []
        for url, c, n in zip(targets, conns, before):
            after = c.execute(SQL_SUPPRESSED_TOTAL).fetchone()["n"]
            written.append({"target": _safe_connstr(url), "database": c.execute(SQL_DATABASE).fetchone()["name"],
                            "copied": sum(read.values()), "new": after - n, "holds": after})
    if as_json:
        _emit_json({"read": read, "targets": written})
        return
    for source, n in read.items():
        click.echo(f"read {n} suppression(s) from {source}")
    click.echo(_table(written, [("database", "target"), ("copied", "copied"), ("new", "new there"),
                                ("holds", "it holds now")]))


def _leftovers(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """What keeps a shard from being drained, one row each, with what to do."""
    left = []
    for r in conn.execute(SQL_LIVE):
        status, n, due = r["status"], r["messages"], r["due"]
        if status == "queued" and due < n:
            left.append({"what": "queued", "count": n, "detail": f"{due} due, {n - due} due later (send_at, windows):"
                         " the runners send them when they come due; or cancel them here and enqueue again"
                         " through the directory"})
        else:
            left.append({"what": status, "count": n, "detail": {
                "queued": "due: the runners are sending it",
                "sending": "leased by a runner now",
                "paused": "held (a paused campaign or sender): resume it (mailroom resume) or cancel it",
                "review": "waiting for an operator decision: mailroom review",
            }.get(status, "live mail")})
    schedules = conn.execute(SQL_ACTIVE_SCHEDULES).fetchone()["n"]
    if schedules:
        left.append({"what": "schedules", "count": schedules,
                     "detail": "active recurring schedules make new mail here: recreate them on the shard that "
                               "owns their address, then deactivate them here"})
    for w in conn.execute(SQL_WEBHOOKS_BEHIND):
        left.append({"what": f"webhook {w['name']}", "count": w["events_behind"],
                     "detail": "events not delivered yet" + (" (the endpoint is paused: resume or delete it)"
                                                             if w["status"] == "paused" else "")})
    return left


def _routed_here(directory: str, database: str) -> list[int]:
    """The partitions of the directory's map that name this database."""
    with _connection(directory) as conn:
        try:
            return conn.execute(SQL_ROUTED_TO, {"database": database}).fetchone()["partitions"]
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as e:
            raise _no_directory(e) from e


@fleet.command("drained")
@click.option("--dsn", required=True, metavar="URL", help="The shard, as a login holding mailroom_operator.")
@click.option("--directory", default=None, metavar="URL", envvar="MAILROOM_FLEET_DSN",
              help="The fleet directory: also check that no partition of its map names this shard.")
@json_option
@click.option("--wait", type=click.FloatRange(0, 86400), default=0.0, show_default=True,
              help="Seconds to wait for it to drain (checking every second).")
def drained(dsn: str, directory: str | None, as_json: bool, wait: float) -> None:
    """Whether a shard holds nothing a runner still has to do: no live mail
    (queued, sending, paused, review, campaign mail not queued yet), no
    active schedule, no webhook event undelivered. Exit 0 when drained: then
    its --dsn may leave the runners. Exit 1 with what is left."""
    deadline = time.monotonic() + wait
    with _connection(dsn) as conn:
        database = conn.execute(SQL_DATABASE).fetchone()["name"]
        while True:
            routed = _routed_here(directory, database) if directory else []
            left = ([{"what": "routed", "count": len(routed),
                      "detail": "partition " + ", ".join(f"p{p}" for p in routed)
                                + " of the map still names it: new mail lands here"}] if routed else [])
            left += _leftovers(conn)
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(1.0)
    if as_json:
        _emit_json({"shard": database, "drained": not left, "left": left})
    elif left:
        click.echo(f"{database}: NOT DRAINED")
        for item in left:
            click.echo(f"! {item['what']} {item['count']}: {item['detail']}")
    else:
        click.echo(f"{database}: drained (nothing queued, sending, paused, in review or scheduled; "
                   "no webhook event undelivered)")
    if left:
        raise OperatorError(f"{database} is not drained: " + ", ".join(f"{i['what']} {i['count']}" for i in left),
                            EXIT_NOT_YET)
