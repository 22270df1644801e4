"""Single enqueue (issue 7, item 6): 4 clients x 10,000 enqueue() calls, one
per transaction, against a bare single-row INSERT and a bare INSERT that also
calls pg_notify, from the same clients.

Client: pgbench (PostgreSQL's own, -M prepared, 4 clients, 2 threads), so the
figures are the server's and not a Python client's. Three custom scripts:

  enqueue        SELECT mailroom.enqueue('u<random>@example.org', 'Hello', 'Body')
                 (validation, suppression check, delivery key, NOTIFY mailroom)
  insert         INSERT INTO public.bare (...) VALUES (...) -- a table with
                 messages' columns, defaults and generated column, primary key only
  insert+notify  the same INSERT and pg_notify('mailroom', sender) in one statement
  indexed+notify the same into a copy WITH messages' indexes and CHECK constraints
                 (LIKE ... INCLUDING ALL): the queue table's own floor

Two alternating rounds of 4 x 5,000 transactions per side (--quick: 4 x 1,000),
best round per side. Target: enqueue >= 0.8 x insert+notify.
    .venv/bin/python bench/single_enqueue.py [--quick]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_parser, scratch_database, target  # noqa: E402

PGBENCH = next((p for p in ("/usr/lib/postgresql/15/bin/pgbench", "pgbench")
                if os.path.sep not in p or os.path.exists(p)), "pgbench")
CLIENTS = 4
VALUES = "'u' || :i || '@example.org', 'Hello', 'Body'"
SCRIPTS = {
    "enqueue": f"\\set i random(1, 1000000000)\nSELECT mailroom.enqueue({VALUES});\n",
    "insert": ("\\set i random(1, 1000000000)\n"
               "INSERT INTO public.bare (delivery_key, to_address, subject, body_text)"
               f" VALUES ('mailroom:' || gen_random_uuid(), {VALUES});\n"),
    "insert+notify": ("\\set i random(1, 1000000000)\n"
                      "WITH i AS (INSERT INTO public.bare (delivery_key, to_address, subject, body_text)"
                      f" VALUES ('mailroom:' || gen_random_uuid(), {VALUES}) RETURNING sender)"
                      " SELECT pg_notify('mailroom', sender) FROM i;\n"),
    "indexed+notify": ("\\set i random(1, 1000000000)\n"
                       "WITH i AS (INSERT INTO public.bare_indexed (delivery_key, to_address, subject, body_text)"
                       f" VALUES ('mailroom:' || gen_random_uuid(), {VALUES}) RETURNING sender)"
                       " SELECT pg_notify('mailroom', sender) FROM i;\n"),
}


def pgbench(url: str, script: Path, transactions: int) -> float:
    info = conninfo_to_dict(url)
    env = dict(os.environ, PGHOST=str(info.get("host", "127.0.0.1")), PGPORT=str(info.get("port", 5432)),
               PGUSER=str(info.get("user", "postgres")), PGDATABASE=str(info["dbname"]))
    if info.get("password"):
        env["PGPASSWORD"] = str(info["password"])
    out = subprocess.run([PGBENCH, "-n", "-M", "prepared", "-c", str(CLIENTS), "-j", "2",
                          "-t", str(transactions), "-f", str(script)],
                         env=env, capture_output=True, text=True)
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out.stdout)
    if out.returncode != 0 or not m:
        raise RuntimeError(f"pgbench failed:\n{out.stdout}\n{out.stderr}")
    return float(m.group(1))


def main() -> int:
    args = bench_parser(__doc__).parse_args()
    per_client = 1_000 if args.quick else 5_000
    rounds = 2
    print(f"mailroom bench: single enqueue, pgbench -M prepared, {CLIENTS} clients x {per_client:,} transactions,"
          f" {rounds} alternating rounds, best per side")
    with scratch_database("mailroom_bench_single_enqueue") as url, tempfile.TemporaryDirectory() as tmp:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE TABLE public.bare (LIKE mailroom.messages INCLUDING DEFAULTS INCLUDING GENERATED"
                      " INCLUDING IDENTITY, PRIMARY KEY (id))")
            c.execute("CREATE TABLE public.bare_indexed (LIKE mailroom.messages INCLUDING ALL)")
            sync = c.execute("SHOW synchronous_commit").fetchone()[0]
        files = {}
        for name, text in SCRIPTS.items():
            files[name] = Path(tmp) / (name.replace("+", "_") + ".sql")
            files[name].write_text(text)
        best: dict[str, float] = {}
        for r in range(rounds):
            order = list(SCRIPTS) if r % 2 == 0 else list(reversed(SCRIPTS))
            for name in order:
                best[name] = max(best.get(name, 0.0), pgbench(url, files[name], per_client))
        with psycopg.connect(url, autocommit=True) as c:
            queued = c.execute("SELECT count(*) FROM mailroom.messages").fetchone()[0]
        if queued != rounds * CLIENTS * per_client:
            print(f"FAIL: {queued} messages, expected {rounds * CLIENTS * per_client}", file=sys.stderr)
            return 1
    print(f"(synchronous_commit = {sync}: with 'on' every side waits for a WAL flush per commit)")
    print(f"{'side':16} {'per second':>11} {'enqueue / side':>15}")
    for name, tps in best.items():
        print(f"{name:16} {tps:11.0f} {best['enqueue'] / tps:15.2f}")
    ratio = best["enqueue"] / best["insert+notify"]
    target("enqueue() per second >= 0.8 x bare INSERT + pg_notify", f"{ratio:.2f} x"
           f" ({best['enqueue']:.0f}/s vs {best['insert+notify']:.0f}/s; bare INSERT alone {best['insert']:.0f}/s;"
           f" into a copy with messages' indexes + notify {best['indexed+notify']:.0f}/s ="
           f" {best['indexed+notify'] / best['insert+notify']:.2f} x)", ratio >= 0.8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
