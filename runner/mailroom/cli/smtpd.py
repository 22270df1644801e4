"""What `mailroom inbound` and `mailroom submit serve` share: the DSN's
password kept out of the log, and a server run from start to signal with
the exit codes of exitcodes.py."""

from __future__ import annotations

import logging
import signal
import sys
import threading

import click
import psycopg
import psycopg_pool

from mailroom import exitcodes, logs
from mailroom.logs import event


def register_dsn_password(dsn: str) -> None:
    """Redact the DSN's password from every log line (exit 2 on a malformed DSN)."""
    try:
        logs.register_secret(psycopg.conninfo.conninfo_to_dict(dsn).get("password"))
    except psycopg.ProgrammingError as e:
        click.echo(f"mailroom: --dsn: {logs.redact(str(e))}", err=True)
        sys.exit(exitcodes.USAGE)


def serve(server, *, name: str, listening: str, grant: str, where: str, **started) -> None:
    """Start `server` (start(), stop(), store.missing_functions(), counts),
    log `<name>.started`, run until SIGTERM or SIGINT, stop it, log
    `<name>.stopped` with its counts. `listening` is printed once it listens
    (a format string over the server); `grant` names what a role lacking a
    function must be granted; `where` names the options of a bind error."""
    try:
        server.start()
        missing = server.store.missing_functions()
    except psycopg_pool.PoolTimeout as e:
        click.echo(f"mailroom: the database cannot be reached: {logs.redact(str(e))}", err=True)
        sys.exit(exitcodes.UNREACHABLE)
    except (OSError, RuntimeError) as e:
        click.echo(f"mailroom: {where}: {e}", err=True)
        sys.exit(exitcodes.USAGE)
    if missing:
        server.stop()
        click.echo(f"mailroom: this role cannot execute {', '.join(missing)} (grant {grant})", err=True)
        sys.exit(exitcodes.REFUSED)
    click.echo(listening.format(server=server), err=True)
    event(logging.INFO, f"{name}.started", **{k: v(server) if callable(v) else v for k, v in started.items()})
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop()
    event(logging.INFO, f"{name}.stopped", **{k.replace(" ", "_"): v for k, v in server.counts.items()})
