"""Single enqueue (issue 7, item 6): 4 clients x 10,000 enqueue() calls, one
per transaction, against a bare single-row INSERT and a bare INSERT that also
calls pg_notify, from the same clients.

Client: pgbench (PostgreSQL's own, -M prepared, 4 clients, 2 threads), so the
figures are the server's and not a Python client's. Three custom scripts:

  enqueue        SELECT mailroom.enqueue('u<random>@example.org', 'Hello', 'Body')
                 (validation, suppression check, delivery key) with every
                 runner busy: nobody waits for work, so no NOTIFY
  enqueue+waiter the same while a runner waits for work (a session holds
                 mailroom.runner_waiting(true)): each enqueue notifies
  insert         INSERT INTO public.bare (...) VALUES (...) -- a table with
                 mailroom.contents' columns, defaults and generated column,
                 primary key only
  insert+notify  the same INSERT and pg_notify('mailroom', sender) in one statement
  indexed+notify the same into a copy WITH contents' indexes and CHECK constraints
                 (LIKE ... INCLUDING ALL)
  tables+notify  the same mail into the v0.4 tables themselves, one statement:
                 its mailroom.contents row and its mailroom.queue row, and
                 pg_notify: what an application writing the tables by hand
                 would pay, enqueue's floor

Two alternating rounds of 4 x 5,000 transactions per side (--quick: 4 x 1,000),
best round per side, once with synchronous_commit = on (PostgreSQL's default,
what production runs: every commit waits for its WAL flush, as in
bench/drain.py) and once with off (the commit is nearly free, so the functions'
own cost shows in full). Target: enqueue >= 0.8 x insert+notify, judged for
each setting.
    .venv/bin/python bench/single_enqueue.py [--quick]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from contextlib import contextmanager
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
    "enqueue+waiter": f"\\set i random(1, 1000000000)\nSELECT mailroom.enqueue({VALUES});\n",
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
    "tables+notify": ("\\set i random(1, 1000000000)\n"
                      "WITH c AS (INSERT INTO mailroom.contents (delivery_key, to_address, subject, body_text)"
                      f" VALUES ('bare:' || gen_random_uuid(), {VALUES})"
                      " RETURNING id, priority, sender, max_attempts, on_ambiguous),"
                      " q AS (INSERT INTO mailroom.queue (id, priority, sender, max_attempts, on_ambiguous)"
                      " SELECT id, priority, sender, max_attempts, on_ambiguous FROM c RETURNING sender)"
                      " SELECT pg_notify('mailroom', sender) FROM q;\n"),
}
SETTINGS = ("on", "off")


def pgbench(url: str, script: Path, transactions: int, synchronous_commit: str) -> float:
    info = conninfo_to_dict(url)
    env = dict(os.environ, PGHOST=str(info.get("host", "127.0.0.1")), PGPORT=str(info.get("port", 5432)),
               PGUSER=str(info.get("user", "postgres")), PGDATABASE=str(info["dbname"]),
               PGOPTIONS=f"-c synchronous_commit={synchronous_commit}")
    if info.get("password"):
        env["PGPASSWORD"] = str(info["password"])
    out = subprocess.run([PGBENCH, "-n", "-M", "prepared", "-c", str(CLIENTS), "-j", "2",
                          "-t", str(transactions), "-f", str(script)],
                         env=env, capture_output=True, text=True)
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out.stdout)
    if out.returncode != 0 or not m:
        raise RuntimeError(f"pgbench failed:\n{out.stdout}\n{out.stderr}")
    return float(m.group(1))


@contextmanager
def waiting_runner(url: str, waits: bool):
    """A session that holds the waiting lock, as a runner waiting for work does."""
    if not waits:
        yield
        return
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SELECT mailroom.runner_waiting(true)")
        yield


def main() -> int:
    args = bench_parser(__doc__).parse_args()
    per_client = 1_000 if args.quick else 5_000
    rounds = 2
    print(f"mailroom bench: single enqueue, pgbench -M prepared, {CLIENTS} clients x {per_client:,} transactions,"
          f" {rounds} alternating rounds, best per side")
    with scratch_database("mailroom_bench_single_enqueue") as url, tempfile.TemporaryDirectory() as tmp:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE TABLE public.bare (LIKE mailroom.contents INCLUDING DEFAULTS INCLUDING GENERATED"
                      " INCLUDING IDENTITY, PRIMARY KEY (id))")
            c.execute("CREATE TABLE public.bare_indexed (LIKE mailroom.contents INCLUDING ALL)")
        files = {}
        for name, text in SCRIPTS.items():
            files[name] = Path(tmp) / (name.replace("+", "_") + ".sql")
            files[name].write_text(text)
        best: dict[tuple[str, str], float] = {}
        for sync in SETTINGS:
            for r in range(rounds):
                order = list(SCRIPTS) if r % 2 == 0 else list(reversed(SCRIPTS))
                for name in order:
                    with waiting_runner(url, name.endswith("+waiter")):
                        best[sync, name] = max(best.get((sync, name), 0.0),
                                               pgbench(url, files[name], per_client, sync))
        with psycopg.connect(url, autocommit=True) as c:
            enqueued = c.execute("SELECT count(*) FROM mailroom.contents c JOIN mailroom.queue q USING (id)"
                                 " WHERE NOT starts_with(c.delivery_key, 'bare:')").fetchone()[0]
        expected = sum(name.startswith("enqueue") for name in SCRIPTS) * len(SETTINGS) * rounds * CLIENTS * per_client
        if enqueued != expected:
            print(f"FAIL: {enqueued} enqueued messages, expected {expected}", file=sys.stderr)
            return 1
    print(f"{'synchronous_commit':18} {'side':16} {'per second':>11} {'enqueue / side':>15}")
    for (sync, name), tps in best.items():
        print(f"{sync:18} {name:16} {tps:11.0f} {best[sync, 'enqueue'] / tps:15.2f}")
    for sync in SETTINGS:
        b = {name: best[sync, name] for name in SCRIPTS}
        for side, when in (("enqueue", "runners busy"), ("enqueue+waiter", "a runner waiting")):
            ratio = b[side] / b["insert+notify"]
            target(f"enqueue() per second >= 0.8 x bare INSERT + pg_notify, {when}, synchronous_commit={sync}",
                   f"{ratio:.2f} x ({b[side]:.0f}/s vs {b['insert+notify']:.0f}/s; into contents + queue themselves"
                   f" + notify {b['tables+notify']:.0f}/s, enqueue = {b[side] / b['tables+notify']:.2f} x of that)",
                   ratio >= 0.8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
