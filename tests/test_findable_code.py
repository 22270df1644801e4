"""Findable code (issue 13, item 6): every function in schema mailroom of the
deployed database is defined in deploy/<change>.sql of a change in the current
plan, so a reader who looks for a function finds it there. The @-tagged copies
(deploy/<change>@v0.x.0.sql) are history: what Sqitch deployed for an older
instance of a reworked change. A rework that redefines one function of a
change copies the change's other functions into the new deploy script
(CREATE OR REPLACE, verbatim), and a function the rework removes is dropped
there explicitly."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CREATE_FUNCTION = re.compile(
    r"\bCREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+mailroom\.([a-z_][a-z0-9_]*)\s*\(", re.IGNORECASE
)


def plan_changes(plan: Path = ROOT / "sqitch.plan") -> list[str]:
    """The change names of the plan, each once, in plan order (tags, pragmas and
    comments skipped)."""
    names: list[str] = []
    for line in plan.read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "%#@":
            continue
        name = line.split()[0]
        if name not in names:
            names.append(name)
    return names


def defined_in(path: Path) -> set[str]:
    """The mailroom function names a deploy script creates."""
    return {m.lower() for m in CREATE_FUNCTION.findall(path.read_text())}


def test_plan_parsing_sees_current_changes_only():
    changes = plan_changes()
    assert "split_messages" in changes and "rate_limit" in changes
    assert not any("@" in c for c in changes), "tags are not changes"
    # deploy/<change>.sql exists for each, and the @ copies are not among them
    assert [c for c in changes if not (ROOT / "deploy" / f"{c}.sql").is_file()] == []


def test_every_deployed_function_is_defined_in_its_current_deploy_script(conn):
    deployed = {
        r["proname"]
        for r in conn.execute(
            "SELECT DISTINCT p.proname::text AS proname FROM pg_catalog.pg_proc p"
            " WHERE p.pronamespace = 'mailroom'::regnamespace"
        )
    }
    assert len(deployed) > 50, "the template database has the schema deployed"

    current: dict[str, list[str]] = {}
    for change in plan_changes():
        for name in defined_in(ROOT / "deploy" / f"{change}.sql"):
            current.setdefault(name, []).append(change)

    missing = sorted(deployed - current.keys())
    if missing:
        # Say where each one is defined today, so the fix is a copy away.
        history = {
            name: sorted(p.name for p in (ROOT / "deploy").glob("*@*.sql") if name in defined_in(p))
            for name in missing
        }
        lines = [f"  mailroom.{n}: only in {', '.join(history[n]) or 'no deploy script'}" for n in missing]
        raise AssertionError(
            "functions defined in no deploy/<change>.sql of the current plan (rework the change so its"
            " deploy script defines them again, or drop them there):\n" + "\n".join(lines)
        )
