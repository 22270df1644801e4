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
# What the database decides at claim time for every runner, read with the
# heartbeat (mailroom.destination_rates(), mailroom.sender_warmup_status();
# the last deferral's text is in `mailroom status` and the console: free text
# makes no label).
DESTINATION_RATE = Gauge("mailroom_destination_rate_per_minute",
                         "The adaptive throttle's learned rate of a destination group (mails per minute).", ["group"])
DESTINATION_THROTTLED = Gauge("mailroom_destination_throttled",
                              "1 while a destination group's learned rate is in effect (below its ceiling).", ["group"])
DESTINATION_LOWERED_SINCE = Gauge("mailroom_destination_lowered_since_seconds",
                                  "Unix time the group's throttle came into effect (0 while not in effect).", ["group"])
WARMUP_DAY = Gauge("mailroom_warmup_day", "A warming sender's day of its schedule (1 on the start date).", ["sender"])
WARMUP_REMAINING = Gauge("mailroom_warmup_remaining", "Mails a warming sender may still send today.", ["sender"])


def export_deliverability(throttles: list[dict], warmups: list[dict]) -> None:
    """Set the throttle and warm-up gauges from the database's rows."""
    for t in throttles:
        g = t["group_name"]
        DESTINATION_RATE.labels(g).set(float(t["rate_per_minute"]))
        DESTINATION_THROTTLED.labels(g).set(1 if t["in_effect"] else 0)
        DESTINATION_LOWERED_SINCE.labels(g).set(t["lowered_since"].timestamp() if t["lowered_since"] else 0)
    for w in warmups:
        if w["done"]:
            continue
        WARMUP_DAY.labels(w["sender"]).set(w["day"])
        WARMUP_REMAINING.labels(w["sender"]).set(w["remaining"])


def serve(port: int, addr: str = "127.0.0.1") -> None:
    start_http_server(port, addr=addr)
