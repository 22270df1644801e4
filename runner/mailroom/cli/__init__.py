"""The `mailroom` command line."""

from __future__ import annotations

import importlib
import sys

import click

from mailroom import __version__, exitcodes
from mailroom.web.devserver import listen_options


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


@click.group(cls=LazyGroup, lazy={"demo": "mailroom.cli.demo:demo_cmd", "sink": "mailroom.cli.run:sink_cmd",
                                   "web": "mailroom.cli.web:web_cmd",
                                   "inbound": "mailroom.cli.inbound:inbound_cmd",
                                   "fleet": "mailroom.cli.fleet:fleet",
                                   "submit": "mailroom.cli.submit:submit_group"},
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
    from mailroom.dev.embedded import Cluster

    return Cluster.for_checkout()


def _cluster_error():
    from mailroom.dev.embedded import ClusterError

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


@db.command("console-login")
@click.option("--database", default="mailroom", show_default=True, help="The database the console will read.")
@click.option("--name", default="operator", show_default=True, help="The operator account's name.")
def db_console_login(database: str, name: str) -> None:
    """Make a console login on the embedded cluster and print how to start
    `mailroom web` with it: the role mailroom_console (mailroom_operator and
    nothing more) and an account with a new random password in
    .mailroom/console-users (its hash only). Development only: docs/console.md
    says how to make one in production."""
    from mailroom.web.console.devlogin import create_console_login

    cluster = _cluster()
    try:
        login = create_console_login(cluster.url(database), cluster.state_dir / "console-users", name=name)
    except (_cluster_error(), ValueError) as e:
        _err(str(e))
        sys.exit(1)
    click.echo("console login on the embedded cluster (development only):")
    click.echo(login.instructions())


@main.command("webhooks")
@click.option("--dsn", required=True, help="Database URL of a login role granted mailroom_feedback.")
@listen_options("webhooks", old_listen=True)
def webhooks_cmd(dsn: str, host: str, port: int) -> None:
    """Provider webhooks (SES through SNS, Mailgun, SendGrid) on a development
    server. Keys and topics come from MAILROOM_SES_TOPIC_ARNS,
    MAILROOM_SES_CERT_FILES, MAILROOM_MAILGUN_SIGNING_KEY(_FILE),
    MAILROOM_SENDGRID_PUBLIC_KEY(_FILE); production runs
    mailroom.web.feedback_app under gunicorn (docs/webhooks.md)."""
    from werkzeug.serving import run_simple

    from mailroom.web import feedback_app
    from mailroom import logs

    logs.setup()
    try:
        config = feedback_app.FeedbackConfig.from_env(MAILROOM_DSN=dsn)
    except ValueError as e:
        _err(str(e))
        sys.exit(exitcodes.USAGE)
    try:
        app = feedback_app.create_app(config)
    except Exception as e:  # psycopg_pool.PoolTimeout: the database cannot be reached
        _err(f"the database could not be reached: {e}")
        sys.exit(exitcodes.UNREACHABLE)
    run_simple(host, port, app, threaded=True)


@main.command("unsubscribe-server")
@click.option("--dsn", required=True, metavar="URL", envvar="MAILROOM_UNSUBSCRIBE_DSN",
              help="The database, as a login that is a member of mailroom_unsubscribe only.")
@click.option("--signing-keys", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="The signing keys file; default: MAILROOM_SIGNING_KEYS_FILE or MAILROOM_SIGNING_KEYS.")
@listen_options("unsubscribe-server")
def unsubscribe_server_cmd(dsn, signing_keys, host, port):
    """Serve one-click unsubscribe (RFC 8058) for development.

    POST /u/TOKEN with List-Unsubscribe=One-Click unsubscribes; GET shows a
    confirmation page. In production run the same app under gunicorn behind a
    reverse proxy: see docs/unsubscribe.md.
    """
    from mailroom.signing import SigningKeyError
    from mailroom.web.unsubscribe_app import create_app, make_dev_server

    try:
        app = create_app(dsn, keys_file=signing_keys)
        server = make_dev_server(app, host, port)
    except (SigningKeyError, ValueError, OSError) as e:
        _err(str(e))
        sys.exit(exitcodes.USAGE)
    click.echo(f"mailroom: unsubscribe service on http://{host}:{server.server_port}/u/<token>", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


@main.command("signing-key")
@click.argument("key_id")
def signing_key_cmd(key_id):
    """Print a new KEYID=SECRET line for a signing keys file (put it first to sign with it)."""
    from mailroom.signing import SigningKeyError, new_key_line

    try:
        click.echo(new_key_line(key_id))
    except SigningKeyError as e:
        _err(str(e))
        sys.exit(exitcodes.USAGE)


# The runner's commands live in their own module; registered here.
from mailroom.cli import run as _run  # noqa: E402

_run.register(main)

# Operator commands (status, inspect, retry, cancel, review) live in their own module.
from mailroom.cli import operations as _operations  # noqa: E402

_operations.register(main)


if __name__ == "__main__":
    main()
