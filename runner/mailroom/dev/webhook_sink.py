"""An HTTPS receiver of mailroom's webhooks for tests and benchmarks: keeps
every request (headers and body) and answers 200, or 500 to the first
`fail_first` requests (or to all with `fail_always`), each after `delay`
seconds (a slow endpoint)."""

from __future__ import annotations

import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class WebhookSink:
    def __init__(self, context: ssl.SSLContext, fail_first: int = 0, fail_always: bool = False, keep: bool = True,
                 delay: float = 0.0):
        self.requests: list[dict] = []
        self.count = 0
        self.lock = threading.Lock()
        self.fail_first, self.fail_always, self.keep, self.delay = fail_first, fail_always, keep, delay
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: one TLS session per batch

            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if sink.delay:
                    time.sleep(sink.delay)
                with sink.lock:
                    sink.count += 1
                    if sink.keep:
                        sink.requests.append({"headers": dict(self.headers), "body": body})
                    failing = sink.fail_always or sink.count <= sink.fail_first
                self.send_response(500 if failing else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://localhost:{self.server.server_address[1]}/hooks/mailroom?tenant=1"
        self._thread = threading.Thread(target=self.server.serve_forever, name="webhook-sink", daemon=True)

    def __enter__(self) -> "WebhookSink":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def accepted(self) -> list[dict]:
        """The requests answered 200, the first of each event id, in arrival order."""
        with self.lock:
            requests = list(self.requests)
        seen, out = set(), []
        for i, r in enumerate(requests):
            event_id = json.loads(r["body"])["id"]
            if not (self.fail_always or i < self.fail_first) and event_id not in seen:
                seen.add(event_id)
                out.append(r)
        return out
