"""One claimed row to the bytes on the wire: the template rendered, the
unsubscribe headers, DKIM, the VERP envelope sender. Whatever one row's
template, variables or headers raise stays with that row: it becomes the
outcome that fails that mail, never an error of the runner."""

from __future__ import annotations

from dataclasses import replace

from mailroom.send.dkim import Signing
from mailroom.send.render import Built, Renderer, RenderError, read_json_columns
from mailroom.send.transport import Outcome
from mailroom.send.unsubscribe import Unsubscribe
from mailroom.send.verp import Verp


class MailBuilder:
    def __init__(self, *, needs_message: bool, unsubscribe: Unsubscribe, signing: Signing,
                 verp: Verp | None, verp_domains: dict[str, str]):
        self.needs_message = needs_message  # False for plain null://: nothing is built
        self.unsubscribe = unsubscribe
        self.signing = signing
        self.verp = verp
        self.verp_domains = verp_domains

    def build(self, row: dict, renderer: Renderer) -> Built | Outcome:
        """The mail, or the outcome that fails it (renderer: the templates of
        the database the row came from)."""
        try:
            if self.needs_message:
                read_json_columns(row)  # left as text by the claim; each job is built once
                url = self.unsubscribe.url_for(row)
                if url is not None:
                    row["unsubscribe_url"] = url  # {{ unsubscribe_url }} in its templates
                built = self.unsubscribe.apply(row, renderer.build(row), url)
                built = self.signing.apply(row, built)  # Feedback-ID, DKIM: the final bytes
            else:  # plain null://: measures the queue machinery, not rendering
                built = Built(renderer.envelope_from, row["to_address"], b"", "")
            return self._with_verp(row, built)
        except RenderError as e:
            return Outcome("failed", detail=f"render: {e}")
        except Exception as e:  # noqa: BLE001 - RecursionError, MemoryError, UnicodeError, ...
            return Outcome("failed", detail=f"render: {type(e).__name__}: {e}"[:1000])

    def _with_verp(self, row: dict, built: Built) -> Built:
        """The envelope sender that names the mail (bounce+id.tag@domain) for a
        sender profile with --verp; the From header stays as built."""
        domain = self.verp_domains.get(row.get("sender") or "default")
        if domain is None:
            return built
        return replace(built, envelope_from=self.verp.address(row["id"], domain))
