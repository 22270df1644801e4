"""DKIM and unsubscribe cost: the runner CPU per mail of signing and of the
one-click unsubscribe headers, as ratios to the same drain without them.

One `mailroom run` process (default concurrency and batch) drains N freshly
loaded mails (bench/_common.load_queued: template, variables, text + HTML) to
`null://?render=1`, which builds every mail (template, MIME, headers,
Feedback-ID, and the DKIM-Signature when a profile is configured) and
discards it: no SMTP, so the figure is what building and signing cost. Three
sides, in alternating rounds, each with a runner of its own started for it:

- unsigned: no --dkim (Feedback-ID is still added);
- rsa-sha256: --dkim default=...:rsa2048.pem (a 2048-bit key; the private-key
  step in OpenSSL, see mailroom/send/dkim.py);
- ed25519-sha256: --dkim default=...:ed25519.pem;
- each of the three again with --unsubscribe-url and --unsubscribe-mailto
  (a signed token, List-Unsubscribe and List-Unsubscribe-Post per mail, and
  with DKIM those headers signed too). The bench's mail is transactional, so
  its scratch database gives that stream unsubscribe headers
  (mailroom.define_stream); the runners without --unsubscribe-url add none.

The figure is the runner's user + system CPU over the drain (/proc), per
mail; the ratio is taken within each round, median over rounds. Also shown,
measured in this process on one built mail: dkimpy's sign() with its own
pure-Python RSA, the path mailroom/send/dkim.py replaces.

    .venv/bin/python bench/dkim_cost.py [--quick]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_parser, mailroom_runners, scratch_database, target  # noqa: E402
from drain import IDLE, run_mailroom  # noqa: E402

DOMAIN = "bench.mailroom.invalid"
SIDES = {"unsigned": "unsigned (Feedback-ID only)", "unsub": "unsubscribe headers, unsigned",
         "rsa": "rsa-sha256, 2048 bits", "rsa+unsub": "rsa-sha256 + unsubscribe",
         "ed25519": "ed25519-sha256", "ed25519+unsub": "ed25519-sha256 + unsubscribe"}
MAX_UNSUBSCRIBE_RATIO = 1.25  # the token and two headers: well under a quarter of building the mail
MAX_RSA_ADDED_US = 3000  # well above OpenSSL's ~1,000 µs, well below dkimpy's own RSA (~9,000)


def write_keys(directory: Path) -> dict[str, Path]:
    keys = {"rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ed25519": ed25519.Ed25519PrivateKey.generate()}
    paths = {}
    for name, key in keys.items():
        paths[name] = directory / f"{name}.pem"
        paths[name].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
        paths[name].chmod(0o600)
    return paths


def pure_dkimpy_rsa_us(key_path: Path) -> tuple[float, float]:
    """CPU µs per signature in this process: (dkimpy's own RSA, mailroom's Signer), same mail and key."""
    import dkim

    from mailroom.send import dkim as mailroom_dkim
    from mailroom.send.render import Renderer

    row = {"id": 1, "delivery_key": "bench-1", "to_address": "user1@d1.example", "subject": "Your order 1",
           "body_text": "Hello User 1,\nyour order 1 has shipped.\n", "body_html": "<p>Hello User 1</p>"}
    data = Renderer("Bench <bench@bench.mailroom.invalid>").build(row).data
    signer = mailroom_dkim.load_signer(f"default={DOMAIN}:rsa:{key_path}")
    # The file is PKCS#8; mailroom.send.dkim registered the PKCS#1 form it hands dkimpy,
    # so dkimpy parses this one itself and signs with its own RSA.
    pure = key_path.read_bytes()
    assert pure not in mailroom_dkim._openssl_keys

    def cpu_us(fn, n):
        t = time.process_time()
        for _ in range(n):
            fn()
        return (time.process_time() - t) / n * 1e6

    headers = signer.header_list(data)
    own = cpu_us(lambda: dkim.sign(data, b"rsa", DOMAIN.encode(), pure, canonicalize=(b"relaxed", b"relaxed"),
                                   include_headers=headers), 20)
    return own, cpu_us(lambda: signer.sign(data), 100)


def main() -> int:
    args = bench_parser(__doc__).parse_args()
    n = 1_500 if args.quick else 10_000
    rounds = 1 if args.quick else 3
    cpu: dict[str, list[float]] = {k: [] for k in SIDES}
    rate: dict[str, list[float]] = {k: [] for k in SIDES}
    with tempfile.TemporaryDirectory(prefix="mailroom-bench-dkim-") as tmp, \
            scratch_database("mailroom_bench_dkim") as url, psycopg.connect(url, autocommit=True) as conn:
        keys = write_keys(Path(tmp))
        from mailroom.signing import new_key_line
        signing_keys = Path(tmp) / "signing-keys"
        signing_keys.write_text(new_key_line("bench") + "\n")
        conn.execute("SELECT mailroom.define_stream('transactional', true)")  # see the top of this file
        unsub = ("--unsubscribe-url", "https://u.bench.mailroom.invalid", "--unsubscribe-mailto",
                 "u.bench.mailroom.invalid", "--signing-keys", str(signing_keys))
        rsa_profile = ("--dkim", f"default={DOMAIN}:rsa2048:{keys['rsa']}")
        ed_profile = ("--dkim", f"default={DOMAIN}:ed25519:{keys['ed25519']}")
        profiles = {"unsigned": (), "unsub": unsub, "rsa": rsa_profile, "rsa+unsub": rsa_profile + unsub,
                    "ed25519": ed_profile, "ed25519+unsub": ed_profile + unsub}
        for r in range(rounds):
            for side in SIDES:
                with mailroom_runners(url, "null://?render=1", 1, *IDLE, *profiles[side], name="dkim") as procs:
                    mails_per_s, cpu_per_mail, _wal = run_mailroom(url, conn, n, procs, f"{side}{r}")
                rate[side].append(mails_per_s)
                cpu[side].append(cpu_per_mail)
        own_rsa, signer_rsa = pure_dkimpy_rsa_us(keys["rsa"])

    print(f"mailroom bench: DKIM signing and unsubscribe header cost, 1 `mailroom run` draining {n:,} mails to null://?render=1 "
          f"(built and discarded), {rounds} alternating round(s)")
    print(f"{'side':32} {'mails/s':>9} {'CPU µs/mail':>12} {'added µs':>9} {'x unsigned':>11}")
    base = statistics.median(cpu["unsigned"])
    ratio = {}
    for side, label in SIDES.items():
        ratio[side] = statistics.median(c / u for c, u in zip(cpu[side], cpu["unsigned"]))
        med = statistics.median(cpu[side])
        print(f"{label:32} {statistics.median(rate[side]):9.0f} {med * 1e6:12.0f} {(med - base) * 1e6:9.0f}"
              f" {ratio[side]:11.2f}")
    print(f"in this process, one built mail: dkimpy's sign() with its own pure-Python RSA {own_rsa:,.0f} µs CPU, "
          f"mailroom's Signer (RSA step in OpenSSL) {signer_rsa:,.0f} µs")
    for signed in ("unsigned", "rsa", "ed25519"):
        with_unsub = "unsub" if signed == "unsigned" else f"{signed}+unsub"
        print(f"unsubscribe headers on {SIDES[signed]}: "
              f"{statistics.median(c / u for c, u in zip(cpu[with_unsub], cpu[signed])):.2f} x without them")
    added = (statistics.median(cpu["rsa"]) - base) * 1e6
    target(f"rsa-sha256 adds <= {MAX_RSA_ADDED_US:,} µs runner CPU per mail", f"{added:,.0f} µs "
           f"({ratio['rsa']:.2f} x unsigned)", added <= MAX_RSA_ADDED_US)
    target(f"unsubscribe headers cost <= {MAX_UNSUBSCRIBE_RATIO} x the unsigned drain's CPU per mail",
           f"{ratio['unsub']:.2f} x unsigned", ratio["unsub"] <= MAX_UNSUBSCRIBE_RATIO)
    return 0


if __name__ == "__main__":
    sys.exit(main())
