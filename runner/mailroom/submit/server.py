"""The SMTP submission server: aiosmtpd, AUTH PLAIN/LOGIN over TLS only.

Two listeners share one handler: STARTTLS on the submission port (RFC 6409;
nothing but EHLO, STARTTLS and QUIT before TLS, AUTH not even offered) and
implicit TLS (RFC 8314, port 465 style: the connection is TLS from the first
byte, so asyncio never hands the server a plaintext command). Every mail
needs a login (530 before AUTH).

A login is a row of mailroom.submission_credentials: an scrypt hash (checked
here, in constant time; an unknown name costs a hash all the same), the
sender profile and stream its mail goes out on, the From addresses and
@domains it may use and its rate. The envelope sender (MAIL FROM) and the
From and Sender headers must each be one of those identities: else 550 5.7.1
naming the address.

DATA: the mail is taken apart (message.py) and queued with mailroom.enqueue,
one mail per recipient, all in ONE transaction, with one rate-limit hit per
recipient (mailroom.rate_limit, key submit:<login>) in the same transaction:
250 comes only after it committed; a database that cannot take it gets 451
and the client retries; the rate limit reached gets 451 4.7.0 with the wait.
A retry after a lost 250 queues nothing twice: each mail's delivery key is a
digest of (login, Message-ID or X-Mailroom-Key, recipient).

Size: SMTP SIZE (--max-size, default 10 MiB); larger is refused with 552.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

from mailroom import logs, queries
from mailroom.inbound import smtpd
from mailroom.logs import event
from mailroom.net import free_port
from mailroom.submit import message
from mailroom.web.console.auth import check_password

MAX_MESSAGE_BYTES = 10 * 1024 * 1024
MAX_RECIPIENTS = 100


@dataclass(frozen=True)
class Login:
    username: str
    sender: str
    allowed_from: tuple[str, ...]
    stream: str
    per_minute: int


class RateLimited(Exception):
    def __init__(self, retry_after: float):
        super().__init__(f"retry after {retry_after:.0f} s")
        self.retry_after = retry_after


class Store(smtpd.PooledStore):
    """Logins, recipient checks and the enqueue transaction, on a small connection pool."""

    functions = queries.SUBMISSION_FUNCTIONS

    def __init__(self, dsn: str, pool_size: int = 4):
        super().__init__(dsn, "mailroom-submit", pool_size)

    def login(self, username: str, password: str) -> Login | None:
        row = queries.submission_login(self.pool, username)
        if not check_password(row["password_hash"] if row else None, password) or row is None:
            return None
        return Login(username, row["sender"], tuple(row["allowed_from"]), row["stream"], row["per_minute"])

    def recipient_refusal(self, login: Login, address: str) -> str | None:
        return queries.submission_recipient_refusal(self.pool, login.username, address)

    def enqueue(self, login: Login, mail: message.Submitted, recipients: list[str]) -> list[int]:
        """All recipients in one transaction, or none (raises RateLimited,
        queries.QueryError, queries.DatabaseUnavailable)."""
        with self.pool.connection() as conn, conn.transaction():
            for _ in recipients:
                hit = queries.rate_limit(conn, "submit:" + login.username, login.per_minute, 60)
                if not hit["allowed"]:
                    raise RateLimited(hit["retry_after"].total_seconds() if hit["retry_after"] else 60.0)
            return [queries.enqueue_submitted(
                conn, to=rcpt, subject=mail.subject, body_text=mail.body_text, body_html=mail.body_html,
                headers=mail.headers, delivery_key=mail.delivery_key(login.username, rcpt),
                sender=login.sender, stream=login.stream) for rcpt in recipients]


class _Handler:
    def __init__(self, server: "Submission"):
        self.server = server

    async def handle_MAIL(self, smtp, session, envelope, address, mail_options):
        login: Login | None = session.auth_data if isinstance(session.auth_data, Login) else None
        if login is None or smtp.transport.get_extra_info("ssl_object") is None:
            return "530 5.7.0 Authentication over TLS required"
        if not message.may_send_as(list(login.allowed_from), address or ""):
            return (f"550 5.7.1 envelope sender <{logs.redact(address or '')[:200]}> is not an address "
                    f"login {login.username} may send as")
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, smtp, session, envelope, address, rcpt_options):
        # Each recipient is answered on its own (RFC 5321 3.3): one that
        # cannot be mailed is refused here and the mail goes on to the others.
        s = self.server
        login: Login = session.auth_data
        if len(envelope.rcpt_tos) >= s.max_recipients:
            return f"452 4.5.3 at most {s.max_recipients} recipients a mail"
        shown = logs.redact(address)[:200]
        try:
            refusal = await asyncio.get_running_loop().run_in_executor(
                s.executor, s.store.recipient_refusal, login, address)
        except Exception as e:  # noqa: BLE001 - the database is away: the client tries again later
            event(logging.WARNING, "submit.rcpt_unchecked", login=login.username, error=logs.redact(queries.first_line(e)))
            return "451 4.3.0 mailroom submit: cannot check the recipient now, try again later"
        if refusal == "suppressed":
            return f"550 5.7.1 <{shown}> is suppressed for stream {login.stream}: not queued"
        if refusal is not None:
            return f"553 5.1.3 <{shown}>: {refusal.removeprefix('invalid: ')[:300]}"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, smtp, session, envelope):
        s = self.server
        login: Login = session.auth_data
        raw = smtpd.raw_data(envelope)
        rcpts = list(envelope.rcpt_tos)
        loop = asyncio.get_running_loop()
        try:
            mail = await loop.run_in_executor(s.executor, message.parse, raw)
            for header in message.IDENTITY_HEADERS:
                for address in mail.identities.get(header, []):
                    if not message.may_send_as(list(login.allowed_from), address):
                        raise message.Refused(f"550 5.7.1 {header.capitalize()} header <{address[:200]}> is not "
                                              f"an address login {login.username} may send as")
            if not mail.identities.get("from"):
                raise message.Refused("550 5.7.1 the mail has no From header (one address of the login)")
            if len(mail.identities["from"]) != 1:
                raise message.Refused("550 5.7.1 the From header must name exactly one address")
            ids = await loop.run_in_executor(s.executor, s.store.enqueue, login, mail, rcpts)
        except message.Refused as e:
            reply = e.reply
        except RateLimited as e:
            reply = (f"451 4.7.0 login {login.username}: rate limit of {login.per_minute} mails a minute "
                     f"reached, try again in {e.retry_after:.0f} s")
        except queries.QueryError as e:
            # bad input the database refused (22023 names the field): the client must change the mail
            reply = (f"550 5.6.0 refused: {str(e)[:300]}" if e.sqlstate == "22023"
                     else "451 4.3.0 mailroom submit: cannot queue the mail now, try again later")
            event(logging.WARNING, "submit.refused", login=login.username, error=logs.redact(str(e))[:300])
        except Exception as e:  # noqa: BLE001 - the client keeps the mail and retries
            event(logging.WARNING, "submit.not_queued", login=login.username,
                  error=logs.redact(queries.first_line(e)), size=len(raw), rcpts=len(rcpts))
            reply = "451 4.3.0 mailroom submit: cannot queue the mail now, try again later"
        else:
            event(logging.INFO, "submit.queued", login=login.username, ids=",".join(map(str, ids)), size=len(raw))
            with s.lock:
                s.counts["queued"] += len(ids)
            return f"250 2.0.0 OK: queued as {','.join(map(str, ids))[:400]}"
        with s.lock:
            s.counts[reply[:3]] += 1
        event(logging.INFO, "submit.answered", login=login.username, reply=reply[:200])
        return reply


@dataclass(frozen=True)
class _Pending:
    mechanism: str
    auth_data: LoginPassword


class _SMTP(SMTP):
    """aiosmtpd's SMTP with the login checked off the event loop: aiosmtpd
    calls the authenticator synchronously from auth_PLAIN and auth_LOGIN, and
    a check is a database read and one scrypt (about 45 ms), during which
    every other connection of the listener would wait."""

    def _authenticate(self, mechanism, auth_data):
        return _Pending(mechanism, auth_data)

    async def _checked(self, result):
        if not isinstance(result, _Pending):
            return result  # a malformed AUTH, already answered
        return await asyncio.get_running_loop().run_in_executor(
            self._submission.executor, self._authenticator, self, self.session, self.envelope,
            result.mechanism, result.auth_data)

    async def auth_PLAIN(self, server, args):
        return await self._checked(await super().auth_PLAIN(server, args))

    async def auth_LOGIN(self, server, args):
        return await self._checked(await super().auth_LOGIN(server, args))


class _Controller(Controller):
    def __init__(self, submission: "Submission", *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.submission = submission

    def factory(self):
        smtp = _SMTP(self.handler, **self.SMTP_kwargs)
        smtp._submission = self.submission
        return smtp


class Submission:
    """The server: `start()`, then `stop()`; `starttls_port` and `tls_port` are the bound ports."""

    def __init__(self, dsn: str, tls: ssl.SSLContext, host: str = "127.0.0.1", starttls_port: int | None = 2587,
                 tls_port: int | None = 2465, max_size: int = MAX_MESSAGE_BYTES,
                 max_recipients: int = MAX_RECIPIENTS, workers: int = 4, server_hostname: str | None = None):
        self.store = Store(dsn, pool_size=workers)
        # aiosmtpd logs each line it reads at DEBUG, AUTH's base64 password too
        logging.getLogger("mail.log").setLevel(logging.WARNING)
        self.max_recipients = max_recipients
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="submit")
        self.lock = threading.Lock()
        self.counts: Counter = Counter()
        handler = _Handler(self)
        common = dict(authenticator=self._authenticate, auth_required=True, data_size_limit=max_size,
                      enable_SMTPUTF8=True, ident="mailroom submit", server_hostname=server_hostname,
                      ready_timeout=10)
        self.controllers: dict[str, Controller] = {}
        if starttls_port is not None:
            self.controllers["starttls"] = _Controller(
                self, handler, hostname=host, port=starttls_port or free_port(host), tls_context=tls,
                require_starttls=True, auth_require_tls=True, **common)
        if tls_port is not None:
            # Implicit TLS: the listener speaks TLS from the first byte, so no
            # plaintext AUTH can reach it. aiosmtpd's auth_require_tls only
            # knows STARTTLS, so it is off here; handle_MAIL checks the socket.
            self.controllers["tls"] = _Controller(
                self, handler, hostname=host, port=tls_port or free_port(host), ssl_context=tls,
                auth_require_tls=False, **common)
        if not self.controllers:
            raise ValueError("give a STARTTLS port, an implicit TLS port or both")
        self.host = host

    @property
    def starttls_port(self) -> int | None:
        c = self.controllers.get("starttls")
        return c.port if c else None

    @property
    def tls_port(self) -> int | None:
        c = self.controllers.get("tls")
        return c.port if c else None

    def _authenticate(self, smtp, session, envelope, mechanism, auth_data):
        # Runs in the executor (_SMTP): one database read and one scrypt.
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        username = auth_data.login.decode("utf-8", "replace")
        try:
            login = self.store.login(username, auth_data.password.decode("utf-8", "replace"))
        except Exception as e:  # noqa: BLE001 - the database is away: a temporary failure, not a wrong password
            event(logging.WARNING, "submit.login_unavailable", error=logs.redact(queries.first_line(e)))
            return AuthResult(success=False, handled=False,
                              message="454 4.7.0 Temporary authentication failure, try again later")
        if login is None:
            event(logging.WARNING, "submit.login_refused", login=username[:128], mechanism=mechanism)
            with self.lock:
                self.counts["login_refused"] += 1
            return AuthResult(success=False, handled=False)
        return AuthResult(success=True, auth_data=login)

    def start(self) -> None:
        self.store.open()
        started = []
        try:
            for c in self.controllers.values():
                c.start()
                started.append(c)
        except BaseException:
            for c in started:
                c.stop()
            self.store.close()
            raise

    def stop(self) -> None:
        for c in self.controllers.values():
            c.stop()
        self.executor.shutdown(wait=True)
        self.store.close()


def tls_context(cert_file: str, key_file: str | None) -> ssl.SSLContext:
    """The server's TLS context: TLS 1.2 or later, the certificate chain of a PEM file."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx
