"""`mailroom demo`: the command around mailroom.dev.demo."""

from __future__ import annotations

import os
import sys

import click

from mailroom import queries
from mailroom.dev.demo import DEMO_DB, run_demo
from mailroom.dev.embedded import ClusterError


@click.command("demo")
@click.option("--mails", type=click.IntRange(1, 10_000_000), default=20_000, show_default=True,
              help="How many mails to enqueue.")
@click.option("--runners", type=click.IntRange(1, 64), default=4, show_default=True,
              help="How many `mailroom run` processes.")
@click.option("--concurrency", type=click.IntRange(1, 256), default=8, show_default=True,
              help="Sending threads per runner.")
@click.option("--batch", type=click.IntRange(1, 10000), default=200, show_default=True,
              help="claim_batch size per runner.")
@click.option("--keep-cluster", is_flag=True, help="Leave the embedded cluster running afterwards.")
@click.option("--keep-database", is_flag=True, help=f"Keep the {DEMO_DB} database afterwards (dropped by default).")
def demo_cmd(mails, runners, concurrency, batch, keep_cluster, keep_database):
    """Send N mails through R runners to a local SMTP sink, with a progress bar.

    Everything runs on this machine: the embedded PostgreSQL cluster (started
    if needed, stopped again if this command started it), a fresh database
    `mailroom_demo` deployed with Sqitch (dropped at the end unless
    --keep-database), `mailroom sink` on a free loopback port, and the
    runners. Exit code 0 only when every mail was sent exactly once.
    """
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        code = run_demo(mails, runners, concurrency, batch, keep_cluster, keep_database)
    except (ClusterError, queries.DatabaseUnavailable, queries.QueryError) as e:
        click.echo(f"mailroom: demo: {e}", err=True)
        code = 2
    except KeyboardInterrupt:
        click.echo("\nmailroom: demo interrupted; everything it started is stopped", err=True)
        code = 130
    sys.exit(code)
