"""How values read in a terminal table and on the console's pages: the same
spelling for both (durations as 4m05s, times in UTC, NULL as "-")."""

from __future__ import annotations

import datetime as dt
from typing import Any


def human(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
        if seconds < 60:
            return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
        minutes, secs = divmod(int(seconds), 60)
        hours, minutes = divmod(minutes, 60)
        days, hours = divmod(hours, 24)
        if days:
            return f"{days}d{hours}h"
        if hours:
            return f"{hours}h{minutes:02d}m"
        return f"{minutes}m{secs:02d}s"
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    if isinstance(value, (list, tuple)):
        return ",".join(human(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
