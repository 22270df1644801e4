"""Ad hoc A/B of mailroom's SQL, for working on drain.py's "SQL alone"
figure (not run by `make bench`: the leading underscore keeps bench/_run.py
off it). Each mode loads a fresh queue of N mails (bench/_common.load_queued)
and the limit's own table (drain.py) in a scratch database, and runs pgbench
scripts (bench/*.pgbench, or a path); PRE=a.sql,b.sql runs SQL files in the
database first (variant functions, settings), PRE_B the same for the second
database of `databases`.

  statements N SCRIPT...   each script alone, one client, synchronous_commit
                           off: every statement's latency (pgbench -r), the
                           CPU a statement costs. Put variants side by side
                           in one script so all meet the same moment of the
                           machine, and say CLAIMS=k for a script with k
                           claims of 50 (else the queue runs dry and the
                           later claims cost next to nothing).
  interleaved N SCRIPT...  all scripts in one pgbench run (-f X@1 each), 4
                           clients, synchronous_commit on: each script's mean
                           latency and the first's / each, the same load on
                           every side.
  alone N ROUNDS SCRIPT...  each script on its own, 4 clients, synchronous_commit
                           on (as drain.py runs its pgbench sides), the scripts
                           taking turns (mirrored every other round): each
                           one's mails per second / the first's, round by
                           round (the spread between rounds is the machine's).
  databases N ROUNDS SCRIPT  one script on two databases taking turns (B gets
                           PRE_B), 4 clients, synchronous_commit on: B / A
                           mails per second, round by round.
  cpu N ROUNDS              the same two databases taking turns, one client,
                           synchronous_commit off: the CPU time the server
                           process spends (its /proc schedstat) per mail of
                           claim_batch(50) + mark_outcomes, and B / A by
                           round, and each side's fastest round. What a shared
                           machine moves least: waits are not counted (a busy
                           core still slows a round: see the fastest).

    .venv/bin/python bench/_sql_ab.py interleaved 40000 limit.pgbench mailroom_sql.pgbench

Figures of sql6, brk6, sql7 and session 8 in bench/RESULTS.md were taken with these modes,
the erasure gate's (docs/erasure.md) with cpu.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PGBENCH, PGBENCH_BATCH, ROOT, load_queued, pgbench_rate, scratch_database  # noqa: E402
from drain import SEED_TABLE, load_seed_table  # noqa: E402


def _script(name: str) -> str:
    return name if "/" in name else str(ROOT / "bench" / name)


def _prepare(conn, env: str) -> None:
    conn.execute(SEED_TABLE.format(t="bench_limit"))
    for f in filter(None, os.environ.get(env, "").split(",")):
        conn.execute(Path(f).read_text())


def _load(conn, n: int, script: str) -> None:
    if Path(script).name == "limit.pgbench":
        load_seed_table(conn, "bench_limit", n)
    else:
        load_queued(conn, n, Path(script).stem)


def _rate(url: str, script: str, n: int) -> float:
    """Mails per second of 4 pgbench clients running script until n are done."""
    return pgbench_rate(url, os.path.relpath(_script(script), ROOT / "bench"), n)


def _pgbench(url: str, args: list[str]) -> str:
    out = subprocess.run([PGBENCH, "-n", *args, url], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"pgbench failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout


def statements(n: int, scripts: list[str]) -> None:
    # A script with k claims of 50 (variants side by side) runs N / 50 / k
    # times (CLAIMS=k), so that none of its claims finds the queue empty.
    claims_per_run = int(os.environ.get("CLAIMS", "1"))
    with scratch_database("mailroom_bench_sql_ab", synchronous_commit="off") as url, \
            psycopg.connect(url, autocommit=True) as conn:
        _prepare(conn, "PRE")
        for s in scripts:
            _load(conn, n, s)
            out = _pgbench(url, ["-r", "-f", _script(s), "-t", str(n // PGBENCH_BATCH // claims_per_run)])
            print(s)
            print("\n".join(line for line in out.splitlines() if line.startswith("    ") or "latency average" in line))


def interleaved(n: int, scripts: list[str]) -> None:
    with scratch_database("mailroom_bench_sql_ab", synchronous_commit="on") as url, \
            psycopg.connect(url, autocommit=True) as conn:
        _prepare(conn, "PRE")
        load_seed_table(conn, "bench_limit", n)
        load_queued(conn, 2 * n, "interleaved")
        args = ["-r", "-c", "4", "-j", "4", "-t", str(n // PGBENCH_BATCH // 4 // 2)]
        for s in scripts:
            args += ["-f", _script(s) + "@1"]
        latency = {}
        for block in _pgbench(url, args).split("SQL script ")[1:]:
            name = block.split(":", 1)[1].split("\n")[0].strip()
            latency[name] = float(re.search(r"latency average = ([0-9.]+) ms", block).group(1))
        first = next(iter(latency.values()))
        for name, ms in latency.items():
            print(f"{name:50} {ms:8.3f} ms   first / this {first / ms:5.2f}")


def alone(n: int, rounds: int, scripts: list[str]) -> None:
    rates: dict[str, list[float]] = {s: [] for s in scripts}
    with scratch_database("mailroom_bench_sql_ab", synchronous_commit="on") as url, \
            psycopg.connect(url, autocommit=True) as conn:
        _prepare(conn, "PRE")
        for r in range(rounds):
            for s in scripts if r % 2 == 0 else scripts[::-1]:
                _load(conn, n, s)
                rates[s].append(_rate(url, s, n))
    first = rates[scripts[0]]
    for s, got in rates.items():
        ratios = [b / a for a, b in zip(first, got)]
        print(f"{Path(s).name:28} {statistics.median(got):8.0f}/s  / first by round "
              f"{' '.join(f'{x:.2f}' for x in ratios)}, median {statistics.median(ratios):.3f}")


def _taking_turns(rounds: int, synchronous_commit: str, measure) -> dict[str, list[float]]:
    """Databases A (PRE) and B (PRE_B), measure(conn, url) on each in turn
    (mirrored every other round); each side's figures, round by round."""
    got: dict[str, list[float]] = {"A": [], "B": []}
    with ExitStack() as stack:
        urls = {k: stack.enter_context(scratch_database(f"mailroom_bench_sql_ab_{k.lower()}", synchronous_commit))
                for k in got}
        for k, env in (("A", "PRE"), ("B", "PRE_B")):
            with psycopg.connect(urls[k], autocommit=True) as conn:
                _prepare(conn, env)
        for r in range(rounds):
            for k in ("A", "B") if r % 2 == 0 else ("B", "A"):
                got[k].append(measure(urls[k]))
    return got


def databases(n: int, rounds: int, script: str) -> None:
    def measure(url: str) -> float:
        with psycopg.connect(url, autocommit=True) as conn:
            _load(conn, n, script)
        return _rate(url, script, n)

    rates = _taking_turns(rounds, "on", measure)
    pairs = [b / a for a, b in zip(rates["A"], rates["B"])]
    print(f"A {statistics.median(rates['A']):.0f}/s, B {statistics.median(rates['B']):.0f}/s; "
          f"B / A by round {' '.join(f'{p:.2f}' for p in pairs)}, median {statistics.median(pairs):.3f}")


CLAIM = ("SELECT coalesce(string_agg(id::text, ','), '') AS ids, coalesce((array_agg(lease_token))[1]::text, '')"
         " FROM mailroom.claim_batch('cpu', 50)")


def _backend_us_per_mail(url: str, n: int) -> float:
    """Server CPU (us) per mail of one client claiming 50 and reporting them sent until n are done."""
    with psycopg.connect(url, autocommit=True) as c:
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]

        def cpu_ns() -> int:
            return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])

        start, done = None, 0
        for i in range(n // PGBENCH_BATCH):
            if i == 2:  # plans cached, then count
                start, done = cpu_ns(), 0
            ids, token = c.execute(CLAIM).fetchone()
            report = [{"id": int(x), "token": token, "outcome": "sent"} for x in ids.split(",")] if ids else []
            c.execute("SELECT mailroom.mark_outcomes(%s::jsonb)", (json.dumps(report),))
            done += len(report)
        return (cpu_ns() - start) / 1000 / done


def cpu(n: int, rounds: int) -> None:
    def measure(url: str) -> float:
        with psycopg.connect(url, autocommit=True) as conn:
            load_queued(conn, n, "cpu")
        return _backend_us_per_mail(url, n)

    per = _taking_turns(rounds, "off", measure)
    pairs = [b / a for a, b in zip(per["A"], per["B"])]
    print(f"server CPU per mail: A {statistics.median(per['A']):.1f} us, B {statistics.median(per['B']):.1f} us; "
          f"B / A by round {' '.join(f'{p:.3f}' for p in pairs)}, median {statistics.median(pairs):.3f}")
    # Another process on the same core slows a round down, never speeds it up:
    # each side's fastest round is its least disturbed one.
    print(f"fastest round: A {min(per['A']):.1f} us, B {min(per['B']):.1f} us; B / A {min(per['B']) / min(per['A']):.3f}")


def main() -> int:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "statements":
        statements(int(args[0]), args[1:])
    elif mode == "interleaved":
        interleaved(int(args[0]), args[1:])
    elif mode == "alone":
        alone(int(args[0]), int(args[1]), args[2:])
    elif mode == "databases":
        databases(int(args[0]), int(args[1]), args[2])
    elif mode == "cpu":
        cpu(int(args[0]), int(args[1]))
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
