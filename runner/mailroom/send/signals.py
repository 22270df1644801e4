"""SIGTERM and SIGINT for the runner, handled outside the signal handler.

The handler does nothing in Python; `signal.set_wakeup_fd` makes the
interpreter write the signal's number to a socket, and a watcher thread
reads it and does the logging and the stopping there (a handler that logs
or sets an Event can deadlock on a lock the interrupted thread holds). The
first signal asks to stop; a second exits at once (the leases expire and
reclaim recovers whatever was claimed)."""

from __future__ import annotations

import os
import signal
import socket
import threading
from typing import Callable


def _note_signal(signum, frame) -> None:
    """The Python-level handler: nothing. The interpreter has already written
    the signal number to the wake-up fd, which the watcher thread reads."""


class SignalWatcher:
    def __init__(self, on_first: Callable[[str], None]):
        self.on_first = on_first  # called with the signal's name
        self.received = 0
        self._sockets: tuple[socket.socket, socket.socket] | None = None

    def install(self) -> None:
        """Call from the main thread."""
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._sockets = (reader, writer)  # kept open for the life of the process
        signal.signal(signal.SIGTERM, _note_signal)
        signal.signal(signal.SIGINT, _note_signal)
        threading.Thread(target=self._watch, args=(reader,), name="signals", daemon=True).start()

    def _watch(self, reader: socket.socket) -> None:
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum not in (signal.SIGTERM, signal.SIGINT):
                    continue
                self.received += 1
                if self.received > 1:
                    os.write(2, b"mailroom: second signal, exiting at once\n")
                    os._exit(128 + signum)
                self.on_first(signal.Signals(signum).name)
