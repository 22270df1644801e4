"""The one-click unsubscribe service (RFC 8058): a Flask app factory.

    POST /u/TOKEN  with the form field List-Unsubscribe=One-Click
                   -> the token's address is suppressed for the token's stream
                      at once (mailroom.unsubscribe), idempotently; 200.
    GET  /u/TOKEN  -> a confirmation page whose button POSTs that form. A GET
                      never unsubscribes: mail scanners and link previews
                      fetch every link in a mail.
    GET  /healthz  -> 200 (no database): for the reverse proxy's checks.

A token that does not verify (tampered, truncated, signed by a key not in the
keyring, too long, not ASCII) gets 400 and nothing is written; so does a POST
without the form field. The answer to a valid token never depends on the
address: unknown, known or already unsubscribed all read the same (no
oracle of who is subscribed). Request bodies over 8 KiB get 413.

The database login should be a member of mailroom_unsubscribe only: it may
execute mailroom.unsubscribe and nothing else (deploy/unsubscribe.sql). The
signing keys are read from the keyring file or variable (mailroom.signing),
never from the database. Tokens carry the address, so they are not logged:
the development server's request log shows /u/… instead.

Production: `gunicorn 'mailroom.web.unsubscribe_app:create_app()'` behind a
reverse proxy that terminates TLS (docs/unsubscribe.md); development:
`mailroom unsubscribe-server`.
"""

from __future__ import annotations

import logging
import os

import flask
import psycopg
import psycopg_pool
from werkzeug.serving import WSGIRequestHandler, make_server

from mailroom.signing import Keyring
from mailroom.send.unsubscribe import MAX_TOKEN, ONE_CLICK, TokenError, read_token

ENV_DSN = "MAILROOM_UNSUBSCRIBE_DSN"
MAX_BODY = 8 * 1024

_SECURITY_HEADERS = {
    # No script, no style from anywhere, forms only back here, never framed.
    "Content-Security-Policy": "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # The URL holds the token (and so the address): never sent on as a Referer.
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Strict-Transport-Security": "max-age=31536000",
    "Cross-Origin-Opener-Policy": "same-origin",
}

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>{{ title }}</title></head>
<body><main>
<h1>{{ title }}</h1>
<p>{{ text }}</p>
{% if form %}<form method="post" action="">
<input type="hidden" name="List-Unsubscribe" value="One-Click">
<button type="submit">Unsubscribe</button>
</form>{% endif %}
</main></body></html>
"""

log = logging.getLogger("mailroom.unsubscribe")


def _page(title: str, text: str, status: int, form: bool = False):
    return flask.render_template_string(_PAGE, title=title, text=text, form=form), status


def create_app(dsn: str | None = None, keyring: Keyring | None = None, keys_file: str | None = None) -> flask.Flask:
    """The app. dsn defaults to MAILROOM_UNSUBSCRIBE_DSN, the keyring to
    keys_file / MAILROOM_SIGNING_KEYS_FILE / MAILROOM_SIGNING_KEYS."""
    dsn = dsn or os.environ.get(ENV_DSN)
    if not dsn:
        raise ValueError(f"no database: pass dsn or set {ENV_DSN}")
    keyring = keyring or Keyring.load(keys_file)
    pool = psycopg_pool.ConnectionPool(
        dsn, min_size=1, max_size=4, open=False, name="mailroom-unsubscribe",
        kwargs={"autocommit": True, "application_name": "mailroom-unsubscribe"},
        check=psycopg_pool.ConnectionPool.check_connection)
    pool.open(wait=False)

    app = flask.Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.extensions["mailroom_unsubscribe_pool"] = pool

    def subject_of(token: str):
        if len(token) > MAX_TOKEN:
            return None
        try:
            return read_token(keyring, token)
        except TokenError:
            return None

    def invalid():
        return _page("Link not valid", "This unsubscribe link is not valid. Use the link in the most recent mail.", 400)

    @app.get("/u/<path:token>")
    def confirm(token: str):
        if subject_of(token) is None:
            return invalid()
        return _page("Unsubscribe", "Stop receiving this kind of mail? Mail you need for your account "
                     "(receipts, password resets) is not affected.", 200, form=True)

    @app.post("/u/<path:token>")
    def one_click(token: str):
        subject = subject_of(token)
        if subject is None:
            return invalid()
        # RFC 8058 3.1: the POST body is List-Unsubscribe=One-Click.
        if flask.request.form.get("List-Unsubscribe") != "One-Click":
            return _page("Not unsubscribed", f"The request must carry the form field {ONE_CLICK}.", 400)
        try:
            with pool.connection(timeout=5) as conn:
                conn.execute("SELECT mailroom.unsubscribe(%s, %s, %s, 'one-click')",
                             (subject.address, subject.stream, subject.message_id))
        except (psycopg.Error, psycopg_pool.PoolTimeout) as e:
            sqlstate = getattr(getattr(e, "diag", None), "sqlstate", None)
            log.warning("unsubscribe failed: %s (SQLSTATE %s)", type(e).__name__, sqlstate)
            if sqlstate == "22023":  # a token we signed that the database refuses (a stream removed by hand)
                return invalid()
            return _page("Try again later", "We could not record this right now; please try again later.", 503)
        return _page("Unsubscribed", "You will not receive this kind of mail any more.", 200)

    @app.get("/healthz")
    def healthz():
        return "ok\n", 200, {"Content-Type": "text/plain; charset=utf-8"}

    @app.errorhandler(413)
    def too_large(_e):
        return _page("Request too large", "The request is too large.", 413)

    @app.errorhandler(404)
    def not_found(_e):
        return _page("Not found", "There is nothing here.", 404)

    @app.errorhandler(405)
    def not_allowed(_e):
        return _page("Not allowed", "Use the link in the mail.", 405)

    @app.after_request
    def security_headers(response: flask.Response) -> flask.Response:
        for name, value in _SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    return app


class _QuietTokens(WSGIRequestHandler):
    """The development server's request log, without tokens (they carry the address)."""

    def log_request(self, code="-", size="-"):
        path = (getattr(self, "path", None) or "").split("?", 1)[0]  # unset when the request line was refused
        if path.startswith("/u/"):
            path = "/u/…"
        self.log("info", '"%s %s" %s %s', self.command, path, code, size)


def make_dev_server(app: flask.Flask, host: str = "127.0.0.1", port: int = 8027):
    """A threaded werkzeug server for development and tests (not for production)."""
    return make_server(host, port, app, threaded=True, request_handler=_QuietTokens)
