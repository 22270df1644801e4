"""`mailroom web`: the operator console on a local development server."""

from __future__ import annotations

import sys

import click

from mailroom.web.devserver import listen_options


@click.command("web")
@listen_options("web", old_bind_envvar="MAILROOM_CONSOLE_BIND")
@click.option("--dsn", envvar=["MAILROOM_CONSOLE_DSN", "MAILROOM_DSN"], metavar="URL",
              help="libpq URL of a login that holds mailroom_operator and nothing more.")
@click.option("--fleet-dsn", envvar="MAILROOM_CONSOLE_FLEET_DSN", metavar="URL",
              help="A fleet directory (docs/fleet.md), as a login that holds mailroom_fleet_operator and nothing "
                   "more: the Fleet page shows every shard. Alone (no --dsn), that page is the console.")
@click.option("--users-file", type=click.Path(dir_okay=False), envvar="MAILROOM_CONSOLE_USERS_FILE",
              help="Operator accounts, one NAME:HASH a line (hashes from --hash-password).")
@click.option("--trust-header", metavar="NAME", envvar="MAILROOM_CONSOLE_TRUST_HEADER",
              help="Take the operator's name from this request header (only behind a proxy that authenticates and sets it).")
@click.option("--hash-password", is_flag=True,
              help="Read a password (twice, not echoed) and print its hash for the users file; then exit.")
def web_cmd(host, port, dsn, fleet_dsn, users_file, trust_header, hash_password):
    """The operator console in the browser (a development server; run it
    under gunicorn in production: docs/console.md)."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(message)s")
    from mailroom.web.console.auth import hash_password as make_hash

    if hash_password:
        password = click.prompt("password", hide_input=True, confirmation_prompt=True, err=True)
        click.echo(make_hash(password))
        return
    from werkzeug.serving import make_server

    from mailroom.web.console import ConsoleConfigError, accounts_from_file, close_app, create_app
    from mailroom.web.console.db import ConsoleDatabaseError

    try:
        accounts = accounts_from_file(users_file) if users_file else None
        app = create_app(dsn, fleet_dsn=fleet_dsn, accounts=accounts, trust_header=trust_header)
    except (ConsoleConfigError, ConsoleDatabaseError) as e:
        click.echo(f"mailroom: {e}", err=True)
        sys.exit(e.exit_code)
    server = make_server(host, port, app, threaded=True)
    click.echo(f"mailroom: console on http://{host}:{server.server_port}/ (Ctrl-C stops it)", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        close_app(app)
