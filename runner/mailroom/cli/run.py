"""The `mailroom run` and `mailroom sink` commands (registered in cli.py)."""

from __future__ import annotations

import json
import signal
import ssl
import sys
import threading

import click

from mailroom import exitcodes, logs


def _env(name: str) -> dict:
    return {"envvar": f"MAILROOM_{name}", "show_envvar": True}


log_options = [
    click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
                 help="One line per event: key=value text, or one JSON object.", **_env("LOG_FORMAT")),
    click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
                 show_default=True, help="debug also logs every sent mail.", **_env("LOG_LEVEL")),
]


class _SemicolonSeparated(click.ParamType):
    """A repeatable option whose environment variable lists its values separated by ';'."""

    name = "text"
    envvar_list_splitter = ";"


def _some_database(ctx, param, value):
    """--dsn is required unless --dsn-file names the databases (declared
    before --dsn, so click has read it by now)."""
    if not value and ctx.params.get("dsn_file") is None:
        raise click.MissingParameter(ctx=ctx, param=param)
    return value


def _with(options):
    def deco(f):
        for o in reversed(options):
            f = o(f)
        return f
    return deco


@click.command("run", epilog=exitcodes.help_text())
@click.option("--dsn-file", type=click.File("r"), default=None, metavar="FILE",
              help="More databases, one DSN per line ('#' starts a comment).", **_env("DSN_FILE"))
@click.option("--dsn", "dsns", multiple=True, callback=_some_database, type=_SemicolonSeparated(), metavar="URL",
              help="libpq connection string or URL of a mailroom database (a role granted "
                   "mailroom_runner). Example: postgresql://runner@db/app. Repeat it to serve several "
                   "databases from one runner (the variable takes ';'-separated entries).",
              **_env("DSN"))
@click.option("--pooled", is_flag=True, default=False,
              help="The DSNs go through a transaction-mode pooler (PgBouncer pool_mode=transaction): no "
                   "startup options and no prepared statements, the timeouts sent with every call; "
                   "wake-ups only over --listen-dsn, else polling every --poll-interval. "
                   "See docs/scale.md.", **_env("POOLED"))
@click.option("--listen-dsn", "listen_dsns", multiple=True, type=_SemicolonSeparated(), metavar="URL",
              help="With --pooled: a direct connection to the same database for LISTEN and the wake-up "
                   "protocol, one per --dsn in the same order.", **_env("LISTEN_DSN"))
@click.option("--smtp", "smtp_url", required=True, metavar="URL",
              help="Where mail goes: smtp://[user:pass@]host[:port][?starttls][&timeout=S][&cafile=PATH]"
                   "[&verify=0], smtps://..., file://DIR (maildir) or null://.",
              **_env("SMTP_URL"))
@click.option("--concurrency", type=click.IntRange(1, 4096), default=8, show_default=True,
              help="SMTP connections kept open (all on one asyncio thread; file:// and null:// use "
                   "this many threads).", **_env("CONCURRENCY"))
@click.option("--batch", type=click.IntRange(1, 10000), default=100, show_default=True,
              help="Messages claimed per claim_batch call.", **_env("BATCH"))
@click.option("--lease", type=click.FloatRange(2, 86400), default=300.0, show_default=True,
              help="Seconds a claim is held; extended at half while sending.", **_env("LEASE"))
@click.option("--sender", default=None, metavar="NAME",
              help="Serve only messages of this sender profile (default: all).", **_env("SENDER"))
@click.option("--from", "from_address", default="mailroom@localhost", show_default=True, metavar="ADDRESS",
              help="From header and envelope sender when a message sets no From header; "
                   "its domain is also the Message-ID domain.", **_env("FROM"))
@click.option("--message-id-domain", default=None, metavar="DOMAIN",
              help="Domain of Message-IDs (default: the --from domain). Keep it the same on every runner.",
              **_env("MESSAGE_ID_DOMAIN"))
@click.option("--poll-interval", type=click.FloatRange(0.05, 3600), default=5.0, show_default=True,
              help="Seconds between claims when idle and no NOTIFY arrives.", **_env("POLL_INTERVAL"))
@click.option("--grace", type=click.FloatRange(0, 3600), default=30.0, show_default=True,
              help="Seconds the whole stop may take after SIGTERM/SIGINT: in-flight sends, then their "
                   "outcomes and the releases. Every database statement times out at a quarter of it "
                   "(0.25 to 30 s).", **_env("GRACE"))
@click.option("--smtp-timeout", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="Socket timeout of each SMTP step (the URL's ?timeout= wins).", **_env("SMTP_TIMEOUT"))
@click.option("--worker", default=None, metavar="NAME",
              help="Name in the attempts ledger (default: host:pid).", **_env("WORKER"))
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port (0 or unset: off).", **_env("METRICS_PORT"))
@click.option("--metrics-addr", default="127.0.0.1", show_default=True,
              help="Address the metrics server binds to.", **_env("METRICS_ADDR"))
@click.option("--exit-when-idle", is_flag=True, default=False,
              help="Exit once the queue has nothing due and nothing is in flight (for cron-style use).",
              **_env("EXIT_WHEN_IDLE"))
@click.option("--dkim", "dkim_profiles", multiple=True, type=_SemicolonSeparated(),
              metavar="SENDER=DOMAIN:SELECTOR:KEYFILE",
              help="Sign the mail of sender profile SENDER with DKIM (d=DOMAIN, s=SELECTOR); the key file "
                   "is PEM, RSA of 2048+ bits or Ed25519. Repeatable; the variable takes ';'-separated "
                   "entries. Keys are read once at start: see docs/dkim.md.", **_env("DKIM"))
@click.option("--unsubscribe-url", "unsubscribe_urls", multiple=True, type=_SemicolonSeparated(),
              metavar="[SENDER=]BASE_URL",
              help="One-click unsubscribe (RFC 8058): mail of a stream with unsubscribe headers gets "
                   "List-Unsubscribe <BASE_URL/u/TOKEN> and List-Unsubscribe-Post, and its templates "
                   "{{ unsubscribe_url }}. Per sender profile with SENDER=, else for every sender. Needs "
                   "signing keys. See docs/unsubscribe.md.", **_env("UNSUBSCRIBE_URL"))
@click.option("--unsubscribe-mailto", "unsubscribe_mailto", multiple=True, type=_SemicolonSeparated(),
              metavar="[SENDER=]DOMAIN",
              help="Also offer <mailto:unsubscribe+TOKEN@DOMAIN> in List-Unsubscribe (per sender profile "
                   "with SENDER=).", **_env("UNSUBSCRIBE_MAILTO"))
@click.option("--no-unsubscribe-headers", "without_unsubscribe", is_flag=True, default=False,
              help="Send the mail of streams that want unsubscribe headers (broadcast) without them when no "
                   "--unsubscribe-url is given. Without this flag such a runner refuses to start (exit 2): "
                   "Gmail and Yahoo require one-click unsubscribe for bulk mail.", **_env("NO_UNSUBSCRIBE_HEADERS"))
@click.option("--signing-keys", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="The signing keys file (KEYID=BASE64URL lines, the first signs); default: the file in "
                   "MAILROOM_SIGNING_KEYS_FILE or the keys in MAILROOM_SIGNING_KEYS.")
@click.option("--verp", "verp_profiles", multiple=True, type=_SemicolonSeparated(),
              metavar="SENDER=BOUNCE_DOMAIN",
              help="Send the mail of sender profile SENDER with the envelope sender "
                   "bounce+<message id>.<signature>@BOUNCE_DOMAIN, so `mailroom inbound` matches its "
                   "bounces (the From header is unchanged). Needs the signing keys (--signing-keys). "
                   "Repeatable; the variable takes ';'-separated entries. See docs/bounces.md.", **_env("VERP"))
@click.option("--webhook-secrets", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="The webhook secrets (NAME=BASE64URL lines; an endpoint's secret_name names one): this runner "
                   "delivers the event feed to the endpoints whose secret it holds. Default: the file in "
                   "MAILROOM_WEBHOOK_SECRETS_FILE or the secrets in MAILROOM_WEBHOOK_SECRETS; none: no webhooks. "
                   "See docs/events.md.")
@click.option("--webhook-ca-file", type=click.Path(exists=True, dir_okay=False), default=None, metavar="FILE",
              help="PEM certificates to trust for webhook endpoints instead of the system's.",
              **_env("WEBHOOK_CA_FILE"))
# Hidden: the tests shorten them; runner_status derives "alive" from the interval each runner reports.
@click.option("--heartbeat-interval", type=click.FloatRange(1, 3600), default=5.0, hidden=True,
              **_env("HEARTBEAT_INTERVAL"))
@click.option("--summary-interval", type=click.FloatRange(0.1, 86400), default=60.0, hidden=True,
              **_env("SUMMARY_INTERVAL"))
@_with(log_options)
def run_cmd(dsns, dsn_file, pooled, listen_dsns, smtp_url, concurrency, batch, lease, sender, from_address, message_id_domain,
            poll_interval, grace, smtp_timeout, worker, metrics_port, metrics_addr, exit_when_idle,
            dkim_profiles, unsubscribe_urls, unsubscribe_mailto, without_unsubscribe, signing_keys, verp_profiles,
            webhook_secrets, webhook_ca_file, heartbeat_interval, summary_interval, log_format, log_level):
    """Claim, render and send mail until stopped.

    The loop: reclaim -> claim_batch -> render -> send on N connections ->
    outcomes batched into mark_outcomes calls (at least every 100 ms) and
    kept until the database has them. Idle runners wait on LISTEN mailroom.
    SIGTERM or SIGINT: stop claiming, finish in-flight sends, record them and
    release the rest, all within --grace; a second signal exits at once.
    """
    from mailroom import metrics, signing
    from mailroom.send import dkim, unsubscribe, verp, webhooks
    from mailroom.send.runner import FatalError, Runner, Settings, default_worker_name
    from mailroom.send.transport import Transport, TransportConfigError, parse_url

    logs.setup(log_format, log_level)
    dsns = list(dsns)
    if dsn_file is not None:
        dsns += [line.strip() for line in dsn_file if line.strip() and not line.lstrip().startswith("#")]
    if not dsns:
        click.echo("mailroom: --dsn-file: names no database", err=True)
        sys.exit(exitcodes.USAGE)
    if listen_dsns and not pooled:
        click.echo("mailroom: --listen-dsn goes with --pooled (without it the runner listens on --dsn)", err=True)
        sys.exit(exitcodes.USAGE)
    try:  # every key now, before anything is claimed: a bad one never stops a drain halfway
        signers = dkim.load_profiles(dkim_profiles)
    except dkim.DkimConfigError as e:  # a bad --dkim key: restarting will not help
        click.echo(f"mailroom: {logs.redact(str(e))}", err=True)
        sys.exit(exitcodes.USAGE)
    try:  # the keys too: a bad keyring or --verp entry stops the runner before it claims anything
        verp_domains = verp.parse_profiles(verp_profiles)
        keyring = unsubscribe.load_keyring_if_any(signing_keys) if (unsubscribe_urls or verp_domains) else None
        if verp_domains and keyring is None:
            raise verp.VerpConfigError("--verp needs signing keys (--signing-keys, MAILROOM_SIGNING_KEYS_FILE "
                                       "or MAILROOM_SIGNING_KEYS)")
        unsubscribing = unsubscribe.Unsubscribe.configure(unsubscribe_urls, unsubscribe_mailto,
                                                          keyring if unsubscribe_urls else None)
    except (signing.SigningKeyError, ValueError) as e:
        click.echo(f"mailroom: {e}", err=True)
        sys.exit(exitcodes.USAGE)
    try:
        webhook_keys = webhooks.load_secrets(webhook_secrets)
    except signing.SigningKeyError as e:
        click.echo(f"mailroom: {e}", err=True)
        sys.exit(exitcodes.USAGE)
    try:
        url = parse_url(smtp_url, default_timeout=smtp_timeout)
        settings = Settings(
            dsns=dsns, pooled=pooled, listen_dsns=list(listen_dsns), smtp=smtp_url, concurrency=concurrency, batch=batch, lease=lease, sender=sender,
            poll_interval=poll_interval, grace=grace, from_address=from_address,
            message_id_domain=message_id_domain, worker=worker or default_worker_name(),
            smtp_timeout=smtp_timeout, exit_when_idle=exit_when_idle, dkim=signers,
            unsubscribe=unsubscribing, without_unsubscribe=without_unsubscribe, verp_domains=verp_domains,
            verp=verp.Verp(keyring) if verp_domains else None,
            heartbeat_interval=heartbeat_interval, summary_interval=summary_interval,
            webhook_secrets=webhook_keys, webhook_ca_file=webhook_ca_file,
        )
        runner = Runner(settings, Transport(url))
    except (TransportConfigError, ValueError) as e:
        click.echo(f"mailroom: {logs.redact(str(e))}", err=True)
        sys.exit(exitcodes.USAGE)
    except FatalError as e:  # a --dsn that cannot be parsed
        click.echo(f"mailroom: {logs.redact(str(e))}", err=True)
        sys.exit(e.exit_code)
    runner.install_signal_handlers()
    if metrics_port:
        try:
            metrics.serve(metrics_port, metrics_addr)
        except OSError as e:
            click.echo(f"mailroom: --metrics-port {metrics_port}: {e}", err=True)
            sys.exit(exitcodes.USAGE)
    try:
        code = runner.run()
    except FatalError as e:  # at start: unreachable (3, a supervisor may retry), refused (4), bad --dsn (2)
        logs.event("error", "runner.fatal", error=str(e), exit_code=e.exit_code)
        click.echo(f"mailroom: {logs.redact(str(e))}", err=True)
        sys.exit(e.exit_code)
    sys.exit(code)


@click.command("sink")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.", **_env("SINK_HOST"))
@click.option("--port", type=click.IntRange(0, 65535), default=2525, show_default=True,
              help="Port to listen on (0: a free one, printed at start).", **_env("SINK_PORT"))
@click.option("--store", type=click.Path(file_okay=False), default=None,
              help="Store every accepted mail in this maildir.", **_env("SINK_STORE"))
@click.option("--stats-file", type=click.Path(dir_okay=False), default=None,
              help="Keep a JSON stats file up to date (every 0.25 s and at exit).", **_env("SINK_STATS_FILE"))
@click.option("--reply", default=None, metavar="'CODE TEXT'",
              help="Answer this instead of accepting, e.g. '451 4.3.0 Try again later'.", **_env("SINK_REPLY"))
@click.option("--reply-stage", type=click.Choice(["rcpt", "data"]), default="data", show_default=True,
              help="Answer --reply to RCPT TO or after the body.")
@click.option("--reply-to", "reply_rcpt", default="", metavar="TEXT",
              help="Only for recipients containing TEXT.")
@click.option("--reply-times", type=click.IntRange(0), default=0, show_default=True,
              help="Only the first N attempts of each Message-ID (0: always).")
@click.option("--drop", is_flag=True,
              help="Close the connection after the body without answering (the sender cannot "
                   "know the outcome: ambiguous). Honours --reply-to and --reply-times.")
@click.option("--delay", type=click.FloatRange(0), default=0.0, show_default=True,
              help="Seconds to wait before accepting each mail.", **_env("SINK_DELAY"))
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="PEM certificate: offer STARTTLS (with --tls-key).")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None, help="PEM private key.")
@click.option("--implicit-tls", is_flag=True, help="TLS from the first byte (smtps://) instead of STARTTLS.")
@click.option("--auth", default=None, metavar="USER:PASSWORD",
              help="Require AUTH with these credentials.", **_env("SINK_AUTH"))
def sink_cmd(host, port, store, stats_file, reply, reply_stage, reply_rcpt, reply_times, drop, delay,
             tls_cert, tls_key, implicit_tls, auth):
    """A local SMTP server for the demo, tests and benchmarks.

    Counts what it receives, reports duplicates by Message-ID, optionally
    stores mail and answers given codes. Runs until SIGTERM/SIGINT, then
    prints its stats as one JSON line on stdout.
    """
    from mailroom.dev.sink import Rule, Sink
    from mailroom.net import free_port

    rules = []
    if reply:
        try:
            rules.append(Rule.parse(reply, stage=reply_stage, rcpt_contains=reply_rcpt, times=reply_times))
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--reply") from None
    if drop:
        rules.append(Rule(drop=True, rcpt_contains=reply_rcpt, times=reply_times))
    ctx = None
    if tls_cert or tls_key:
        if not (tls_cert and tls_key):
            raise click.UsageError("--tls-cert and --tls-key go together")
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(tls_cert, tls_key)
    elif implicit_tls:
        raise click.UsageError("--implicit-tls needs --tls-cert and --tls-key")
    credentials = None
    if auth:
        user, sep, password = auth.partition(":")
        if not sep:
            raise click.BadParameter("expected USER:PASSWORD", param_hint="--auth")
        credentials = (user, password)
    sink = Sink(
        host, port or free_port(host), rules=rules, delay=delay, store=store, stats_file=stats_file,
        starttls_context=None if implicit_tls else ctx, tls_context=ctx if implicit_tls else None,
        auth=credentials,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    sink.start()
    click.echo(f"mailroom sink: listening on {host}:{sink.port}", err=True)
    while not stop.wait(0.5):
        pass
    sink.stop()
    click.echo(json.dumps(sink.stats()))


def register(group: click.Group) -> None:
    """`sink` and `demo` are registered lazily by cli.main (they load aiosmtpd
    and the embedded cluster, which `mailroom run` must not import)."""
    group.add_command(run_cmd)
