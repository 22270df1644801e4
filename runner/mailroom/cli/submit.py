"""`mailroom submit`: the SMTP submission server (mailroom.submit.server)
and the operator commands for its logins."""

from __future__ import annotations

import sys

import click
import psycopg

from mailroom import exitcodes, logs, queries
from mailroom.cli import smtpd


@click.group("submit", epilog=exitcodes.help_text())
def submit_group() -> None:
    """SMTP submission for applications that cannot call SQL (docs/submission.md).

    `serve` runs the server (AUTH over TLS only); `set-credential`,
    `drop-credential` and `credentials` manage its logins.
    """


@submit_group.command("serve", epilog=exitcodes.help_text())
@click.option("--dsn", required=True, metavar="URL", envvar="MAILROOM_SUBMIT_DSN", show_envvar=True,
              help="The mailroom database, as a login granted mailroom_app and mailroom_submission.")
@click.option("--host", default="127.0.0.1", show_default=True, envvar="MAILROOM_SUBMIT_HOST", show_envvar=True,
              help="Address to listen on.")
@click.option("--starttls-port", type=click.IntRange(-1, 65535), default=2587, show_default=True,
              envvar="MAILROOM_SUBMIT_STARTTLS_PORT", show_envvar=True,
              help="Submission with STARTTLS (587 in production; 0: a free one; -1: off).")
@click.option("--tls-port", type=click.IntRange(-1, 65535), default=2465, show_default=True,
              envvar="MAILROOM_SUBMIT_TLS_PORT", show_envvar=True,
              help="Submission over implicit TLS (465 in production; 0: a free one; -1: off).")
@click.option("--cert", "cert_file", required=True, type=click.Path(dir_okay=False, exists=True),
              envvar="MAILROOM_SUBMIT_CERT", show_envvar=True, help="PEM certificate chain (and key, unless --key).")
@click.option("--key", "key_file", default=None, type=click.Path(dir_okay=False, exists=True),
              envvar="MAILROOM_SUBMIT_KEY", show_envvar=True, help="PEM private key.")
@click.option("--max-size", type=click.IntRange(1024, 100 * 1024 * 1024), default=10 * 1024 * 1024,
              show_default=True, help="Largest mail in bytes (SMTP SIZE; larger: 552).")
@click.option("--max-recipients", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Recipients a mail (more: 452).")
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Mails parsed and queued at once (and database connections).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
def serve_cmd(dsn, host, starttls_port, tls_port, cert_file, key_file, max_size, max_recipients, workers,
              log_format, log_level):
    """Accept mail over SMTP with AUTH (PLAIN, LOGIN) over TLS; queue it in
    one transaction before 250 (451 when the database cannot take it)."""
    import ssl

    from mailroom.submit.server import Submission, tls_context

    logs.setup(log_format, log_level)
    smtpd.register_dsn_password(dsn)
    try:
        tls = tls_context(cert_file, key_file)
    except (OSError, ssl.SSLError) as e:
        click.echo(f"mailroom: --cert/--key: {e}", err=True)
        sys.exit(exitcodes.USAGE)
    try:
        server = Submission(dsn, tls, host=host, starttls_port=None if starttls_port < 0 else starttls_port,
                            tls_port=None if tls_port < 0 else tls_port, max_size=max_size,
                            max_recipients=max_recipients, workers=workers)
    except ValueError as e:
        click.echo(f"mailroom: --starttls-port/--tls-port: {e}", err=True)
        sys.exit(exitcodes.USAGE)
    smtpd.serve(server, name="submit", grant="mailroom_app and mailroom_submission",
                where=f"--host {host} --starttls-port {starttls_port} --tls-port {tls_port}",
                listening=f"mailroom submit: STARTTLS on {host}:{{server.starttls_port}}, "
                          f"implicit TLS on {host}:{{server.tls_port}}",
                host=host, starttls_port=lambda s: s.starttls_port, tls_port=lambda s: s.tls_port)


def _operator_call(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except queries.QueryError as e:
        click.echo(f"mailroom: {e}", err=True)
        sys.exit(exitcodes.REFUSED if e.sqlstate == "42501" else exitcodes.USAGE)
    except queries.DatabaseUnavailable as e:
        click.echo(f"mailroom: the database cannot be reached: {logs.redact(str(e))}", err=True)
        sys.exit(exitcodes.UNREACHABLE)


def _connect(dsn):
    smtpd.register_dsn_password(dsn)
    try:
        return psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row,
                               application_name="mailroom submit")
    except psycopg.Error as e:
        click.echo(f"mailroom: the database cannot be reached: {logs.redact(queries.first_line(e))}", err=True)
        sys.exit(exitcodes.UNREACHABLE)


_operator_dsn = click.option("--dsn", required=True, metavar="URL", envvar="MAILROOM_DSN", show_envvar=True,
                             help="The mailroom database, as an operator (mailroom_operator).")


@submit_group.command("set-credential")
@click.argument("username")
@_operator_dsn
@click.option("--from", "allowed_from", multiple=True, required=True, metavar="ADDRESS|@DOMAIN",
              help="An address or @domain the login may send as (repeatable).")
@click.option("--sender", default="default", show_default=True, help="The sender profile its mail goes out on.")
@click.option("--stream", default="transactional", show_default=True, help="The stream its mail belongs to.")
@click.option("--per-minute", type=click.IntRange(1, 1000000), default=60, show_default=True,
              help="Mails a minute (one per recipient); more: 451 4.7.0.")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin "
              "(else it is asked for twice on the terminal).")
def set_credential_cmd(username, dsn, allowed_from, sender, stream, per_minute, password_stdin):
    """Add or replace an SMTP login. The password is hashed (scrypt) here:
    the database only ever sees the hash."""
    from mailroom.web.console.auth import CredentialsError, hash_password

    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("password", hide_input=True, confirmation_prompt=True)
    try:
        stored = hash_password(password)
    except CredentialsError as e:
        click.echo(f"mailroom: {e}", err=True)
        sys.exit(exitcodes.USAGE)
    with _connect(dsn) as conn:
        created = _operator_call(queries.set_submission_credential, conn, username=username, password_hash=stored,
                                 sender=sender, allowed_from=list(allowed_from), per_minute=per_minute,
                                 stream=stream)
    click.echo(f"{'added' if created else 'replaced'} login {username}: sender {sender}, stream {stream}, "
               f"{per_minute}/min, from {', '.join(a.lower() for a in allowed_from)}")


@submit_group.command("drop-credential")
@click.argument("username")
@_operator_dsn
def drop_credential_cmd(username, dsn):
    """Remove an SMTP login (exit 1 when there was none)."""
    with _connect(dsn) as conn:
        dropped = _operator_call(queries.drop_submission_credential, conn, username)
    click.echo(f"{'dropped' if dropped else 'no such'} login {username}")
    sys.exit(exitcodes.OK if dropped else exitcodes.CRASH)


@submit_group.command("credentials")
@_operator_dsn
def credentials_cmd(dsn):
    """List the SMTP logins and what each may send as (never their hashes)."""
    with _connect(dsn) as conn:
        rows = _operator_call(queries.submission_credential_list, conn)
    for r in rows:
        click.echo(f"{r['username']}\tsender={r['sender']}\tstream={r['stream']}\t{r['per_minute']}/min\t"
                   f"from={','.join(r['allowed_from'])}")
