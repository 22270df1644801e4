"""The `make bench` driver: run every benchmark script, write bench/RESULTS.md.

Every bench/[!_]*.py is a benchmark (files starting with _ are helpers, like
this driver and _common.py). Convention for a benchmark script:

    bench/<name>.py [--quick]

- builds its data in a scratch database with _common.scratch_database;
- prints a title line, a table of figures, then one line per target:
      target <description>: <value> (ok|MISSED)
- may print figures without a bound, one per line: figure <description>: <value>
- exits 0 even when a target is missed (non-zero only when it broke);
- --quick: smaller sizes, so that all scripts together finish within 3 minutes.

RESULTS.md gets the date, the machine (CPU, cores, RAM), the PostgreSQL
version and the settings that matter, the Python and psycopg versions, each
script's output, and a summary of every target line.

    .venv/bin/python bench/_run.py [--quick] [--output FILE] [name ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import _server_url  # noqa: E402

TARGET = re.compile(r"^\s*target (?P<what>.+?): (?P<value>.+) \((?P<verdict>ok|MISSED)\)\s*$")
# A figure the issue asks to see without setting a bound (e.g. the ledger FK's cost).
FIGURE = re.compile(r"^\s*figure (?P<what>.+?): (?P<value>.+?)\s*$")

# Settings that change what the figures mean, shown even at their defaults.
SETTINGS = (
    "shared_buffers", "work_mem", "maintenance_work_mem", "effective_cache_size",
    "synchronous_commit", "fsync", "full_page_writes", "wal_level", "wal_buffers", "max_wal_size",
    "checkpoint_timeout", "commit_delay", "random_page_cost", "effective_io_concurrency", "jit",
    "max_connections", "max_worker_processes", "max_parallel_workers_per_gather",
    "autovacuum", "autovacuum_naptime", "autovacuum_max_workers",
    "autovacuum_vacuum_scale_factor", "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_insert_scale_factor", "autovacuum_analyze_scale_factor",
    "autovacuum_vacuum_cost_delay", "autovacuum_vacuum_cost_limit", "vacuum_cost_limit",
)


def machine() -> list[str]:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = "?"
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        ram = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, AttributeError):
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [f"- machine: {cpu}, {os.cpu_count()} cores, {ram} RAM ({platform.system()} {platform.release()})",
            f"- load average at start: {load}"]


def checkout() -> list[str]:
    """The commit measured, and which of the core* branches it contains at
    their current heads (merged in to measure them together)."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=HERE.parent, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    head = git("log", "-1", "--format=%h %s")
    if not head:
        return []
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    lines = [f"- checkout: {branch} at {head[:110]}{' (uncommitted changes)' if git('status', '--porcelain', '--untracked-files=no') else ''}"]
    # The v0.4 queue-core branches (core, core-hot, ...), written in parallel.
    contained = [b for b in git("branch", "--list", "core*", "--format=%(refname:short)", "--merged", "HEAD").split()
                 if b != branch]
    behind = [b for b in git("branch", "--list", "core*", "--format=%(refname:short)", "--no-merged", "HEAD").split()
              if b != branch]
    if contained:
        lines.append(f"- contains the current heads of: {', '.join(contained)}")
    if behind:
        lines.append(f"- does not contain (the current heads of): {', '.join(behind)}")
    return lines


def server() -> list[str]:
    with psycopg.connect(_server_url(), autocommit=True) as c:
        version = c.execute("SELECT version()").fetchone()[0]
        rows = c.execute(
            "SELECT name, setting, unit, source FROM pg_settings"
            " WHERE name = ANY(%s) OR (source NOT IN ('default', 'override', 'client', 'session')"
            "                          AND name NOT IN ('port', 'unix_socket_directories', 'data_directory',"
            "                                           'hba_file', 'ident_file', 'config_file', 'external_pid_file'))"
            " ORDER BY name", (list(SETTINGS),)).fetchall()
    lines = [f"- PostgreSQL: {version}", "- settings (non-default ones marked *):", ""]
    for name, setting, unit, source in rows:
        shown = setting + (f" ({unit})" if unit else "")
        lines.append(f"      {'*' if source != 'default' else ' '} {name} = {shown}")
    lines.append("")
    return lines


def versions() -> list[str]:
    return [f"- Python {platform.python_version()}, psycopg {psycopg.__version__}"
            f" (libpq {psycopg.pq.version() // 10000}.{psycopg.pq.version() % 100})"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="pass --quick to every script")
    parser.add_argument("--output", default=str(HERE / "RESULTS.md"))
    parser.add_argument("names", nargs="*", help="only these scripts (names without .py)")
    args = parser.parse_args()

    scripts = sorted(p for p in HERE.glob("[!_]*.py"))
    if args.names:
        scripts = [p for p in scripts if p.stem in args.names]
    mode = "quick (--quick)" if args.quick else "full"
    started = dt.datetime.now(dt.timezone.utc)
    head = [f"# make bench{' QUICK=1' if args.quick else ''}: {started:%Y-%m-%d %H:%M} UTC", "",
            f"- mode: {mode}; scripts: {', '.join(p.name for p in scripts)}",
            *checkout(), *machine(), *versions(), *server(),
            "Absolute figures are for information only (shared machine); the ratios compare two",
            "sides measured in the same run on the same cluster.", ""]
    out = Path(args.output)
    sections: list[str] = []
    targets: list[tuple[str, str, str, str]] = []
    figures: list[tuple[str, str, str]] = []
    broken: list[str] = []

    def write(done: bool) -> None:
        total = (dt.datetime.now(dt.timezone.utc) - started).total_seconds()
        summary = []
        if figures:
            summary += ["## Figures without a bound", "", "| script | figure | value |", "| --- | --- | --- |"]
            summary += [f"| {s} | {w} | {v} |" for s, w, v in figures]
            summary.append("")
        summary += ["## Targets", ""]
        if targets:
            summary += ["| script | target | value | verdict |", "| --- | --- | --- | --- |"]
            summary += [f"| {s} | {w} | {v} | {'ok' if r == 'ok' else '**MISSED**'} |" for s, w, v, r in targets]
        else:
            summary.append("(no target lines)")
        if broken:
            summary += ["", "Scripts that failed (non-zero exit): " + ", ".join(broken)]
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        summary += ["", f"Total time: {total:.0f} s{'' if done else ' (still running)'};"
                    f" load average {'at the end' if done else 'now'}: {load}", ""]
        out.write_text("\n".join(head + sections + summary))

    for script in scripts:
        cmd = [sys.executable, str(script)] + (["--quick"] if args.quick else [])
        print(f"== {script.name}", flush=True)
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=HERE.parent)
        lines = []
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line.rstrip("\n"))
        rc = proc.wait()
        elapsed = time.perf_counter() - t
        for line in lines:
            m = TARGET.match(line)
            if m:
                targets.append((script.stem, m["what"], m["value"], m["verdict"]))
                continue
            m = FIGURE.match(line)
            if m:
                figures.append((script.stem, m["what"], m["value"]))
        if rc != 0:
            broken.append(f"{script.name} (exit {rc})")
        sections += [f"## {script.name}{' --quick' if args.quick else ''} ({elapsed:.0f} s"
                     f"{'' if rc == 0 else f', exit {rc}'})", "", "```", *lines, "```", ""]
        write(done=False)
    write(done=True)
    print(f"wrote {out}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
