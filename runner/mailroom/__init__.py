"""mailroom: reliable email delivery on PostgreSQL.

The queue logic lives in PL/pgSQL functions in the `mailroom` schema; this
package is the thin runner that claims, renders, sends and reports, plus the
command-line tools around it.
"""

__version__ = "0.1.0"
