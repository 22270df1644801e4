"""An asyncio SMTP client session: what the runner's send pool keeps open,
hundreds or thousands at once in one thread.

Chosen by measurement (bench/slow_relay.py, issue 14): against Postfix's
smtp-sink holding each mail 1 s, 256 sessions cost about 600 µs of CPU per
mail as threads with smtplib and 550 µs with aiosmtplib, and about 150 µs
with this client, which reads replies in an asyncio.Protocol and sends MAIL,
RCPT and DATA in one write when the server offers PIPELINING (RFC 2920).

It classifies exactly as `transport.SmtpConnection` does (see the module
docstring of mailroom.send.transport): 2xx sent, 4xx retry, 5xx failed, any
failure to connect retry, and a failure once the whole body has been handed
to the kernel — a timeout waiting for the final reply, a lost connection —
`ambiguous`, never `retry`: the server may have the mail. The body counts as
written only once the transport's write buffer is empty (the same point at
which smtplib's sendall returns). Same TLS options (STARTTLS before AUTH and
refused without it, smtps://, cafile, verify=0), AUTH PLAIN or LOGIN,
SMTPUTF8 for a non-ASCII local part, and a kept-open session that the server
dropped while idle reopened once.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import socket
import time
import weakref

from mailroom.send.transport import (
    _DOT_LINE, Outcome, TransportURL, _short, classify_reply, tls_context,
)


class SmtpReplyError(Exception):
    """The server answered a session command (greeting, EHLO, STARTTLS, AUTH) with an error."""

    def __init__(self, code: int, text: bytes, stage: str):
        super().__init__(f"{stage}: {code} {text.decode('utf-8', 'replace')}")
        self.code, self.text, self.stage = code, text, stage


class _Replies(asyncio.Protocol):
    """Splits what the server sends into replies (multi-line ones joined) and
    hands them out in order; knows when the write buffer is empty."""

    def __init__(self) -> None:
        self.buf = b""
        self.lines: list[bytes] = []
        self.ready: collections.deque = collections.deque()
        self.waiters: collections.deque = collections.deque()
        self.lost: BaseException | None = None
        self.transport: asyncio.Transport | None = None
        self._drained: asyncio.Future | None = None
        self.paused = False
        self.trace: list | None = None  # the session's timeline (mailroom.send.sendtrace), when tracing

    def connection_made(self, transport) -> None:
        self.transport = transport
        # A zero high-water mark: pause_writing is called as soon as anything
        # waits in the buffer and resume_writing once it is empty, so `drain`
        # tells when the body has been handed to the kernel in full.
        transport.set_write_buffer_limits(high=0)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            i = self.buf.find(b"\n")
            if i < 0:
                if len(self.buf) > 65536:  # no line end in 64 KiB: not an SMTP server
                    self.transport.abort()
                return
            line, self.buf = self.buf[: i + 1], self.buf[i + 1:]
            self.lines.append(line)
            if len(line) >= 4 and line[3:4] == b"-":
                continue  # a multi-line reply goes on
            code = int(line[:3]) if line[:3].isdigit() else -1
            if len(self.lines) == 1:  # most replies: one line
                text = line[4:].rstrip(b"\r\n")
            else:
                text = b"\n".join(l[4:].rstrip(b"\r\n") for l in self.lines)
            self.lines = []
            reply = (code, text)
            if self.trace is not None:
                self.trace.extend(("reply", time.time(), code, time.process_time()))
            while self.waiters:
                w = self.waiters.popleft()
                if not w.done():
                    w.set_result(reply)
                    break
            else:
                self.ready.append(reply)

    def connection_lost(self, exc) -> None:
        self.lost = exc or ConnectionResetError("the server closed the connection")
        while self.waiters:
            w = self.waiters.popleft()
            if not w.done():
                w.set_exception(self.lost)
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(self.lost)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def reply(self) -> asyncio.Future:
        f = asyncio.get_running_loop().create_future()
        if self.ready:
            f.set_result(self.ready.popleft())
        elif self.lost is not None:
            f.set_exception(self.lost)
        else:
            self.waiters.append(f)
        return f

    def drained(self) -> asyncio.Future | None:
        """A future that resolves once the write buffer is empty, or None if it is."""
        if self.lost is not None:
            raise self.lost
        if not self.paused:
            return None
        self._drained = asyncio.get_running_loop().create_future()
        return self._drained


class _Watchdog:
    """Timeouts for every session of one event loop, checked by one task
    every TICK seconds: a timer per SMTP reply (asyncio.timeout) cost more
    CPU than anything else the session does per mail. A wait times out
    between its timeout and its timeout + TICK."""

    TICK = 0.1
    _by_loop: "weakref.WeakKeyDictionary" = None  # type: ignore[assignment]

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.waits: dict[asyncio.Future, float] = {}
        self.task = loop.create_task(self._run())

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> "_Watchdog":
        if cls._by_loop is None:
            cls._by_loop = weakref.WeakKeyDictionary()
        dog = cls._by_loop.get(loop)
        if dog is None or dog.task.done():
            dog = cls._by_loop[loop] = cls(loop)
        return dog

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.TICK)
            if not self.waits:
                continue
            now = loop.time()
            expired = [f for f, deadline in self.waits.items() if deadline <= now]
            for f in expired:
                del self.waits[f]
                if not f.done():
                    f.set_exception(TimeoutError("timed out"))

    async def wait(self, fut: asyncio.Future, timeout: float):
        if fut.done():
            return fut.result()
        self.waits[fut] = asyncio.get_running_loop().time() + timeout
        try:
            return await fut
        finally:
            self.waits.pop(fut, None)


_FQDN: str | None = None


def _local_name() -> str:
    global _FQDN
    if _FQDN is None:
        _FQDN = socket.getfqdn()  # what smtplib says in EHLO; looked up once per process
    return _FQDN


class AsyncSmtpConnection:
    """A persistent SMTP session. Reconnects lazily; one Outcome per mail; never raises."""

    def __init__(self, url: TransportURL, local_hostname: str | None = None):
        self.url = url
        self.local_hostname = url.helo or local_hostname
        self.transport: asyncio.Transport | None = None
        self.p: _Replies | None = None
        self.extensions: dict[str, str] = {}
        self.sent_on_session = 0
        self._dog: _Watchdog | None = None
        self.trace: list | None = None  # (event, time) of each mail, when tracing (mailroom.send.sendtrace)

    # -- session ---------------------------------------------------------------------
    def _watchdog(self) -> _Watchdog:
        """The loop's watchdog, looked up once per session rather than per reply."""
        dog = self._dog
        if dog is None or dog.task.done():
            dog = self._dog = _Watchdog.of(asyncio.get_running_loop())
        return dog

    async def _reply(self, stage: str):
        return await self._watchdog().wait(self.p.reply(), self.url.timeout)

    def _write(self, data: bytes) -> None:
        # On a connection already lost asyncio's transport drops the write
        # (the next reply tells) and uvloop's raises RuntimeError: both are
        # a lost connection, classified at the stage it happened in.
        if self.p.lost is not None:
            raise ConnectionResetError(f"connection lost before the write ({_short(self.p.lost)})")
        self.transport.write(data)

    async def _command(self, line: bytes, stage: str):
        self._write(line + b"\r\n")
        return await self._reply(stage)

    async def _ehlo(self) -> None:
        name = (self.local_hostname or _local_name()).encode("ascii", "replace")
        code, text = await self._command(b"EHLO " + name, "ehlo")
        if code != 250:
            code, text = await self._command(b"HELO " + name, "helo")
            if code != 250:
                raise SmtpReplyError(code, text, "helo")
            self.extensions = {}
            return
        ext = {}
        for line in text.split(b"\n")[1:]:
            keyword, _, params = line.decode("ascii", "replace").strip().partition(" ")
            ext[keyword.lower()] = params
        self.extensions = ext

    async def connect(self) -> None:
        """Open, greet, STARTTLS, authenticate; raises on any failure."""
        await self.close()
        u = self.url
        loop = asyncio.get_running_loop()
        ssl_ctx = tls_context(u) if u.scheme == "smtps" else None
        async with asyncio.timeout(u.timeout):
            transport, p = await loop.create_connection(
                _Replies, u.host, u.port, ssl=ssl_ctx, server_hostname=u.host if ssl_ctx else None)
        self.transport, self.p = transport, p
        p.trace = self.trace
        try:
            code, text = await self._reply("connect")
            if code != 220:
                raise SmtpReplyError(code, text, "connect")
            await self._ehlo()
            if u.starttls:
                if "starttls" not in self.extensions:
                    raise ConnectionError("the server does not offer STARTTLS")
                code, text = await self._command(b"STARTTLS", "starttls")
                if code != 220:
                    raise SmtpReplyError(code, text, "starttls")
                async with asyncio.timeout(u.timeout):
                    self.transport = await loop.start_tls(self.transport, p, tls_context(u),
                                                          server_hostname=u.host)
                await self._ehlo()
            if u.username is not None:
                await self._login(u.username, u.password or "")
        except BaseException:
            await self.close(quit=False)
            raise
        self.sent_on_session = 0

    async def _login(self, user: str, password: str) -> None:
        methods = self.extensions.get("auth", "").upper().split()
        if "PLAIN" in methods or not methods:
            token = base64.b64encode(f"\0{user}\0{password}".encode()).decode()
            code, text = await self._command(b"AUTH PLAIN " + token.encode(), "auth")
        else:
            code, text = await self._command(b"AUTH LOGIN", "auth")
            if code == 334:
                code, text = await self._command(base64.b64encode(user.encode()), "auth")
            if code == 334:
                code, text = await self._command(base64.b64encode(password.encode()), "auth")
        if code != 235:
            raise SmtpReplyError(code, text, "auth")

    async def close(self, quit: bool = True) -> None:
        transport, self.transport = self.transport, None
        if transport is None:
            return
        try:
            if quit and self.p is not None and self.p.lost is None:
                transport.write(b"QUIT\r\n")
                async with asyncio.timeout(min(self.url.timeout, 2.0)):
                    await self.p.reply()
        except BaseException:  # noqa: BLE001 - closing anyway
            pass
        finally:
            transport.close()

    def abort(self) -> None:
        """Drop the session at once (the runner's stop deadline)."""
        if self.transport is not None:
            self.transport.abort()
            self.transport = None

    async def probe(self) -> Outcome:
        try:
            await self.connect()
        except Exception as e:  # noqa: BLE001
            return _connect_failure(e)
        return Outcome("sent", detail="probe")

    async def _rset(self) -> None:
        try:
            code, _ = await self._command(b"RSET", "rset")
            if code != 250:
                await self.close(quit=False)
        except Exception:  # noqa: BLE001
            await self.close(quit=False)

    # -- one mail --------------------------------------------------------------------
    async def send(self, envelope_from: str, rcpt: str, data: bytes) -> Outcome:
        reused = self.transport is not None
        outcome = await self._send_once(envelope_from, rcpt, data)
        # A kept-open session the server dropped while idle fails at the very
        # first command: not the mail's fault; open a new one and try once more.
        if reused and outcome.detail and outcome.detail.startswith("mail: connection lost"):
            outcome = await self._send_once(envelope_from, rcpt, data)
        return outcome

    async def _send_once(self, envelope_from: str, rcpt: str, data: bytes) -> Outcome:
        if self.transport is None:
            try:
                await self.connect()
            except Exception as e:  # noqa: BLE001
                return _connect_failure(e)
        options = b""
        if not (data.isascii() and rcpt.isascii() and envelope_from.isascii()):
            if "smtputf8" not in self.extensions:
                return Outcome("failed", detail="mail: a non-ASCII local part needs SMTPUTF8, "
                                                "which the relay does not offer")
            options = b" SMTPUTF8 BODY=8BITMIME" if "8bitmime" in self.extensions else b" SMTPUTF8"
        stage = "mail"
        try:
            mail = b"MAIL FROM:<" + envelope_from.encode() + b">" + options + b"\r\n"
            rcpt_line = b"RCPT TO:<" + rcpt.encode() + b">\r\n"
            w = self._write
            if "pipelining" in self.extensions:
                w(mail + rcpt_line + b"DATA\r\n")
                if self.trace is not None:
                    self.trace.extend(("cmd", time.time(), 0, time.process_time()))
                mail_r = await self._reply("mail")
                stage = "rcpt"
                rcpt_r = await self._reply("rcpt")
                stage = "data"
                data_r = await self._reply("data")
                if mail_r[0] != 250 or rcpt_r[0] not in (250, 251) or data_r[0] != 354:
                    if data_r[0] == 354:
                        # The server wants a body for a refused transaction:
                        # nothing sensible to send; start a fresh session.
                        await self.close(quit=False)
                    if mail_r[0] != 250:
                        return await self._rejected(*mail_r, "mail", reset=data_r[0] != 354)
                    if rcpt_r[0] not in (250, 251):
                        return await self._rejected(*rcpt_r, "rcpt", reset=data_r[0] != 354)
                    return await self._rejected(*data_r, "data")
            else:
                w(mail)
                code, text = await self._reply("mail")
                if code != 250:
                    return await self._rejected(code, text, "mail")
                stage = "rcpt"
                w(rcpt_line)
                code, text = await self._reply("rcpt")
                if code not in (250, 251):
                    return await self._rejected(code, text, "rcpt")
                stage = "data"
                w(b"DATA\r\n")
                code, text = await self._reply("data")
                if code != 354:
                    return await self._rejected(code, text, "data")
            stage = "body"
            # The scan for a line to dot-stuff, not the regex, for the usual mail that has none.
            q = _DOT_LINE.sub(b"..", data) if data[:1] == b"." or b"\n." in data else data
            if not q.endswith(b"\r\n"):
                q += b"\r\n"
            w(q + b".\r\n")
            drained = self.p.drained()
            if drained is not None:
                await self._watchdog().wait(drained, self.url.timeout)
            # Everything is written: from here on the server may have the mail.
            if self.trace is not None:
                self.trace.extend(("body", time.time(), 0, time.process_time()))
            stage = "reply"
            code, text = await self._reply("reply")
        except UnicodeError as e:
            await self._rset()
            return Outcome("failed", detail=f"{stage}: cannot encode ({_short(e)})")
        except (OSError, TimeoutError, EOFError, asyncio.IncompleteReadError) as e:
            what = "timeout" if isinstance(e, TimeoutError) else "connection lost"
            self.abort()
            if stage == "reply":
                return Outcome("ambiguous", detail=f"after data: {what} waiting for the final reply ({_short(e)})")
            return Outcome("retry", detail=f"{stage}: {what} ({_short(e)})")
        out = _final_reply(code, text)
        if code == 421:
            await self.close(quit=False)
        elif out.outcome == "sent":
            self.sent_on_session += 1
        return out

    async def _rejected(self, code: int, text: bytes, stage: str, reset: bool = True) -> Outcome:
        out = classify_reply(code, text, stage)
        if code == 421 or code == -1:
            await self.close(quit=False)
        elif reset and self.transport is not None:
            await self._rset()
        return out


_FINAL_REPLIES: dict[tuple[int, bytes], Outcome] = {}


def _final_reply(code: int, text: bytes) -> Outcome:
    """classify_reply of the reply to the body, remembered: a relay that says
    the same for every mail ("250 2.0.0 Ok") costs the classification (and
    Outcome.as_json) once, not once per mail. Replies that name a queue id
    differ each time; the table is emptied when it fills."""
    out = _FINAL_REPLIES.get((code, text))
    if out is None:
        if len(_FINAL_REPLIES) >= 256:
            _FINAL_REPLIES.clear()
        out = _FINAL_REPLIES[code, text] = classify_reply(code, text, "data")
    return out


def _connect_failure(e: BaseException) -> Outcome:
    """Every failure to open a session is retry (see transport._connect_failure)."""
    if isinstance(e, SmtpReplyError):
        out = classify_reply(e.code, e.text, e.stage)
        return Outcome("retry", out.smtp_code, out.smtp_enhanced, f"connect: {out.detail}")
    what = "timeout" if isinstance(e, TimeoutError) else type(e).__name__
    return Outcome("retry", detail=f"connect: {what} ({_short(e)})")
