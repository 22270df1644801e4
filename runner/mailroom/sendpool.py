"""The send pool: the runner's SMTP connections, and nothing else.

The claimer submits jobs; the pool sends each on one of its connections and
calls `deliver(conn, job)` (which builds, sends and records the outcome) or,
when the runner is stopping or the relay is down, `hand_back(job)`. The pool
knows nothing of the database.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable


class ThreadSendPool:
    """N threads, each keeping one transport connection open."""

    def __init__(self, transport, concurrency: int, deliver: Callable, hand_back: Callable,
                 should_hand_back: Callable[[], bool]):
        self.transport = transport
        self.concurrency = concurrency
        self._deliver, self._hand_back, self._should_hand_back = deliver, hand_back, should_hand_back
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for i in range(self.concurrency):
            t = threading.Thread(target=self._worker, name=f"sender-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def submit(self, job) -> None:
        self._jobs.put(job)

    def stop(self, deadline: float) -> int:
        """Hand back what has not started, let sends in progress finish until
        the monotonic `deadline`; returns how many are still sending then."""
        for _ in self._threads:
            self._jobs.put(None)
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return sum(t.is_alive() for t in self._threads)

    def _worker(self) -> None:
        conn = self.transport.connection()
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                if self._should_hand_back():
                    self._hand_back(job)
                    continue
                self._deliver(conn, job)
        finally:
            conn.close()
