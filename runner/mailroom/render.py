"""Building the mail: templates (Jinja2 sandbox), MIME structure, headers.

A claimed row either carries a literal subject and bodies, or names a template
(`mailroom.templates`) and per-message variables. Templates are rendered in
Jinja2's sandboxed environment with StrictUndefined, so a missing variable is
an error, never an empty string; the HTML body autoescapes variables.

Compiled templates are cached by (key, updated_at): the runner fetches the
batch's templates with `get_templates` once per batch and compiles only those
it has not seen at that version.

Every mail gets a `Message-ID` derived from its delivery key (the same logical
mail always has the same Message-ID, so a duplicate is recognisable downstream),
a `Date`, the row's headers, and text + HTML as multipart/alternative.

A `RenderError` fails that one message permanently; its text is the reason.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from email.message import EmailMessage
from email.policy import SMTP

# 7bit: non-ASCII bodies go out quoted-printable or base64, so no server has to
# offer 8BITMIME.
POLICY = SMTP.clone(cte_type="7bit")
from email.utils import format_datetime, parseaddr

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Headers a row may not set: the runner owns them.
RESERVED = {"message-id", "date", "to", "mime-version", "content-type", "content-transfer-encoding"}


class RenderError(Exception):
    """This message cannot be built; it fails permanently with this reason."""


@dataclass(frozen=True)
class Template:
    key: str
    updated_at: object
    subject: jinja2.Template
    body_text: jinja2.Template | None
    body_html: jinja2.Template | None


@dataclass(frozen=True)
class Built:
    envelope_from: str
    rcpt: str
    data: bytes
    message_id: str


def message_id(delivery_key: str, domain: str) -> str:
    """`<hex@domain>`: a stable function of the delivery key (no key text leaks)."""
    digest = hashlib.sha256(delivery_key.encode("utf-8")).hexdigest()[:40]
    return f"<{digest}@{domain}>"


class Renderer:
    def __init__(self, from_address: str, message_id_domain: str | None = None):
        name, addr = parseaddr(from_address)
        if "@" not in addr:
            raise ValueError(f"--from: {from_address!r} is not an email address")
        self.from_header = from_address
        self.envelope_from = addr
        self.domain = (message_id_domain or addr.rsplit("@", 1)[1]).strip().lower()
        self._text_env = ImmutableSandboxedEnvironment(
            undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True
        )
        self._html_env = ImmutableSandboxedEnvironment(
            undefined=jinja2.StrictUndefined, autoescape=True, keep_trailing_newline=True
        )
        self._cache: dict[str, Template] = {}
        self._errors: dict[tuple[str, object], str] = {}
        self._lock = threading.Lock()

    # -- templates ------------------------------------------------------------
    def load(self, rows: list[dict]) -> None:
        """Take get_templates rows; compile the ones new or changed since last time."""
        for row in rows:
            key, version = row["key"], row["updated_at"]
            with self._lock:
                have = self._cache.get(key)
                if have is not None and have.updated_at == version:
                    continue
                if (key, version) in self._errors:
                    continue
            try:
                tpl = Template(
                    key,
                    version,
                    self._text_env.from_string(row["subject"] or ""),
                    self._text_env.from_string(row["body_text"]) if row.get("body_text") else None,
                    self._html_env.from_string(row["body_html"]) if row.get("body_html") else None,
                )
            except jinja2.TemplateSyntaxError as e:
                with self._lock:
                    self._errors[(key, version)] = f"template {key!r}: syntax error line {e.lineno}: {e.message}"
                    self._cache.pop(key, None)
                continue
            with self._lock:
                self._cache[key] = tpl
                self._errors = {k: v for k, v in self._errors.items() if k[0] != key}

    def cached_version(self, key: str):
        with self._lock:
            t = self._cache.get(key)
            return t.updated_at if t else None

    def _template(self, key: str) -> Template:
        with self._lock:
            t = self._cache.get(key)
            if t is not None:
                return t
            for (k, _), err in self._errors.items():
                if k == key:
                    raise RenderError(err)
        raise RenderError(f"template {key!r}: not found")

    # -- one mail -------------------------------------------------------------
    def build(self, row: dict, now: datetime | None = None) -> Built:
        subject, text, html = self._content(row)
        if not text and not html:
            raise RenderError("message has neither a text nor an HTML body")
        msg = EmailMessage(policy=POLICY)
        headers = row.get("headers") or {}
        if not isinstance(headers, dict):
            raise RenderError("headers: not a JSON object")
        try:
            msg["From"] = headers.get("From") or headers.get("from") or self.from_header
            msg["To"] = row["to_address"]
            msg["Subject"] = " ".join((subject or "").split())
            msg["Date"] = format_datetime(now or datetime.now(timezone.utc))
            msg["Message-ID"] = message_id(row["delivery_key"], self.domain)
            for name, value in headers.items():
                if name.lower() in RESERVED or name.lower() == "from":
                    continue
                if not isinstance(value, str):
                    raise RenderError(f"headers: {name}: value is not a string")
                msg[name] = value
            if text and html:
                msg.set_content(text)
                msg.add_alternative(html, subtype="html")
            elif html:
                msg.set_content(html, subtype="html")
            else:
                msg.set_content(text)
            data = msg.as_bytes()
        except RenderError:
            raise
        except (ValueError, TypeError, IndexError) as e:
            raise RenderError(f"headers: {e}") from None
        rcpt = parseaddr(row["to_address"])[1] or row["to_address"]
        return Built(self.envelope_from, rcpt, data, msg["Message-ID"])

    def _content(self, row: dict) -> tuple[str | None, str | None, str | None]:
        key = row.get("template_key")
        if not key:
            return row.get("subject"), row.get("body_text"), row.get("body_html")
        tpl = self._template(key)
        variables = row.get("template_vars") or {}
        if not isinstance(variables, dict):
            raise RenderError("template_vars: not a JSON object")
        ctx = dict(variables)
        ctx.setdefault("to_address", row.get("to_address"))
        try:
            subject = tpl.subject.render(ctx)
            text = tpl.body_text.render(ctx) if tpl.body_text else None
            html = tpl.body_html.render(ctx) if tpl.body_html else None
        except jinja2.UndefinedError as e:
            raise RenderError(f"template {key!r}: {e.message}") from None
        except jinja2.exceptions.SecurityError as e:
            raise RenderError(f"template {key!r}: not allowed in the sandbox: {e}") from None
        except Exception as e:  # noqa: BLE001 - any template error fails this mail only
            raise RenderError(f"template {key!r}: {type(e).__name__}: {e}") from None
        return subject, text, html
