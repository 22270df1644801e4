"""A timeline of the asyncio send pool, for bench/slow_relay.py --trace.

Off unless the environment names a file prefix in MAILROOM_SEND_TRACE; then
every session keeps a flat list of event, time.time(), reply code (0 but
for replies), time.process_time() for each mail it sends —
"job" (taken from the queue), "built", "cmd" (MAIL/RCPT/DATA written),
"reply" (a reply parsed, with its code), "body" (the body handed to the
kernel) — and the event loop keeps, per iteration, when its select() was
called and when it returned and with how many ready events; garbage
collections are kept too (start, end, generation: every thread waits for
one). The pool writes
it all as JSON to PREFIX.PID when it stops. Off, it costs one attribute test
per reply.

A reply's arrival in the kernel is not visible from Python (TCP sockets
keep no SIOCGSTAMP); it lies between the return of the loop's previous
select() and the one that reported it, so the loop's busy time per
iteration bounds how long a reply waited before the runner saw it. The
process's CPU time tells what the runner spent between the first reply of a
burst and the last command it wrote in answer: on a machine to itself, the
length of the burst.
"""

from __future__ import annotations

import json
import os
import time

ENV = "MAILROOM_SEND_TRACE"


def prefix() -> str | None:
    return os.environ.get(ENV) or None


class LoopTrace:
    """Wraps the loop's selector: (called, returned, ready events) per iteration."""

    def __init__(self, loop) -> None:
        # Flat lists of numbers: the garbage collector does not track them,
        # so tracing does not make the collections it records longer.
        self.iterations: list[float] = []  # called, returned, ready events, ...
        self.collections: list[float] = []  # start, end, generation, ...
        self._gc_started = 0.0
        import gc

        gc.callbacks.append(self._on_gc)
        # asyncio's selector event loop: the one place every iteration
        # passes; uvloop's has none, so its iterations go untimed.
        selector = getattr(loop, "_selector", None)
        if selector is None:
            return
        select = selector.select
        clock = time.time

        def timed_select(timeout=None):
            called = clock()
            ready = select(timeout)
            self.iterations.extend((called, clock(), len(ready)))
            return ready

        selector.select = timed_select

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.time()
        else:
            self.collections.extend((self._gc_started, time.time(), info["generation"]))


def dump(path_prefix: str, sessions: list[list], loop: LoopTrace | None) -> None:
    with open(f"{path_prefix}.{os.getpid()}", "w") as f:
        json.dump({"sessions": sessions, "loop": loop.iterations if loop else [],
                   "gc": loop.collections if loop else []}, f)
