"""mailroom: reliable email delivery on PostgreSQL.

The queue logic lives in PL/pgSQL functions in the `mailroom` schema; this
package is the thin runner that claims, renders, sends and reports, plus the
command-line tools around it.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    # One version string: pyproject.toml's, as installed (no second copy to forget).
    __version__ = version("mailroom")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
