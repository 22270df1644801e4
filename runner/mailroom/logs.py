"""One-line structured logs for the runner and the sink.

`event(level, name, **fields)` writes one line: in text format
``2026-11-30T08:00:00.123Z INFO  smtp.down error="Connection refused"``, in JSON
format one object per line. Every line passes through a redaction filter that
replaces registered secrets (the SMTP password, the database password) with
``***``, so a secret can never reach a log line even through an exception's text.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import datetime, timezone

LOGGER_NAME = "mailroom"
_secrets: set[str] = set()
_secrets_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Never print `value` in any log line, nor its URL-quoted or base64 forms
    (AUTH LOGIN sends the password base64-encoded; a server may echo it)."""
    if not value:
        return
    import base64
    from urllib.parse import quote, quote_plus

    forms = {value, quote(value, safe=""), quote(value), quote_plus(value, safe=""),
             base64.b64encode(value.encode()).decode()}
    global _secrets_longest_first
    with _secrets_lock:
        _secrets.update(forms)
        _secrets_longest_first = tuple(sorted(_secrets, key=len, reverse=True))


# What redact replaces, sorted once per register_secret rather than per call
# (every outcome's detail goes through redact on its way to the database).
_secrets_longest_first: tuple[str, ...] = ()


def redact(text: str) -> str:
    for s in _secrets_longest_first:
        if s and s in text:
            text = text.replace(s, "***")
    return text


def _ts(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _text_value(v) -> str:
    s = str(v)
    if s == "" or any(c in s for c in ' "=\n\t'):
        return json.dumps(s, ensure_ascii=False)
    return s


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", {}) or {}
        parts = [_ts(record), f"{record.levelname:<5}", record.getMessage()]
        parts += [f"{k}={_text_value(v)}" for k, v in fields.items() if v is not None]
        if record.exc_info:
            parts.append("exc=" + json.dumps(self.formatException(record.exc_info).splitlines()[-1]))
        return redact(" ".join(parts).replace("\n", " "))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        obj = {"ts": _ts(record), "level": record.levelname.lower(), "event": record.getMessage()}
        for k, v in (getattr(record, "fields", {}) or {}).items():
            if v is not None:
                obj[k] = v if isinstance(v, (int, float, bool)) else str(v)
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info).splitlines()[-1]
        return redact(json.dumps(obj, ensure_ascii=False))


def setup(fmt: str = "text", level: str = "info", stream=None) -> logging.Logger:
    logger = logging.getLogger(LOGGER_NAME)
    for h in list(logger.handlers):
        logger.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
    # psycopg_pool warns once per failed connection attempt; the runner logs one
    # line per state change instead, so only psycopg's errors come through.
    lib = logging.getLogger("psycopg")
    for h in list(lib.handlers):
        lib.removeHandler(h)
    lib.addHandler(handler)
    lib.setLevel(logging.ERROR)
    lib.propagate = False
    return logger


def event(level: int | str, name: str, **fields) -> None:
    """Log one event with structured fields (None values are left out)."""
    if isinstance(level, str):
        level = logging.getLevelName(level.upper())
    logging.getLogger(LOGGER_NAME).log(level, name, extra={"fields": fields})


class StateLog:
    """Logs one line per change of a component's health (up/down), not per error.

    `down(error)` logs `<name>.down` only on the transition from up; `up()` logs
    `<name>.up` only on the transition from down, with how long it was down.
    """

    def __init__(self, name: str):
        self.name = name
        self.is_up = True
        self.error: str | None = None  # the latest reason while down (heartbeat.py reports it)
        self._since = 0.0
        self._lock = threading.Lock()

    def down(self, error: object, **fields) -> bool:
        import time

        with self._lock:
            self.error = str(error)
            if not self.is_up:
                return False
            self.is_up = False
            self._since = time.monotonic()
        event(logging.WARNING, f"{self.name}.down", error=str(error), **fields)
        return True

    def up(self, **fields) -> bool:
        import time

        with self._lock:
            if self.is_up:
                return False
            self.is_up = True
            self.error = None
            down_for = time.monotonic() - self._since
        event(logging.INFO, f"{self.name}.up", down_seconds=round(down_for, 3), **fields)
        return True
