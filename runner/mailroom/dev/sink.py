"""`mailroom sink`: a local SMTP server (aiosmtpd) for the demo, the tests and benchmarks.

It counts what it receives, optionally stores every accepted mail in a maildir,
and recognises duplicates by Message-ID (a mail accepted twice with the same
Message-ID is a duplicate: mailroom derives Message-ID from the delivery key).
It can be told to answer given codes (`Rule`), to delay its final reply, to
drop the connection after the body (so the sender cannot know the outcome), or
to defer mail that comes faster than a rate (`max_rate`, as Gmail's 421 4.7.28
does; change it while the sink runs, None to relent).

Stats are a dict (`Sink.stats()`), written as JSON to a stats file while it
runs and printed when it stops, so a script can read them.
"""

from __future__ import annotations

import asyncio
import json
import mailbox
import os
import re
import ssl
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from mailroom.net import free_port

_MESSAGE_ID = re.compile(rb"^Message-ID:[ \t]*(.*?)\r?$", re.I | re.M)


@dataclass
class Rule:
    """Answer `code text` instead of accepting.

    stage: 'rcpt' (refuse the recipient) or 'data' (answer after the body).
    rcpt_contains: only for recipients containing this text ('' = every mail).
    times: only the first N attempts of each Message-ID (0 = every attempt);
    at the rcpt stage, the first N attempts for each recipient.
    delay: seconds to wait before answering. drop: close the connection
    after reading the body, without any answer (code and text are unused).
    """

    code: int = 451
    text: str = "4.3.0 Try again later"
    stage: str = "data"
    rcpt_contains: str = ""
    times: int = 0
    delay: float = 0.0
    drop: bool = False

    @classmethod
    def parse(cls, spec: str, **kw) -> "Rule":
        """'451 4.3.0 Try again later' -> Rule(451, '4.3.0 Try again later')."""
        code, _, text = spec.strip().partition(" ")
        if not code.isdigit() or not 200 <= int(code) <= 599:
            raise ValueError(f"reply: {spec!r} does not start with an SMTP code (200-599)")
        return cls(int(code), text or "Rule", **kw)



RATE_LIMITED_REPLY = ("421 4.7.28 Our system has detected an unusual rate of unsolicited mail. "
                      "To protect our users, mail has been temporarily rate limited. - gsmtp")


class _Handler:
    def __init__(self, sink: "Sink"):
        self.sink = sink

    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        session.host_name = hostname
        if self.sink.pipelining:
            # aiosmtpd reads commands in order from its stream, so it serves a
            # pipelined MAIL/RCPT/DATA as it is; it just never says so.
            responses.insert(1, "250-PIPELINING")
        return responses

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        sink = self.sink
        for rule in sink.rules:
            if rule.stage != "rcpt" or (rule.rcpt_contains and rule.rcpt_contains not in address):
                continue
            with sink.lock:
                seen = sink._rcpt_seen[address]
                sink._rcpt_seen[address] += 1
            if rule.times and seen >= rule.times:
                continue
            if rule.delay:
                await asyncio.sleep(rule.delay)
            sink._count_reject(rule.code)
            return f"{rule.code} {rule.text}"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        sink = self.sink
        data: bytes = envelope.original_content or envelope.content
        head = data.split(b"\r\n\r\n", 1)[0]
        m = _MESSAGE_ID.search(head)
        mid = m.group(1).strip().decode("ascii", "replace") if m else ""
        rcpts = envelope.rcpt_tos
        with sink.lock:
            attempt = sink._attempts_by_id[mid]
            sink._attempts_by_id[mid] += 1
            sink.attempts += 1
        for rule in sink.rules:
            if rule.stage != "data":
                continue
            if rule.rcpt_contains and not any(rule.rcpt_contains in r for r in rcpts):
                continue
            if rule.times and attempt >= rule.times:
                continue
            if rule.delay:
                await asyncio.sleep(rule.delay)
            if rule.drop:
                with sink.lock:
                    sink.dropped += 1
                server.transport.abort()
                return "421 dropped"
            sink._count_reject(rule.code)
            return f"{rule.code} {rule.text}"
        if sink.max_rate is not None and sink._over_rate():
            with sink.lock:
                sink.deferred += 1
            sink._count_reject(int(sink.rate_reply[:3]))
            return sink.rate_reply
        if sink.delay:
            await asyncio.sleep(sink.delay)
        sink._accept(mid, envelope.mail_from, list(rcpts), data)
        return "250 2.0.0 OK queued as " + sink._queue_id()


class Sink:
    """An aiosmtpd server in a background thread. Use as a context manager."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        rules: list[Rule] | None = None,
        delay: float = 0.0,
        store: str | os.PathLike | None = None,
        keep: bool = False,
        starttls_context: ssl.SSLContext | None = None,
        require_starttls: bool = False,
        tls_context: ssl.SSLContext | None = None,
        auth: tuple[str, str] | None = None,
        stats_file: str | os.PathLike | None = None,
        smtputf8: bool = True,
        pipelining: bool = False,
        max_rate: float | None = None,
        rate_reply: str = RATE_LIMITED_REPLY,
    ):
        self.host = host
        self.pipelining = pipelining
        self.port = port or free_port(host)
        self.rules = list(rules or [])
        # Defer (rate_reply) a mail that would make more than max_rate
        # accepted in the last second.
        self.max_rate = max_rate
        self.rate_reply = rate_reply
        self.deferred = 0
        self._recent: list[float] = []
        self.delay = delay
        self.keep = keep
        self.messages: list[dict] = []
        if store:
            for sub in ("tmp", "new", "cur"):
                (Path(store) / sub).mkdir(parents=True, exist_ok=True)
        self.store = mailbox.Maildir(str(store), factory=None, create=True) if store else None
        self.stats_file = Path(stats_file) if stats_file else None
        self.auth = auth
        self.lock = threading.Lock()
        self.received = 0
        self.attempts = 0
        self.dropped = 0
        self.rejected: Counter[int] = Counter()
        self.auth_failures = 0
        self._attempts_by_id: Counter[str] = Counter()
        self._accepted_by_id: Counter[str] = Counter()
        self._rcpt_seen: Counter[str] = Counter()
        self.duplicates = 0
        self.duplicate_ids: list[str] = []
        self.started_at = time.time()
        self.first_at: float | None = None
        self.last_at: float | None = None
        self._seq = 0
        kwargs: dict = {}
        if starttls_context is not None:
            kwargs["tls_context"] = starttls_context
            kwargs["require_starttls"] = require_starttls
        if auth is not None:
            kwargs["authenticator"] = self._authenticate
            kwargs["auth_required"] = True
            kwargs["auth_require_tls"] = starttls_context is not None or tls_context is not None
        if tls_context is not None:
            kwargs["ssl_context"] = tls_context
        # aiosmtpd's Controller offers SMTPUTF8 unless told not to; False plays a relay without it.
        kwargs["enable_SMTPUTF8"] = smtputf8
        self.controller = Controller(_Handler(self), hostname=host, port=self.port,
                                     ready_timeout=10, **kwargs)
        self._writer: threading.Thread | None = None
        self._stop = threading.Event()

    # -- bookkeeping ---------------------------------------------------------
    def _authenticate(self, server, session, envelope, mechanism, auth_data):
        ok = (
            isinstance(auth_data, LoginPassword)
            and self.auth is not None
            and auth_data.login.decode() == self.auth[0]
            and auth_data.password.decode() == self.auth[1]
        )
        if not ok:
            with self.lock:
                self.auth_failures += 1
        return AuthResult(success=ok, handled=False)

    def _queue_id(self) -> str:
        with self.lock:
            self._seq += 1
            return f"SINK{self._seq:08d}"

    def _over_rate(self) -> bool:
        """Would one more accepted mail make more than max_rate in the last second?"""
        now = time.monotonic()
        with self.lock:
            limit = self.max_rate
            self._recent = [t for t in self._recent if now - t < 1.0]
            if limit is not None and len(self._recent) + 1 > limit:
                return True
            self._recent.append(now)
            return False

    def _count_reject(self, code: int) -> None:
        with self.lock:
            self.rejected[code] += 1

    def _accept(self, mid: str, mail_from: str, rcpts: list[str], data: bytes) -> None:
        if self.store is not None:
            self.store.add(data.replace(b"\r\n", b"\n"))
        now = time.time()
        with self.lock:
            self.received += 1
            if mid:
                if self._accepted_by_id[mid]:
                    self.duplicates += 1
                    if len(self.duplicate_ids) < 100:
                        self.duplicate_ids.append(mid)
                self._accepted_by_id[mid] += 1
            self.first_at = self.first_at or now
            self.last_at = now
            if self.keep:
                self.messages.append({"mail_from": mail_from, "rcpt_tos": rcpts, "data": data,
                                      "message_id": mid})

    def stats(self) -> dict:
        with self.lock:
            span = (self.last_at - self.first_at) if self.first_at and self.last_at else 0.0
            return {
                "host": self.host,
                "port": self.port,
                "received": self.received,
                "unique_message_ids": len(self._accepted_by_id),
                "duplicates": self.duplicates,
                "duplicate_ids": list(self.duplicate_ids),
                "attempts": self.attempts,
                "rejected": {str(k): v for k, v in sorted(self.rejected.items())},
                "dropped": self.dropped, "deferred": self.deferred,
                "auth_failures": self.auth_failures,
                "first_at": self.first_at,
                "last_at": self.last_at,
                "rate_per_second": round(self.received / span, 1) if span > 0 else None,
                "updated_at": time.time(),
            }

    def accepted_ids(self) -> Counter[str]:
        """Every Message-ID accepted so far and how many times (a copy)."""
        with self.lock:
            return Counter(self._accepted_by_id)

    def write_stats(self) -> None:
        if self.stats_file is None:
            return
        tmp = self.stats_file.with_name(self.stats_file.name + ".tmp")
        tmp.write_text(json.dumps(self.stats()) + "\n")
        os.replace(tmp, self.stats_file)

    def _write_loop(self) -> None:
        while not self._stop.wait(0.25):
            self.write_stats()

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> "Sink":
        self.controller.start()
        if self.stats_file is not None:
            self.write_stats()
            self._writer = threading.Thread(target=self._write_loop, name="sink-stats", daemon=True)
            self._writer.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._writer is not None:
            self._writer.join()
        try:
            self.controller.stop()
        finally:
            self.write_stats()

    def __enter__(self) -> "Sink":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def url(self, scheme: str = "smtp", userinfo: str = "", query: str = "") -> str:
        at = f"{userinfo}@" if userinfo else ""
        return f"{scheme}://{at}{self.host}:{self.port}" + (f"?{query}" if query else "")
