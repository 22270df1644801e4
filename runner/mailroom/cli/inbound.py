"""`mailroom inbound`: the command that starts the bounce domain's server
(mailroom.inbound.server)."""

from __future__ import annotations

import sys

import click

from mailroom import exitcodes, logs, signing
from mailroom.cli import smtpd
from mailroom.inbound.server import Inbound, unsubscribe_verifier
from mailroom.send import verp


@click.command("inbound", epilog=exitcodes.help_text())
@click.option("--dsn", required=True, metavar="URL", envvar="MAILROOM_DSN", show_envvar=True,
              help="The mailroom database, as a role granted mailroom_feedback.")
@click.option("--host", default="127.0.0.1", show_default=True, envvar="MAILROOM_INBOUND_HOST", show_envvar=True,
              help="Address to listen on (0.0.0.0 for the bounce domain's MX).")
@click.option("--port", type=click.IntRange(0, 65535), default=2526, show_default=True,
              envvar="MAILROOM_INBOUND_PORT", show_envvar=True, help="Port to listen on (0: a free one, printed).")
@click.option("--lmtp", is_flag=True, default=False, help="Speak LMTP (RFC 2033) instead of SMTP: behind Postfix.")
@click.option("--domain", "domains", multiple=True, metavar="DOMAIN",
              help="Accept recipients at this bounce domain only (repeatable; default: any).")
@click.option("--signing-keys", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="The signing keys file VERP addresses and unsubscribe tokens are checked with (the runner's); "
                   "default: the file in MAILROOM_SIGNING_KEYS_FILE or the keys in MAILROOM_SIGNING_KEYS.")
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Mails parsed and stored at once (and database connections).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
def inbound_cmd(dsn, host, port, lmtp, domains, signing_keys, workers, log_format, log_level):
    """Receive DSNs, feedback reports and mailto: unsubscribes for the bounce
    domain; record them (250 only once the database has them, else 451)."""
    logs.setup(log_format, log_level)
    smtpd.register_dsn_password(dsn)
    try:
        keyring = signing.Keyring.load(signing_keys)
    except signing.SigningKeyError as e:
        click.echo(f"mailroom: {e}", err=True)
        sys.exit(exitcodes.USAGE)
    server = Inbound(dsn, verp.Verp(keyring), host=host, port=port, lmtp=lmtp, domains=domains,
                     unsubscribe_token=unsubscribe_verifier(keyring), workers=workers)
    smtpd.serve(server, name="inbound", grant="mailroom_feedback", where=f"--host {host} --port {port}",
                listening=f"mailroom inbound: {'LMTP' if lmtp else 'SMTP'} on {host}:{{server.port}}",
                host=host, port=lambda s: s.port, lmtp=lmtp)
