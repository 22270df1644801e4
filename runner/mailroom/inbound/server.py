"""`mailroom inbound`: receives the mail that comes back to the bounce domain.

An SMTP (or LMTP) server, aiosmtpd, for the bounce domain's MX or behind
the company's MTA. Each mail is classified (bounces.py: DSN, ARF report,
mailto: unsubscribe, auto-reply) and stored in one transaction: its
feedback through mailroom.record_feedback, or the whole mail through
mailroom.keep_unparsed_inbound with the reason it could not be used. The
answer to DATA is 250 only after that transaction committed; when the
database cannot take it the answer is 451 and the sending MTA keeps the
mail and tries again (its redelivery changes nothing twice: record_feedback
is idempotent per event key). Nothing it receives is dropped, and no mail
can stop it: a parser failure keeps the mail as unparsed.

Limits: 25 MiB a message (SMTP SIZE; larger is refused with 552 during
DATA, so the sending MTA reports it rather than losing it); the parsing
limits are in bounces.py.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from aiosmtpd.controller import Controller
from aiosmtpd.lmtp import LMTP

from mailroom import logs, queries, signing
from mailroom.inbound import bounces, smtpd
from mailroom.logs import event
from mailroom.net import free_port
from mailroom.send import unsubscribe, verp

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _envelope_text(value: str) -> str:
    """An envelope address as text the database takes: valid UTF-8, no control characters."""
    return _CONTROL.sub("?", value.encode("utf-8", "replace").decode("utf-8"))[:1000]


class Store(smtpd.PooledStore):
    """Writes one classified mail, all or nothing, on a small connection pool."""

    functions = queries.FEEDBACK_FUNCTIONS

    def __init__(self, dsn: str, pool_size: int = 4):
        super().__init__(dsn, "mailroom-inbound", pool_size)

    def save(self, verdict: bounces.Verdict, raw: bytes, envelope_from: str, rcpts: list[str]) -> str:
        """Store it; returns what was stored (for the log). Raises when the
        database did not take it (the caller answers 451)."""
        env_from, env_to = _envelope_text(envelope_from), _envelope_text(", ".join(rcpts))
        if verdict.ignored:
            return verdict.ignored
        with self.pool.connection() as conn:
            if verdict.unparsed is None and verdict.quoted_message_id:
                for mid in {f.message_id for f in verdict.feedback if f.message_id is not None}:
                    if queries.feedback_message_id_matches(conn, mid, str(verdict.quoted_message_id)[:1000]) is False:
                        verdict = bounces.Verdict(
                            unparsed=f"message_id_mismatch: the report quotes {str(verdict.quoted_message_id)[:200]},"
                                     f" not the Message-ID of mail {mid} its VERP address names", kind="unparsed")
                        break
            if verdict.unparsed is None:
                try:
                    with conn.transaction():
                        recorded = sum(queries.record_feedback(
                            conn, kind=f.kind, message_id=f.message_id, address=f.address, status=f.status,
                            detail=f.detail, source=f.source, event_key=f.event_key) for f in verdict.feedback)
                    return f"{verdict.kind}: {recorded} of {len(verdict.feedback)} events new"
                except queries.QueryError as e:
                    if e.sqlstate != "22023":
                        raise
                    # what the report says is no valid feedback: keep it whole instead
                    verdict = bounces.Verdict(unparsed=f"refused: {e}"[:500], kind="unparsed")
            with conn.transaction():
                kept = queries.keep_unparsed_inbound(conn, raw, verdict.unparsed, env_from, env_to)
            return f"unparsed {kept}: {verdict.unparsed}"


class _Handler:
    def __init__(self, receiver: "Inbound"):
        self.receiver = receiver

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        domains = self.receiver.domains
        if domains and address.rpartition("@")[2].lower().rstrip(".") not in domains:
            return "550 5.7.1 Not a bounce domain of this server"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        r = self.receiver
        raw = smtpd.raw_data(envelope)
        rcpts = list(envelope.rcpt_tos)
        envelope_from = "" if envelope.mail_from in (None, "<>") else envelope.mail_from
        loop = asyncio.get_running_loop()
        try:
            # Parsing and the database both off the event loop: a large mail
            # or a slow database holds up this connection only.
            verdict = await loop.run_in_executor(
                r.executor, lambda: bounces.classify(raw, envelope_from, rcpts, r.verp, r.unsubscribe_token))
            stored = await loop.run_in_executor(r.executor, r.store.save, verdict, raw, envelope_from, rcpts)
        except Exception as e:  # noqa: BLE001 - the mail stays with the sending MTA, which retries
            event(logging.WARNING, "inbound.not_stored", error=logs.redact(queries.first_line(e)),
                  size=len(raw), rcpts=len(rcpts))
            reply = "451 4.3.0 mailroom inbound: cannot store the mail now, try again later"
        else:
            event(logging.INFO, "inbound.stored", kind=verdict.kind, stored=stored, size=len(raw))
            with r.lock:
                r.counts[verdict.kind] += 1
            reply = "250 2.0.0 OK: stored"
        if r.lmtp:
            # LMTP answers DATA once per recipient (RFC 2033 4.2); aiosmtpd's
            # LMTP sends what the handler returns, so return one line each.
            return "\r\n".join([reply] * max(1, len(rcpts)))
        return reply


class _LMTPController(Controller):
    def factory(self):
        return LMTP(self.handler, **self.SMTP_kwargs)


class Inbound:
    """The server: `start()`, then `stop()`; `port` is the bound port."""

    def __init__(self, dsn: str, verper: verp.Verp, host: str = "127.0.0.1", port: int = 2526,
                 lmtp: bool = False, domains: tuple[str, ...] = (), unsubscribe_token=None, workers: int = 4):
        self.store = Store(dsn, pool_size=workers)
        self.verp = verper
        self.lmtp = lmtp
        self.domains = {d.lower().rstrip(".") for d in domains}
        self.unsubscribe_token = unsubscribe_token
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="inbound")
        self.lock = threading.Lock()
        self.counts: Counter = Counter()
        cls = _LMTPController if lmtp else Controller
        self.controller = cls(_Handler(self), hostname=host, port=port or free_port(host),
                              data_size_limit=bounces.MAX_MESSAGE_BYTES, enable_SMTPUTF8=True,
                              ident="mailroom inbound")
        self.host = host

    @property
    def port(self) -> int:
        return self.controller.port

    def start(self) -> None:
        self.store.open()
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()
        self.executor.shutdown(wait=True)
        self.store.close()


def unsubscribe_verifier(keyring: signing.Keyring):
    """The mailto: unsubscribe check: the token of the List-Unsubscribe header
    (runner/mailroom/send/unsubscribe.py) -> (message id, address), or None when
    it is malformed or its signature does not verify."""
    def verify(token: str):
        try:
            subject = unsubscribe.read_token(keyring, token)
        except unsubscribe.TokenError:
            return None
        return subject.message_id, subject.address
    return verify
