"""Real DSNs from a real MTA: mailroom run sends through a private Debian
Postfix (tests/postfixkit.py) with VERP envelope senders; Postfix accepts
every mail, then its next hop (an aiosmtpd server) refuses some recipients
with 550 5.1.1; Postfix mails its DSNs to the VERP addresses, which it
routes to `mailroom inbound`; exactly the refused addresses must end with a
bounced ledger row and a hard_bounce suppression, and nothing is left
unparsed. Needs root (Postfix's master) and Debian's postfix package
(`make deps` installs it)."""

from __future__ import annotations

import base64
import os
import shutil
import threading

import pytest
from aiosmtpd.controller import Controller

from mailroom.send import verp
from mailroom.inbound.server import Inbound
from mailroom.signing import Keyring
from mailroom.net import free_port

from .postfixkit import PrivatePostfix
from .runnerkit import FROM, RunnerProcess, parse, wait_for
from .test_inbound import _role_url

BOUNCE_DOMAIN = "bounces.postfix-test.mailroom.invalid"
LIVE = [f"live-{i}@example.com" for i in range(4)]
DEAD = ["dead-1@example.com", "dead-2@example.net"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("postfix", path="/usr/sbin:/usr/bin"),
                                reason="needs root and Debian's postfix (make deps)")


class NextHop:
    """The relay after Postfix: accepts live-* recipients, refuses dead-* at RCPT."""

    def __init__(self):
        self.accepted: list[tuple[str, str, bytes]] = []  # (mail from, rcpt, data)
        self.lock = threading.Lock()
        self.controller = Controller(self, hostname="127.0.0.1", port=free_port())

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("dead-"):
            return "550 5.1.1 <%s>: Recipient address rejected: User unknown" % address
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            for rcpt in envelope.rcpt_tos:
                self.accepted.append((envelope.mail_from, rcpt, envelope.content))
        return "250 2.0.0 OK"


@pytest.fixture
def feedback_login(conn):
    """A login role granted mailroom_feedback only (cluster-wide: dropped after)."""
    name = "t_postfix_feedback"
    conn.execute(f"DROP ROLE IF EXISTS {name}")
    conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE mailroom_feedback")
    yield name
    conn.execute(f"DROP ROLE IF EXISTS {name}")


def test_postfix_dsns_bounce_exactly_the_refused_addresses(conn, db_url, feedback_login):
    secret = os.urandom(32)
    keys_env = {"MAILROOM_SIGNING_KEYS": "k1=" + base64.urlsafe_b64encode(secret).decode().rstrip("=")}
    for to in LIVE + DEAD:
        conn.execute("SELECT mailroom.enqueue(%s, 'Your receipt', 'Thanks', p_delivery_key => %s)", (to, "pf:" + to))

    hop = NextHop()
    hop.controller.start()
    inbound = Inbound(_role_url(db_url, feedback_login), verp.Verp(Keyring([("k1", secret)])), port=free_port(),
                      domains=(BOUNCE_DOMAIN,))
    inbound.start()
    postfix = PrivatePostfix(free_port(), hop.controller.port, BOUNCE_DOMAIN, inbound.port)
    try:
        postfix.start(timeout=120)  # slow under load, never flaky: a generous bound
        with RunnerProcess(db_url, f"smtp://127.0.0.1:{postfix.smtpd_port}", "--verp", f"default={BOUNCE_DOMAIN}",
                           "--exit-when-idle", "--poll-interval", "0.2", env=keys_env) as runner:
            assert runner.wait(60) == 0, runner.log()
        # Postfix relays, the next hop refuses, Postfix writes and sends the DSNs.
        wait_for(lambda: conn.execute("SELECT count(*) AS n FROM mailroom.feedback_events").fetchone()["n"] >= len(DEAD),
                 timeout=90, what="a DSN for each refused address:\n" + postfix.log()[-3000:])
        wait_for(lambda: len(hop.accepted) == len(LIVE), timeout=30, what="the live mail at the next hop")
    finally:
        postfix.stop()
        inbound.stop()
        hop.controller.stop()

    bounced = conn.execute("""SELECT c.to_address FROM mailroom.attempts a JOIN mailroom.contents c ON c.id = a.message_id
                              WHERE a.outcome = 'bounced' ORDER BY 1""").fetchall()
    assert [r["to_address"] for r in bounced] == sorted(DEAD)
    suppressed = conn.execute("SELECT address, reason, source FROM mailroom.suppressions ORDER BY address").fetchall()
    assert [(r["address"], r["reason"]) for r in suppressed] == [(a, "hard_bounce") for a in sorted(DEAD)]
    events = conn.execute("SELECT kind, status, source FROM mailroom.feedback_events").fetchall()
    assert [(e["kind"], e["status"], e["source"]) for e in events] == [("bounce", "5.1.1", "dsn")] * len(DEAD)
    assert conn.execute("SELECT count(*) AS n FROM mailroom.inbound_unparsed").fetchone()["n"] == 0
    assert conn.execute("SELECT count(*) AS n FROM mailroom.integrity_problems()").fetchone()["n"] == 0
    # Every mail left as sent (Postfix took it); the bounce came later.
    assert {r["status"] for r in conn.execute("SELECT status FROM mailroom.messages")} == {"sent"}
    # The next hop saw each live mail with its own VERP envelope sender and the From header unchanged.
    ids = {r["to_address"]: r["id"] for r in conn.execute("SELECT id, to_address FROM mailroom.contents")}
    checker = verp.Verp(Keyring([("k1", secret)]))
    for mail_from, rcpt, data in hop.accepted:
        assert checker.parse(mail_from) == (ids[rcpt], "ok") and mail_from.endswith("@" + BOUNCE_DOMAIN)
        assert parse(data)["From"] == FROM
