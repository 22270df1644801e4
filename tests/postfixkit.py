"""A private Debian Postfix on loopback for tests: its own config_directory,
queue_directory and data_directory in a temporary folder, started with
`postfix -c DIR start` (as root) and stopped with `postfix -c DIR stop`.

It accepts mail from 127.0.0.1 on `smtpd_port`, relays everything to
`relay_port` (the next hop), and sends mail for `inbound_domain` (the VERP
bounce domain, where its DSNs go) to `inbound_port`. Queue and backoff
times are cut to seconds so a DSN comes back at once; DNS is off (every
destination is a literal [127.0.0.1])."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

POSTFIX = shutil.which("postfix") or "/usr/sbin/postfix"

MASTER_CF = """\
# service type  private unpriv  chroot  wakeup  maxproc command
127.0.0.1:{smtpd_port} inet n - n - - smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
"""

MAIN_CF = """\
compatibility_level = 3.6
queue_directory = {root}/spool
data_directory = {root}/data
maillog_file = {root}/maillog
maillog_file_prefixes = {root}
mail_owner = postfix
setgid_group = postdrop
inet_interfaces = loopback-only
inet_protocols = ipv4
myhostname = mx.postfix-test.mailroom.invalid
mydomain = postfix-test.mailroom.invalid
myorigin = $myhostname
mydestination =
local_recipient_maps =
alias_maps =
alias_database =
mynetworks = 127.0.0.0/8
smtpd_recipient_restrictions = permit_mynetworks, reject
smtp_dns_support_level = disabled
smtp_host_lookup = native
relayhost = [127.0.0.1]:{relay_port}
transport_maps = inline:{{ {inbound_domain}=smtp:[127.0.0.1]:{inbound_port} }}
# seconds, not hours: a refused recipient is reported at once, a DSN that
# cannot be handed on is retried at once
queue_run_delay = 1s
minimal_backoff_time = 1s
maximal_backoff_time = 2s
maximal_queue_lifetime = 1m
bounce_queue_lifetime = 1m
delay_warning_time = 0
smtp_connect_timeout = 5s
smtp_tls_security_level = none
smtpd_tls_security_level = none
biff = no
"""


class PrivatePostfix:
    def __init__(self, smtpd_port: int, relay_port: int, inbound_domain: str, inbound_port: int):
        # Postfix's daemons run as the postfix user: the folder must be
        # reachable by it (pytest's tmp_path is under a 0700 folder of root).
        self.root = Path(tempfile.mkdtemp(prefix="mailroom-postfix-"))
        os.chmod(self.root, 0o755)
        self.config = self.root / "etc"
        self.config.mkdir()
        (self.root / "spool").mkdir()  # root's; `postfix start` makes its folders inside
        (self.root / "data").mkdir()
        shutil.chown(self.root / "data", "postfix")
        (self.config / "master.cf").write_text(MASTER_CF.format(smtpd_port=smtpd_port))
        (self.config / "main.cf").write_text(MAIN_CF.format(
            root=self.root, relay_port=relay_port, inbound_domain=inbound_domain, inbound_port=inbound_port))
        self.smtpd_port = smtpd_port

    def _postfix(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([POSTFIX, "-c", str(self.config), *args], capture_output=True, text=True,
                              timeout=timeout)

    def log(self) -> str:
        try:
            return (self.root / "maillog").read_text(errors="replace")
        except OSError:
            return ""

    def start(self, timeout: float = 60) -> None:
        done = self._postfix("start", timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"postfix start failed:\n{done.stdout}{done.stderr}\n{self.log()}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # master binds smtpd's port once it runs
            try:
                with socket.create_connection(("127.0.0.1", self.smtpd_port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("postfix did not listen in time:\n" + self.log())

    def stop(self) -> None:
        self._postfix("stop")
        shutil.rmtree(self.root, ignore_errors=True)
