"""`mailroom web`: the operator console, a Flask app.

    create_app(dsn, accounts=...)        in code (tests, embedding)
    gunicorn 'mailroom.web.console:create_app()'   configured from the environment

It connects as a login that holds mailroom_operator and nothing more, reads
the operator views and functions, and writes only through the operator
functions. Given a fleet directory too (fleet_dsn, a login holding
mailroom_fleet_operator and nothing more), it shows every shard's status on
/fleet; given the directory alone, that page is the console. Secure by default: every page needs a signed-in operator (or,
only when told, a reverse proxy's authenticated-user header), every form
carries a CSRF token, and every response sends a Content-Security-Policy
without inline script. See docs/console.md.
"""

from __future__ import annotations

import datetime as dt
import hmac
import logging
import os
import secrets
from pathlib import Path
from typing import Any

import psycopg
from flask import Flask, abort, flash, g, redirect, render_template, request, session, url_for

from mailroom import exitcodes, logs
from mailroom.web.console import charts
from mailroom.web.console import db as sql
from mailroom.web.console.auth import Accounts, CredentialsError
from mailroom.web.console.db import FLEET_FORBIDDEN_ROLES, FLEET_ROLE, ConsoleDatabaseError, Database
from mailroom.formatting import human

log = logging.getLogger("mailroom.console")

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; frame-ancestors 'none'; "
                               "form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
SUPPRESSION_REASONS = ("manual", "unsubscribed", "hard_bounce", "complaint")
REVIEW_DECISIONS = ("sent", "retry", "cancel")


class ConsoleConfigError(RuntimeError):
    """The console cannot start as configured (says what to set)."""

    exit_code = exitcodes.USAGE


def _read_secret(name: str) -> str | None:
    """MAILROOM_CONSOLE_<name>, or the file named by MAILROOM_CONSOLE_<name>_FILE."""
    path = os.environ.get(f"MAILROOM_CONSOLE_{name}_FILE")
    if path:
        try:
            return Path(path).read_text()
        except OSError as e:
            raise ConsoleConfigError(f"MAILROOM_CONSOLE_{name}_FILE: cannot read {path}: {e.strerror}") from None
    return os.environ.get(f"MAILROOM_CONSOLE_{name}")


def accounts_from_file(path: str) -> Accounts:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConsoleConfigError(f"--users-file: cannot read {path}: {e.strerror}") from None
    try:
        return Accounts.parse(text, path)
    except CredentialsError as e:
        raise ConsoleConfigError(str(e)) from None


def accounts_from_env() -> Accounts | None:
    text = _read_secret("USERS")
    if text is None:
        return None
    try:
        return Accounts.parse(text, "MAILROOM_CONSOLE_USERS")
    except CredentialsError as e:
        raise ConsoleConfigError(str(e)) from None


# A fleet page waits this long for the directory (a hung shard is ended by
# nothing else: docs/fleet.md).
FLEET_STATEMENT_TIMEOUT = "30s"


def fleet_database(fleet_dsn: str) -> Database:
    return Database(fleet_dsn, role=FLEET_ROLE, forbidden=FLEET_FORBIDDEN_ROLES, option="--fleet-dsn",
                    suggested_login="mailroom_fleet_console", statement_timeout=FLEET_STATEMENT_TIMEOUT)


def create_app(dsn: str | None = None, *, fleet_dsn: str | None = None, accounts: Accounts | None = None,
               secret_key: str | bytes | None = None, trust_header: str | None = None,
               database: Database | None = None, fleet: Database | None = None,
               secure_cookies: bool | None = None) -> Flask:
    """The console. Without arguments everything comes from the environment:
    MAILROOM_CONSOLE_DSN (else MAILROOM_DSN), MAILROOM_CONSOLE_FLEET_DSN,
    MAILROOM_CONSOLE_USERS[_FILE], MAILROOM_CONSOLE_SECRET_KEY[_FILE],
    MAILROOM_CONSOLE_TRUST_HEADER, MAILROOM_CONSOLE_SECURE_COOKIES. At least
    one database: a shard (dsn) or a fleet directory (fleet_dsn), or both."""
    dsn = dsn or os.environ.get("MAILROOM_CONSOLE_DSN") or os.environ.get("MAILROOM_DSN")
    fleet_dsn = fleet_dsn or os.environ.get("MAILROOM_CONSOLE_FLEET_DSN")
    if database is None and fleet is None and not dsn and not fleet_dsn:
        raise ConsoleConfigError("no database: give --dsn (a mailroom database) or --fleet-dsn (a fleet directory), "
                                 "or set MAILROOM_CONSOLE_DSN or MAILROOM_CONSOLE_FLEET_DSN")
    opened: list[Database] = []
    try:
        # ConsoleDatabaseError says why one cannot serve, with an exit code.
        if database is None and dsn:
            database = Database(dsn)
            opened.append(database)
            database.open()
        if fleet is None and fleet_dsn:
            fleet = fleet_database(fleet_dsn)
            opened.append(fleet)
            fleet.open()
        return _configured_app(database, fleet, accounts, secret_key, trust_header, secure_cookies)
    except (ConsoleConfigError, ConsoleDatabaseError):
        for db in opened:
            db.close()
        raise


def _configured_app(database: Database | None, fleet: Database | None, accounts: Accounts | None,
                    secret_key: str | bytes | None, trust_header: str | None, secure_cookies: bool | None) -> Flask:
    accounts = accounts if accounts is not None else accounts_from_env()
    trust_header = trust_header or os.environ.get("MAILROOM_CONSOLE_TRUST_HEADER") or None
    if accounts is None and trust_header is None:
        raise ConsoleConfigError(
            "no operator accounts: set MAILROOM_CONSOLE_USERS_FILE to a file of NAME:HASH lines "
            "(mailroom web --hash-password), or trust a reverse proxy's header with --trust-header")
    key = secret_key or _read_secret("SECRET_KEY")
    if not key:
        # Sessions then end when the process does, and several gunicorn
        # workers would not know each other's: fine for `mailroom web`.
        log.warning("console.ephemeral_secret_key: set MAILROOM_CONSOLE_SECRET_KEY(_FILE) to keep sessions "
                    "across restarts and gunicorn workers")
        key = secrets.token_bytes(32)
    if secure_cookies is None:
        secure_cookies = os.environ.get("MAILROOM_CONSOLE_SECURE_COOKIES", "") not in ("", "0", "false", "no")

    app = Flask(__name__)
    app.config.update(
        SECRET_KEY=key.strip() if isinstance(key, str) else key,
        SESSION_COOKIE_NAME="mailroom_console",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_SECURE=secure_cookies,
        PERMANENT_SESSION_LIFETIME=dt.timedelta(hours=12),
        MAX_CONTENT_LENGTH=64 * 1024,
    )
    app.extensions["mailroom"] = {"db": database, "fleet": fleet, "accounts": accounts, "trust_header": trust_header}
    app.jinja_env.filters["human"] = human
    app.jinja_env.globals["csrf_token"] = _csrf_token
    app.jinja_env.globals["pages"] = {"shard": database is not None, "fleet": fleet is not None}
    _install_security(app)

    @app.errorhandler(psycopg.OperationalError)
    def database_down(e):
        log.error("console.db_error error=%s", logs.redact(str(e).strip().splitlines()[0] if str(e) else ""))
        return render_template("error.html", code=503, message="the database cannot be reached right now"), 503

    if database is not None:
        _install_views(app)
    else:
        # The directory alone: its page is the console's home.
        app.add_url_rule("/", "overview", lambda: redirect(url_for("fleet")))
    if fleet is not None:
        _install_fleet_view(app)
    return app


def close_app(app: Flask) -> None:
    """Close the console's database pools."""
    for key in ("db", "fleet"):
        if app.extensions["mailroom"][key] is not None:
            app.extensions["mailroom"][key].close()


# --- authentication, CSRF, headers -------------------------------------------------

def _csrf_token() -> str:
    token = session.get("csrf")
    if not token:
        token = session["csrf"] = secrets.token_urlsafe(32)
    return token


def _install_security(app: Flask) -> None:
    cfg = app.extensions["mailroom"]

    @app.before_request
    def authenticate():
        g.user = None
        if cfg["trust_header"]:
            # Only when told: the proxy in front authenticated the user and
            # strips this header from what clients send.
            g.user = request.headers.get(cfg["trust_header"]) or None
        if g.user is None:
            g.user = session.get("user")
        if request.method == "POST" and not _csrf_ok():
            log.warning("console.csrf_refused path=%s", request.path)
            abort(400, description="missing or wrong CSRF token: reload the page and try again")
        if g.user is None and request.endpoint not in ("login", "static"):
            if request.method == "GET":
                return redirect(url_for("login", next=request.full_path if request.query_string else request.path))
            abort(401)

    @app.after_request
    def headers(response):
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if request.endpoint != "static":
            response.headers["Cache-Control"] = "no-store"  # pages show live, private data
        return response

    @app.route("/login", methods=["GET", "POST"])
    def login():
        if request.method == "POST":
            accounts: Accounts | None = cfg["accounts"]
            name = request.form.get("username", "")
            password = request.form.get("password", "")
            if accounts is not None and accounts.check(name, password):
                session.clear()
                session.permanent = True
                session["user"] = name
                _csrf_token()  # a new token with the new session
                log.info("console.login user=%s", name)
                return redirect(_safe_next(request.args.get("next")))
            log.warning("console.login_failed user=%s", name)
            flash("wrong name or password", "error")
            return render_template("login.html"), 401
        return render_template("login.html")

    @app.route("/logout", methods=["POST"])
    def logout():
        session.clear()
        return redirect(url_for("login"))


def _csrf_ok() -> bool:
    expected = session.get("csrf")
    given = request.form.get("csrf_token", "")
    return bool(expected) and hmac.compare_digest(expected.encode(), given.encode())


def _safe_next(target: str | None) -> str:
    """Back to the page asked for, but only on this site (no open redirect)."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return url_for("overview")


# --- pages ------------------------------------------------------------------------------

def _db() -> Database:
    from flask import current_app

    return current_app.extensions["mailroom"]["db"]


def _write(statement: str, params: dict[str, Any], done: str) -> bool:
    """One write through an operator function; its refusal (bad input, a
    state that does not allow it) is shown to the operator, not raised."""
    try:
        row = _db().one(statement, params)
    except psycopg.Error as e:
        text = (e.diag.message_primary or str(e)).removeprefix("mailroom: ")
        if e.diag.sqlstate and e.diag.sqlstate[:2] in ("22", "55", "P0", "23"):
            flash(text, "error")
            return False
        raise
    log.info("console.write user=%s action=%s", g.user, done)
    flash(done.format(result=row["result"] if row else None), "ok")
    return True


def _button(actions: dict[str, str], action: str, params: dict[str, Any], done: str, back: str):
    """A page's action button: one of its known operator functions, then the page again."""
    if action not in actions:
        abort(404)
    _write(actions[action], params, done)
    return redirect(url_for(back))


def _install_views(app: Flask) -> None:
    @app.get("/")
    def overview():
        # One read of the day's ledger at minute resolution serves both
        # charts (the last hour is its tail); all reads run side by side.
        got = _db().all_at_once(
            now="SELECT now() AS now", stats=sql.QUEUE_STATS, overdue=sql.OVERDUE_BY_SENDER,
            throughput=(sql.THROUGHPUT, {"window": "1 day", "bucket": "1 minute"}),
            failures=sql.FAILURES_BY_SENDER, runner_warnings=sql.RUNNER_WARNINGS, runners=sql.RUNNERS)
        now, stats = got["now"][0]["now"], got["stats"]
        overdue = {r["sender"]: r["overdue"] for r in got["overdue"]}
        minute_rows = [r for r in got["throughput"] if r["bucket_start"] > now - dt.timedelta(hours=1, minutes=1)]
        hour_rows = got["throughput"]
        senders: dict[tuple, dict[str, Any]] = {}
        # A stream column appears when queue_stats has one (the streams branch).
        has_stream = any("stream" in r for r in stats)

        def row_for(sender, stream=None):
            return senders.setdefault((sender, stream), {
                "sender": sender, "stream": stream, "queued": 0, "due": 0, "overdue": 0, "sending": 0,
                "paused": 0, "review": 0, "failed_day": 0, "oldest_due_age": None})

        for r in stats:
            if r["kind"] != "queue":
                continue
            s = row_for(r["sender"], r.get("stream"))
            s[r["status"]] = s.get(r["status"], 0) + r["messages"]
            s["due"] += r["due"] or 0
            if r["oldest_due_age"] is not None:
                s["oldest_due_age"] = max(filter(None, (s["oldest_due_age"], r["oldest_due_age"])))
        for sender, n in overdue.items():
            if not has_stream:
                row_for(sender)["overdue"] = n
        for r in got["failures"]:
            if not has_stream:
                row_for(r["sender"])["failed_day"] = r["failed"]
        warnings = [r for r in stats if r["kind"] == "warning"] + got["runner_warnings"]
        minute = charts.buckets(minute_rows, now, dt.timedelta(hours=1), dt.timedelta(minutes=1))
        hour = charts.buckets(hour_rows, now, dt.timedelta(days=1), dt.timedelta(hours=1))
        return render_template(
            "overview.html", now=now, senders=sorted(senders.values(), key=lambda s: (s["sender"], s["stream"] or "")),
            has_stream=has_stream, warnings=warnings, runners=got["runners"],
            minute_chart=charts.bar_chart(minute, 10, "%H:%M", "attempts per minute, last hour"),
            hour_chart=charts.bar_chart(hour, 4, "%H:00", "attempts per hour, last day"),
            minute_totals=_totals(minute), hour_totals=_totals(hour))

    @app.get("/campaigns")
    def campaigns():
        return render_template("campaigns.html", campaigns=_db().all(sql.CAMPAIGNS))

    @app.post("/campaigns/<int:campaign_id>/<action>")
    def campaign_action(campaign_id: int, action: str):
        return _button(sql.CAMPAIGN_ACTIONS, action, {"id": campaign_id},
                       f"campaign {campaign_id}: {action} ({{result}} mail(s) changed)", "campaigns")

    @app.get("/review")
    def review():
        return render_template("review.html", items=_db().all(sql.REVIEW_QUEUE), decisions=REVIEW_DECISIONS)

    @app.post("/review/<int:message_id>")
    def review_resolve(message_id: int):
        decision = request.form.get("decision", "")
        _write(sql.RESOLVE_REVIEW, {"id": message_id, "decision": decision},
               f"message {message_id}: resolved as {decision}")
        return redirect(url_for("review"))

    @app.get("/messages")
    def messages():
        q = request.args.get("q", "").strip()
        found: list[dict[str, Any]] = []
        if q:
            try:
                found = _db().all(sql.FIND_MESSAGES, {"q": q})
            except psycopg.errors.InvalidParameterValue as e:
                flash(e.diag.message_primary.removeprefix("mailroom: "), "error")
            if len(found) == 1:
                return redirect(url_for("message", message_id=found[0]["id"]))
        return render_template("messages.html", q=q, found=found)

    @app.get("/messages/<int:message_id>")
    def message(message_id: int):
        mail = _db().one(sql.INSPECT, {"ref": str(message_id)})["mail"]
        if mail is None or mail.get("id") != message_id:
            abort(404, description=f"no message {message_id} (never enqueued, or pruned)")
        return render_template("message.html", mail=mail, ledger=mail.get("ledger") or [])

    @app.get("/suppressions")
    def suppressions():
        q = request.args.get("q", "").strip()
        rows = []
        try:
            rows = _db().all(sql.SUPPRESSIONS, {"q": q or None})
        except psycopg.errors.InvalidParameterValue as e:
            flash(e.diag.message_primary.removeprefix("mailroom: "), "error")
        return render_template("suppressions.html", q=q, rows=rows, reasons=SUPPRESSION_REASONS,
                               has_stream=any("stream" in r for r in rows))

    @app.post("/suppressions")
    def suppression_add():
        address = request.form.get("address", "").strip()
        reason = request.form.get("reason", "manual")
        note = request.form.get("note", "").strip()
        source = f"console:{g.user}" + (f": {note}" if note else "")
        _write(sql.SUPPRESS, {"address": address, "reason": reason, "source": source[:200]},
               f"suppressed {address} ({reason})")
        return redirect(url_for("suppressions", q=address))

    @app.post("/suppressions/lift")
    def suppression_lift():
        address = request.form.get("address", "")
        _write(sql.UNSUPPRESS, {"address": address}, f"lifted the suppression of {address}")
        return redirect(url_for("suppressions"))

    @app.post("/suppressions/forget")
    def suppression_forget():
        # The address stays out of the log line, the message and the URL:
        # erasing it is the point.
        if request.form.get("confirm") != "yes":
            flash("forget erases the person's mail content and cannot be undone: tick the box to confirm", "error")
        else:
            _write(sql.FORGET, {"address": request.form.get("address", "").strip()},
                   "forgot an address: {result}")
        return redirect(url_for("suppressions"))

    @app.get("/schedules")
    def schedules():
        return render_template("schedules.html", schedules=_db().all(sql.SCHEDULES))

    @app.get("/rates")
    def rates():
        db = _db()
        return render_template("rates.html", rates=db.all(sql.SEND_RATES), throttles=db.all(sql.DESTINATION_RATES),
                               warmups=db.all(sql.SENDER_WARMUPS))

    @app.get("/webhooks")
    def webhooks():
        return render_template("webhooks.html", endpoints=_db().all(sql.WEBHOOKS))

    @app.post("/webhooks/<name>/<action>")
    def webhook_action(name: str, action: str):
        return _button(sql.WEBHOOK_ACTIONS, action, {"name": name}, f"webhook endpoint {name}: {action}d", "webhooks")


def _install_fleet_view(app: Flask) -> None:
    @app.get("/fleet")
    def fleet():
        from flask import current_app

        directory: Database = current_app.extensions["mailroom"]["fleet"]
        try:
            shards = directory.all(sql.FLEET_SHARDS)
        except psycopg.errors.QueryCanceled:
            log.error("console.fleet_timeout after=%s", FLEET_STATEMENT_TIMEOUT)
            return render_template(
                "error.html", code=504,
                message=f"the fleet did not answer within {FLEET_STATEMENT_TIMEOUT}: a shard accepts connections and "
                        "never answers (docs/fleet.md)"), 504
        up = [r for r in shards if r["answered"]]
        return render_template("fleet.html", shards=shards, up=up, down=[r for r in shards if not r["answered"]],
                               warnings=[{"shard": r["shard"], **w} for r in up for w in r["warning_list"]])


def _totals(data: list[charts.Bucket]) -> dict[str, int]:
    return {name: sum(getattr(b, name) for b in data) for name in charts.SERIES}
