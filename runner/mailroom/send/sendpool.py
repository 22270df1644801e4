"""The send pool: the runner's SMTP connections, and nothing else.

The claimer submits jobs; the pool sends each on one of its connections and
calls `deliver(conn, job)` (which builds, sends and records the outcome) or,
when the runner is stopping or the relay is down, `hand_back(job)`. The pool
knows nothing of the database.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable

from mailroom.send import sendtrace
from mailroom.logs import event


def new_event_loop():
    """uvloop's event loop when it is installed (a dependency except on
    Windows), else asyncio's: the send pool's sessions spend most of their
    CPU in the loop itself (bench/slow_relay.py --ab measures both)."""
    try:
        import uvloop
    except ImportError:
        import asyncio

        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


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

    def submit_many(self, jobs: list) -> None:
        for job in jobs:
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


class AsyncSendPool:
    """N SMTP sessions as coroutines on one asyncio loop in one thread: a
    slow relay costs a waiting coroutine per connection, not a thread (see
    mailroom.send.asyncsmtp for the measurement behind the choice).

    `deliver` here is split in two, so that building the mail (CPU) and
    recording the outcome stay the runner's and only the wait is async:
    `build(job)` returns the mail or the Outcome that fails it, and
    `record(job, outcome)` takes the outcome.

    A session only sends: a background task builds mail ahead (up to one
    mail per session beyond those being sent), so that a session answered by
    the relay writes its next mail at once, and records the outcomes the
    sessions leave it. Per turn of the event loop it builds at most one mail
    and records at most RECORDS_PER_TURN outcomes, then yields: replies that
    came in meanwhile are handled first. This matters against a relay that
    answers many sessions at once (smtp-sink -w answers all of its held
    sessions in one burst, and holds the next burst until a second after the
    last DATA of this one; see bench/slow_relay.py): building between the
    replies put 0.1 ms per mail, 0.1 s per burst of 1,024, on every
    session's cycle, and recording a good part of that again."""

    RECORDS_PER_TURN = 8

    def __init__(self, transport, concurrency: int, build: Callable, record: Callable, hand_back: Callable,
                 should_hand_back: Callable[[], bool]):
        self.transport = transport
        self.concurrency = concurrency
        self._build, self._record = build, record
        self._hand_back, self._should_hand_back = hand_back, should_hand_back
        self._loop = None
        self._jobs: collections.deque = collections.deque()  # submitted, not built yet
        self._outcomes: collections.deque = collections.deque()  # (job, outcome) not recorded yet
        self._queue = None  # (job, built mail) for the sessions; None stops a session
        self._work = None  # set when the background task may have something to do
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._sending = 0  # sessions in the middle of a mail (loop thread only)
        self.idle = 0  # sessions waiting for a job (loop thread only; read by the metrics)

    def waiting(self) -> int:
        """Jobs submitted that no session has taken yet (built or not)."""
        return self._queue.qsize() + len(self._jobs) if self._queue is not None else 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sendpool", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        import asyncio

        loop = new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._queue, self._work = asyncio.Queue(), asyncio.Event()
        loop.create_task(self._background())
        trace_to = sendtrace.prefix()
        self._trace = sendtrace.LoopTrace(loop) if trace_to else None
        self._timelines: list[list] = []
        self._workers = [loop.create_task(self._session()) for _ in range(self.concurrency)]
        self._ready.set()
        try:
            loop.run_until_complete(asyncio.gather(*self._workers, return_exceptions=True))
            rest = asyncio.all_tasks(loop)  # the background task, the sessions' timeout watchdog
            for t in rest:
                t.cancel()
            loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
            self._settle()
        finally:
            loop.close()
            if trace_to:
                sendtrace.dump(trace_to, self._timelines, self._trace)

    def submit(self, job) -> None:
        self.submit_many([job])

    def submit_many(self, jobs: list) -> None:
        """One wake-up of the loop for a whole claim, not one per mail."""
        self._loop.call_soon_threadsafe(self._put_all, jobs)

    def _put_all(self, jobs: list) -> None:
        self._jobs.extend(jobs)
        self._work.set()

    async def _background(self) -> None:
        import asyncio

        outcomes, jobs, built_queue = self._outcomes, self._jobs, self._queue
        while True:
            busy = bool(outcomes)
            try:
                for _ in range(min(len(outcomes), self.RECORDS_PER_TURN)):
                    self._record(*outcomes.popleft())
                if jobs and built_queue.qsize() < self.concurrency:  # at most a mail ready for every session
                    busy = True
                    self._build_one(jobs.popleft())
            except Exception as e:  # noqa: BLE001 - the task must outlive one mail's bad luck
                event(logging.ERROR, "sendpool.background_failed", error=f"{type(e).__name__}: {e}"[:500])
            if busy:
                await asyncio.sleep(0)  # replies waiting go first
            else:
                self._work.clear()
                await self._work.wait()

    def _build_one(self, job) -> None:
        if self._should_hand_back():
            self._hand_back(job)
            return
        built = self._build(job)
        if hasattr(built, "outcome"):  # an Outcome: the mail could not be built
            self._record(job, built)
        else:
            self._queue.put_nowait((job, built))

    def _stop_sessions(self) -> None:
        """Hand back what is not built yet; each session ends after what is
        built before it (handed back too: the runner is stopping)."""
        while self._jobs:
            self._hand_back(self._jobs.popleft())
        for _ in range(self.concurrency):
            self._queue.put_nowait(None)

    def _settle(self) -> None:
        """Once the sessions are over: every outcome recorded, every mail not
        sent (built for a session that was dropped, or not built) handed back."""
        while self._outcomes:
            self._record(*self._outcomes.popleft())
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None:
                self._hand_back(item[0])
        while self._jobs:
            self._hand_back(self._jobs.popleft())

    def stop(self, deadline: float) -> int:
        """As ThreadSendPool.stop: queued jobs are handed back, sends in
        progress get until `deadline`; returns how many were still sending
        (those sessions are dropped)."""
        import asyncio

        self._loop.call_soon_threadsafe(self._stop_sessions)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if not self._thread.is_alive():
            return 0
        stuck = self._sending

        def cancel_all():
            for t in self._workers:
                t.cancel()
        self._loop.call_soon_threadsafe(cancel_all)
        self._thread.join(1.0)
        return stuck

    async def _session(self) -> None:
        import asyncio

        from mailroom.send.asyncsmtp import AsyncSmtpConnection

        conn = AsyncSmtpConnection(self.transport.url, self.transport.local_hostname)
        trace = None
        if self._trace is not None:
            trace = conn.trace = []
            self._timelines.append(trace)
        try:
            while True:
                self.idle += 1
                try:
                    item = await self._queue.get()
                finally:
                    self.idle -= 1
                if item is None:
                    return
                self._work.set()  # room for one more built ahead
                job, built = item
                if self._should_hand_back():
                    self._hand_back(job)
                    continue
                if trace is not None:
                    trace.extend(("job", time.time(), 0, time.process_time()))  # taken, built by the builder before
                    trace.extend(("built", time.time(), 0, time.process_time()))
                self._sending += 1
                try:
                    outcome = await conn.send(built.envelope_from, built.rcpt, built.data)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - the session should not raise; be safe
                    from mailroom.send.transport import Outcome

                    conn.abort()
                    outcome = Outcome("retry", detail=f"transport: {type(e).__name__}: {e}")
                finally:
                    self._sending -= 1
                self.transport.note(outcome)
                self._outcomes.append((job, outcome))
                self._work.set()
        except asyncio.CancelledError:
            conn.abort()
        finally:
            if conn.transport is not None:
                await conn.close()
