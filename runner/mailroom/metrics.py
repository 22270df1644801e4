"""Prometheus metrics of a runner process (served with --metrics-port)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

MAILS = Counter(
    "mailroom_mails_total",
    "Send attempts by outcome (sent, retry, failed, ambiguous) and sender.",
    ["sender", "outcome"],
)
CLAIMED = Counter("mailroom_claimed_total", "Messages claimed.", ["sender"])
RELEASED = Counter("mailroom_released_total", "Claims handed back unsent (shutdown, transport down).")
CLAIM_SECONDS = Histogram(
    "mailroom_claim_seconds",
    "Time of one claim_batch call.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
SEND_SECONDS = Histogram(
    "mailroom_send_seconds",
    "Time to render and hand one mail to the transport.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
IN_FLIGHT = Gauge("mailroom_in_flight", "Messages claimed by this runner and not yet reported.")
# Read from the send pool when scraped (set_function): nothing on the hot path.
SESSIONS_IDLE = Gauge("mailroom_sessions_idle",
                      "SMTP sessions waiting for a mail to send (claimed mail runs short when this stays high).")
SENDS_WAITING = Gauge("mailroom_sends_waiting", "Claimed mail waiting for a free SMTP session.")
UP = Gauge("mailroom_up", "1 while the component is reachable.", ["component"])


def serve(port: int, addr: str = "127.0.0.1") -> None:
    start_http_server(port, addr=addr)
