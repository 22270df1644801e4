"""Exponential backoff with jitter, shared by the runner's loops."""

from __future__ import annotations

import random


class Backoff:
    """Exponential backoff with jitter: base, 2*base, ... up to cap, each drawn
    uniformly from its upper half so many runners do not retry in step."""

    def __init__(self, base: float = 0.2, cap: float = 10.0):
        self.base, self.cap, self.n = base, cap, 0

    def next(self) -> float:
        d = min(self.cap, self.base * (2 ** self.n))
        self.n = min(self.n + 1, 30)
        return random.uniform(d / 2, d)

    def reset(self) -> None:
        self.n = 0
