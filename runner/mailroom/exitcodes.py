"""Exit codes of the `mailroom` commands: the one table that README.md and
`mailroom --help` / `mailroom run --help` show (tests/test_exit_codes.py
checks that they agree and that each code is what the runner really returns)."""

from __future__ import annotations

OK = 0
CRASH = 1
USAGE = 2
UNREACHABLE = 3
REFUSED = 4
UNRECORDED = 5

# (code, meaning) in the order shown.
TABLE: list[tuple[int, str]] = [
    (OK, "done: stopped cleanly after SIGTERM/SIGINT, or --exit-when-idle found nothing left"),
    (CRASH, "unexpected error, a bug (the traceback is printed); operator commands: no such message; "
            "mailroom fleet: not yet (a problem in the map, not settled, not drained)"),
    (USAGE, "invalid options or configuration (a bad URL, DSN or value, a bad --dkim key): "
            "restarting will not help"),
    (UNREACHABLE, "the database could not be reached at start (a supervisor may retry)"),
    (REFUSED, "the database refused the role at start: a missing privilege (grant mailroom_runner) "
              "or function (deploy the schema)"),
    (UNRECORDED, "outcomes or releases could not be written before the stop deadline "
                 "(their leases expire and reclaim decides)"),
]
SECOND_SIGNAL = "128 + N: a second signal N exited at once (the leases expire and reclaim recovers the mail)"


def help_text() -> str:
    """The table as click help text (\\b keeps click from re-wrapping it)."""
    lines = ["\b", "Exit codes:"] + [f"  {code}  {meaning}" for code, meaning in TABLE] + [f"  {SECOND_SIGNAL}"]
    return "\n".join(lines)
