"""Transports: where a rendered mail goes, and how each attempt is classified.

A transport URL names one of:

- ``smtp://[user[:password]@]host[:port][?starttls][&timeout=S][&cafile=PATH][&verify=0][&helo=NAME]``
  (port 25 by default; ``?starttls`` upgrades the connection before AUTH and
  refuses to go on when the server does not offer STARTTLS),
- ``smtps://...`` (implicit TLS, port 465 by default), same parameters,
- ``file://DIR`` (a maildir, for development: every mail is stored as a file),
- ``null://`` (accepts every mail at once without building it, for
  benchmarks of the queue machinery), ``null://?render=1`` (builds every mail
  — template, MIME, headers — and discards it, to measure what rendering costs).

Every transport returns an `Outcome` for every mail, and never raises:

- 2xx after the body → ``sent``;
- 4xx at any step, connection refused or reset, a timeout before the body was
  completely written → ``retry``;
- 5xx → ``failed`` (permanent);
- the body was completely written but the final reply never came (timeout,
  connection lost) → ``ambiguous``: the server may have accepted the mail.
  A server can only accept a mail once it has read the terminating
  ``<CRLF>.<CRLF>``, so a failure while the body is still being written is a
  plain ``retry``.

The reply's basic code, enhanced status code (RFC 3463) and text travel with
the outcome. One `Connection` per worker thread keeps its SMTP session open
and reuses it; a broken session is closed and opened again on the next mail.
"""

from __future__ import annotations

import base64
import json
import mailbox
import re
import smtplib
import socket
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

from mailroom import logs

_ENHANCED = re.compile(r"^([245]\.\d{1,3}\.\d{1,3})\b")
_QUEUED_AS = re.compile(r"(?:queued as|id=)\s*<?([A-Za-z0-9._@-]{4,})>?", re.I)
_DOT_LINE = re.compile(rb"(?m)^\.")


class TransportConfigError(ValueError):
    """A transport URL that cannot work; the message says why (never the password)."""


@dataclass(frozen=True)
class Outcome:
    """What happened to one attempt; the fields match mark_outcomes' JSON."""

    outcome: str  # sent | retry | failed | ambiguous
    smtp_code: int | None = None
    smtp_enhanced: str | None = None
    detail: str | None = None
    provider_id: str | None = None

    def as_json(self) -> dict:
        """mark_outcomes' fields; computed once per Outcome (a relay's usual
        reply is one Outcome shared by many mails: see asyncsmtp), and
        shared: do not change the dict."""
        d = self.__dict__.get("_json")
        if d is None:
            d = self._json_fields()
            object.__setattr__(self, "_json", d)  # a cache, not a field: equality and repr ignore it
        return d

    def as_json_text(self) -> str:
        """as_json() as JSON text, computed once per Outcome like it."""
        text = self.__dict__.get("_json_text")
        if text is None:
            text = json.dumps(self.as_json())
            object.__setattr__(self, "_json_text", text)
        return text

    def _json_fields(self) -> dict:
        d = {"outcome": self.outcome}
        if self.smtp_code is not None and 200 <= self.smtp_code <= 599:
            d["smtp_code"] = self.smtp_code
        if self.smtp_enhanced:
            d["smtp_enhanced"] = self.smtp_enhanced
        if self.detail:  # a reply text may echo credentials: redact before it is stored
            d["detail"] = logs.redact(self.detail)[:1000]
        if self.provider_id:
            d["provider_id"] = self.provider_id[:200]
        return d


def classify_reply(code: int, text: bytes | str, stage: str = "data") -> Outcome:
    """Turn an SMTP reply into an outcome: 2xx sent, 4xx retry, 5xx failed."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = " ".join(text.split())
    m = _ENHANCED.match(text)
    enhanced = m.group(1) if m else None
    # The code and the enhanced status travel in their own fields, and
    # mark_outcomes writes last_error as "code enhanced detail": repeating
    # them here gave "550 5.1.1 rcpt: 550 5.1.1 No such user".
    reply = text[m.end():].lstrip() if m else text
    detail = f"{stage}: {reply}".strip()
    if 200 <= code < 300:
        pid = _QUEUED_AS.search(text)
        return Outcome("sent", code, enhanced, detail, pid.group(1) if pid else None)
    if 500 <= code < 600:
        return Outcome("failed", code, enhanced, detail)
    # 4xx, and anything a server should not say (1xx, 3xx, garbage): try again later.
    return Outcome("retry", code, enhanced, detail)


# -- URLs -------------------------------------------------------------------------


@dataclass(frozen=True)
class TransportURL:
    scheme: str
    host: str = ""
    port: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    starttls: bool = False
    timeout: float = 30.0
    cafile: str | None = None
    verify: bool = True
    helo: str | None = None
    path: str = ""
    render: bool = True  # null:// only: build the mail before discarding it

    def redacted(self) -> str:
        """The URL as it may be logged: the password replaced by ***."""
        if self.scheme in ("file",):
            return f"file://{self.path}"
        if self.scheme == "null":
            return "null://?render=1" if self.render else "null://"
        auth = ""
        if self.username is not None:
            auth = quote(self.username, safe="") + (":***" if self.password is not None else "") + "@"
        q = []
        if self.starttls:
            q.append("starttls")
        return f"{self.scheme}://{auth}{self.host}:{self.port}" + ("?" + "&".join(q) if q else "")

    def __str__(self) -> str:  # never the password, whatever prints this
        return self.redacted()


def _flag(value: list[str]) -> bool:
    v = (value[-1] if value else "").strip().lower()
    return v in ("", "1", "true", "yes", "on")


def parse_url(url: str, default_timeout: float = 30.0) -> TransportURL:
    """Parse a transport URL. Errors name the problem but never echo the URL."""
    try:
        parts = urlsplit(url)
    except ValueError as e:
        raise TransportConfigError(f"transport URL: cannot parse ({e})") from None
    scheme = parts.scheme.lower()
    if scheme == "null":
        q = parse_qs(parts.query, keep_blank_values=True)
        unknown = set(q) - {"render"}
        if unknown:
            raise TransportConfigError(f"transport URL: unknown parameter(s) {', '.join(sorted(unknown))}")
        return TransportURL("null", render="render" in q and _flag(q["render"]))
    if scheme == "file":
        path = unquote(parts.netloc + parts.path)
        if not path:
            raise TransportConfigError("transport URL: file:// needs a directory, e.g. file:///var/mail/dev")
        return TransportURL("file", path=path)
    if scheme not in ("smtp", "smtps"):
        raise TransportConfigError(
            f"transport URL: unknown scheme {scheme!r} (use smtp://, smtps://, file:// or null://)"
        )
    q = parse_qs(parts.query, keep_blank_values=True)
    unknown = set(q) - {"starttls", "timeout", "cafile", "verify", "helo"}
    if unknown:
        raise TransportConfigError(f"transport URL: unknown parameter(s) {', '.join(sorted(unknown))}")
    try:
        port = parts.port
    except ValueError:
        raise TransportConfigError("transport URL: the port is not a number") from None
    if not parts.hostname:
        raise TransportConfigError("transport URL: no host")
    starttls = "starttls" in q and _flag(q["starttls"])
    if scheme == "smtps" and starttls:
        raise TransportConfigError("transport URL: smtps:// is already TLS; drop ?starttls")
    try:
        timeout = float(q["timeout"][-1]) if "timeout" in q else default_timeout
    except ValueError:
        raise TransportConfigError("transport URL: timeout is not a number") from None
    if timeout <= 0:
        raise TransportConfigError("transport URL: timeout must be > 0")
    username = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    if password is not None:
        # As written in the URL, as decoded, and as AUTH PLAIN sends it (base64 of \0user\0password).
        logs.register_secret(parts.password)
        logs.register_secret(password)
        logs.register_secret(base64.b64encode(f"\0{username or ''}\0{password}".encode()).decode())
    return TransportURL(
        scheme,
        host=parts.hostname,
        port=port or (465 if scheme == "smtps" else 25),
        username=username,
        password=password,
        starttls=starttls,
        timeout=timeout,
        cafile=q["cafile"][-1] if "cafile" in q else None,
        verify=_flag(q["verify"]) if "verify" in q else True,
        helo=q["helo"][-1] if "helo" in q else None,
    )


def redact_url(url: str) -> str:
    """Best effort: a transport URL string with any password replaced by ***."""
    try:
        return parse_url(url).redacted()
    except TransportConfigError:
        return re.sub(r"://([^:@/]*):[^@/]*@", r"://\1:***@", url)


# -- connections --------------------------------------------------------------------


class Connection:
    """One worker's transport session. `send` never raises."""

    def send(self, envelope_from: str, rcpt: str, data: bytes) -> Outcome:  # pragma: no cover
        raise NotImplementedError

    def probe(self) -> Outcome:
        """Check the transport is reachable (used while it is marked down)."""
        return Outcome("sent")

    def close(self) -> None:
        pass


class NullConnection(Connection):
    """Accepts every mail (built or not: see Transport.needs_message)."""

    # One Outcome for every mail: its JSON for mark_outcomes is made once.
    SENT = Outcome("sent", detail="null transport")

    def send(self, envelope_from: str, rcpt: str, data: bytes) -> Outcome:
        return self.SENT


class MaildirConnection(Connection):
    def __init__(self, path: str):
        self.box = mailbox.Maildir(path, factory=None, create=True)

    def send(self, envelope_from: str, rcpt: str, data: bytes) -> Outcome:
        try:
            key = self.box.add(data.replace(b"\r\n", b"\n"))
        except OSError as e:
            return Outcome("retry", detail=f"maildir: {e}")
        return Outcome("sent", detail="maildir", provider_id=key)


def tls_context(url: TransportURL) -> ssl.SSLContext:
    """The client TLS context of a URL: the system store or ?cafile=, and no
    verification only with ?verify=0 (shared by the threaded and asyncio sessions)."""
    ctx = ssl.create_default_context(cafile=url.cafile)
    if not url.verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class SmtpConnection(Connection):
    """A persistent SMTP session. Reconnects lazily; reports one Outcome per mail."""

    def __init__(self, url: TransportURL, local_hostname: str | None = None):
        self.url = url
        self.local_hostname = url.helo or local_hostname
        self.smtp: smtplib.SMTP | None = None
        self.sent_on_session = 0

    # -- session -------------------------------------------------------------
    def _tls_context(self) -> ssl.SSLContext:
        return tls_context(self.url)

    def connect(self) -> None:
        """Open and authenticate a session; raises OSError/SMTPException on failure."""
        self.close()
        u = self.url
        if u.scheme == "smtps":
            smtp = smtplib.SMTP_SSL(u.host, u.port, local_hostname=self.local_hostname,
                                    timeout=u.timeout, context=self._tls_context())
        else:
            smtp = smtplib.SMTP(u.host, u.port, local_hostname=self.local_hostname, timeout=u.timeout)
        try:
            smtp.ehlo_or_helo_if_needed()
            if u.starttls:
                if not smtp.has_extn("starttls"):
                    raise smtplib.SMTPNotSupportedError("the server does not offer STARTTLS")
                code, resp = smtp.starttls(context=self._tls_context())
                smtp.ehlo()
            if u.username is not None:
                smtp.login(u.username, u.password or "")
        except BaseException:
            try:
                smtp.close()
            finally:
                raise
        self.smtp = smtp
        self.sent_on_session = 0

    def close(self) -> None:
        smtp, self.smtp = self.smtp, None
        if smtp is None:
            return
        try:
            if smtp.sock is not None:
                smtp.sock.settimeout(min(self.url.timeout, 2.0))
                smtp.quit()
        except Exception:
            pass
        finally:
            try:
                smtp.close()
            except Exception:
                pass

    def probe(self) -> Outcome:
        try:
            self.connect()
        except Exception as e:  # noqa: BLE001 - every failure is an outcome
            return _connect_failure(e)
        return Outcome("sent", detail="probe")

    def _rset(self) -> None:
        try:
            assert self.smtp is not None
            code, _ = self.smtp.rset()
            if code != 250:
                self.close()
        except Exception:
            self.close()

    # -- one mail ------------------------------------------------------------
    def send(self, envelope_from: str, rcpt: str, data: bytes) -> Outcome:
        reused = self.smtp is not None
        outcome = self._send_once(envelope_from, rcpt, data)
        # A kept-open session the server dropped while idle fails at the very
        # first command: that is not the mail's fault; open a new one and try once more.
        if reused and outcome.detail and outcome.detail.startswith("mail: connection lost"):
            outcome = self._send_once(envelope_from, rcpt, data)
        return outcome

    def _send_once(self, envelope_from: str, rcpt: str, data: bytes) -> Outcome:
        if self.smtp is None:
            try:
                self.connect()
            except Exception as e:  # noqa: BLE001
                return _connect_failure(e)
        smtp = self.smtp
        assert smtp is not None
        stage = "mail"
        # A UTF-8 local part (render keeps it, RFC 6532) needs SMTPUTF8: mail
        # that is all ASCII, the usual case, is sent without it.
        options: list[str] = []
        if not (data.isascii() and rcpt.isascii() and envelope_from.isascii()):
            if not smtp.has_extn("smtputf8"):
                return Outcome("failed", detail="mail: a non-ASCII local part needs SMTPUTF8, "
                                                "which the relay does not offer")
            options = ["SMTPUTF8", "BODY=8BITMIME"] if smtp.has_extn("8bitmime") else ["SMTPUTF8"]
        try:
            code, resp = smtp.mail(envelope_from, options)
            if code != 250:
                return self._rejected(code, resp, "mail")
            stage = "rcpt"
            code, resp = smtp.rcpt(rcpt)
            if code not in (250, 251):
                return self._rejected(code, resp, "rcpt")
            stage = "data"
            smtp.putcmd("data")
            code, resp = smtp.getreply()
            if code != 354:
                return self._rejected(code, resp, "data")
            stage = "body"
            q = _DOT_LINE.sub(b"..", data)
            if not q.endswith(b"\r\n"):
                q += b"\r\n"
            smtp.send(q + b".\r\n")
            # Everything is written: from here on the server may have the mail.
            stage = "reply"
            code, resp = smtp.getreply()
        except UnicodeError as e:
            # An address or header smtplib cannot put on the wire (no SMTPUTF8).
            self._rset()
            return Outcome("failed", detail=f"{stage}: cannot encode ({_short(e)})")
        except (OSError, smtplib.SMTPException) as e:
            self.close()
            what = "timeout" if _is_timeout(e) else "connection lost"
            if stage == "reply":
                return Outcome("ambiguous", detail=f"after data: {what} waiting for the final reply ({_short(e)})")
            return Outcome("retry", detail=f"{stage}: {what} ({_short(e)})")
        out = classify_reply(code, resp, "data")
        if code == 421:
            self.close()
        elif out.outcome == "sent":
            self.sent_on_session += 1
        return out

    def _rejected(self, code: int, resp: bytes, stage: str) -> Outcome:
        out = classify_reply(code, resp, stage)
        if code == 421 or code == -1:
            self.close()
        else:
            self._rset()
        return out


def _is_timeout(e: BaseException) -> bool:
    if isinstance(e, (socket.timeout, TimeoutError)):
        return True
    return "timed out" in str(e).lower()


def _short(e: BaseException) -> str:
    s = str(e) or type(e).__name__
    return logs.redact(" ".join(s.split()))[:300]


def _connect_failure(e: BaseException) -> Outcome:
    """A session that could not be opened. Auth rejected with 5xx is permanent
    for the transport, but not for the mail: every failure to connect is retry."""
    if isinstance(e, smtplib.SMTPResponseException):
        out = classify_reply(e.smtp_code, e.smtp_error, "connect")
        return Outcome("retry", out.smtp_code, out.smtp_enhanced, out.detail)
    what = "timeout" if _is_timeout(e) else type(e).__name__
    return Outcome("retry", detail=f"connect: {what} ({_short(e)})")


# -- the factory ---------------------------------------------------------------------


class Transport:
    """Makes one Connection per worker, and tracks whether the far end is up.

    `health` logs one line per change (transport.down / transport.up). While
    it is down, the runner claims nothing and probes with backoff and jitter.
    """

    def __init__(self, url: str | TransportURL, local_hostname: str | None = None):
        self.url = url if isinstance(url, TransportURL) else parse_url(url)
        self.local_hostname = local_hostname
        self.health = logs.StateLog("smtp" if self.url.scheme.startswith("smtp") else "transport")
        self._lock = threading.Lock()
        if self.url.scheme == "file":
            for sub in ("tmp", "new", "cur"):
                (Path(self.url.path) / sub).mkdir(parents=True, exist_ok=True)

    @property
    def needs_message(self) -> bool:
        """False for plain null://, whose connections ignore the mail's bytes:
        the runner then builds nothing and sends the envelope with data=b""."""
        return not (self.url.scheme == "null" and not self.url.render)

    def connection(self) -> Connection:
        if self.url.scheme == "null":
            return NullConnection()
        if self.url.scheme == "file":
            return MaildirConnection(self.url.path)
        return SmtpConnection(self.url, self.local_hostname)

    def note(self, outcome: Outcome) -> None:
        """Update the health from one send's outcome (connect failures mark it down)."""
        if outcome.detail and outcome.detail.startswith("connect:"):
            self.health.down(outcome.detail, transport=self.url.redacted())
        elif (outcome.outcome in ("sent", "failed") or outcome.smtp_code) and not self.health.is_up:
            # Read without the lock: up() decides under it; this only spares
            # every mail the call and the redacted URL while the relay is up.
            self.health.up(transport=self.url.redacted())
