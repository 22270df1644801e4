"""Throughput charts drawn on the server as SVG: no JavaScript, no CDN, and
nothing the Content-Security-Policy has to allow (colours come from classes
in the console's stylesheet, never from inline styles)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

SERIES = ("sent", "retried", "failed")


@dataclass
class Bucket:
    start: dt.datetime
    sent: int = 0
    retried: int = 0
    failed: int = 0

    @property
    def total(self) -> int:
        return self.sent + self.retried + self.failed


def buckets(rows: Iterable[dict], now: dt.datetime, window: dt.timedelta, size: dt.timedelta) -> list[Bucket]:
    """Every bucket of the window, oldest first, summed over senders; a
    bucket without attempts is there with zeros (throughput() leaves it out)."""
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    first = epoch + ((now - window) - epoch) // size * size
    count = int((now - first) / size) + 1
    out = [Bucket(first + i * size) for i in range(count)]
    for row in rows:
        i = int((row["bucket_start"] - first) / size)
        if 0 <= i < count:
            for name in SERIES:
                setattr(out[i], name, getattr(out[i], name) + int(row[name]))
    return out


def _nice_max(value: int) -> int:
    """The axis' top: 1, 2 or 5 times a power of ten, at least value."""
    top = 1
    while True:
        for step in (1, 2, 5):
            if step * top >= value:
                return step * top
        top *= 10


def bar_chart(data: list[Bucket], label_every: int, label_format: str, title: str,
              width: int = 720, height: int = 180) -> Markup:
    """Stacked bars (sent, retried, failed) per bucket, with a y axis and a
    few time labels; each bar has a <title> with its numbers."""
    left, right, top, bottom = 44, 8, 10, 22
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = _nice_max(max((b.total for b in data), default=0) or 1)
    slot = plot_w / max(len(data), 1)
    bar_w = max(slot - 1, 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
             f'<title>{escape(title)}</title>']
    for frac in (0, 0.5, 1):
        y = top + plot_h * (1 - frac)
        parts.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{int(peak * frac)}</text>')
    for i, b in enumerate(data):
        x = left + i * slot
        y = top + plot_h
        tip = f"{b.start:%Y-%m-%d %H:%M}Z: {b.sent} sent, {b.retried} retried, {b.failed} failed"
        parts.append(f'<g><title>{escape(tip)}</title>')
        for name in SERIES:
            value = getattr(b, name)
            if value:
                h = plot_h * value / peak
                y -= h
                parts.append(f'<rect class="{name}" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}"/>')
        parts.append("</g>")
        if i % label_every == 0 and x + 30 <= width - right:  # a label cut by the edge says nothing
            parts.append(f'<text class="axis" x="{x:.1f}" y="{height - 6}">{b.start.strftime(label_format)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
