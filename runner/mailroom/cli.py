"""The `mailroom` command line."""

from __future__ import annotations

import importlib
import sys

import click

from mailroom import __version__, exitcodes


class LazyGroup(click.Group):
    """A group whose commands named in `lazy` ("name": "module:attribute") are
    imported only when used or listed in --help: `mailroom run` must not load
    the test-only servers (the sink's aiosmtpd, the embedded cluster)."""

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        if name in self.lazy and name not in self.commands:
            module, attr = self.lazy[name].split(":")
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, lazy={"demo": "mailroom.demo:demo_cmd", "sink": "mailroom.runcli:sink_cmd",
                                "inbound": "mailroom.inbound_server:inbound_cmd"},
             context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "MAILROOM"},
             epilog=exitcodes.help_text())
@click.version_option(__version__, prog_name="mailroom")
def main() -> None:
    """mailroom: reliable email delivery on PostgreSQL.

    The queue lives in PostgreSQL functions; `mailroom run` claims, renders,
    sends over SMTP and reports outcomes. Every option can also be set through
    an environment variable MAILROOM_<OPTION> (for example MAILROOM_DSN).
    """


def _err(message: str) -> None:
    click.echo(f"mailroom: {message}", err=True)


def _cluster():
    from mailroom.embedded import Cluster

    return Cluster.for_checkout()


def _cluster_error():
    from mailroom.embedded import ClusterError

    return ClusterError


@main.group()
def db() -> None:
    """The embedded PostgreSQL cluster of this checkout (for demo, tests, dev).

    The cluster lives in .mailroom/ (git-ignored), listens on a free port of
    127.0.0.1 only, preloads pg_cron, and has the schema deployed with Sqitch.
    """


@db.command("up")
@click.option("--no-deploy", is_flag=True, help="Start the cluster but do not run sqitch deploy.")
def db_up(no_deploy: bool) -> None:
    """Initialise and start the cluster, create the database, deploy. Idempotent."""
    try:
        _cluster().up(deploy=not no_deploy, log=lambda m: click.echo(m, err=True))
    except _cluster_error() as e:
        _err(str(e))
        sys.exit(1)


@db.command("down")
def db_down() -> None:
    """Stop the cluster (its data stays; `db up` starts it again)."""
    try:
        if not _cluster().down(log=lambda m: click.echo(m, err=True)):
            click.echo("mailroom: embedded cluster was not running", err=True)
    except _cluster_error() as e:
        _err(str(e))
        sys.exit(1)


@db.command("url")
@click.option("--database", default="mailroom", show_default=True, help="Database name in the URL.")
def db_url(database: str) -> None:
    """Print the libpq URL of the running cluster (for --dsn, psql, psycopg)."""
    try:
        click.echo(_cluster().url(database))
    except _cluster_error() as e:
        _err(str(e))
        sys.exit(1)


@db.command("status")
def db_status() -> None:
    """Say whether the cluster runs, where, and on which port. Exit 3 when stopped."""
    cluster = _cluster()
    if cluster.is_running():
        click.echo(f"running  {cluster.url()}  data={cluster.data_dir}")
    else:
        click.echo(f"stopped  data={cluster.data_dir}")
        sys.exit(3)


# The runner's commands live in their own module; registered here.
from mailroom import runcli  # noqa: E402

runcli.register(main)

# Operator commands (status, inspect, retry, cancel, review) live in their own module.
from mailroom import operations as _operations  # noqa: E402

_operations.register(main)


if __name__ == "__main__":
    main()
