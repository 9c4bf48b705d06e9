"""Stop and reload requests from signals, for every long-running loop.

A handler may safely do very little, so it only sets a flag and writes a byte to a pipe: a
select() loop puts `fileno()` beside its other fds and wakes at once, a plain loop calls
`wait()`. Other threads (a watcher noticing a change) use `wake()` the same way.

Start-up is the exception: nothing checks the flag until the loop runs, so a call that blocks
while starting (a file that turns out to be a FIFO, a slow mount, a peer that does not answer)
would make a stop request wait for it, for ever in the worst case. Inside `starting()`, a stop
signal therefore also raises StopDuringStartup in the main thread, which ends a blocked system
call at once; the caller unwinds and stops what it had started.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopDuringStartup(BaseException):
    """A stop signal arrived while starting (a BaseException: no `except Exception` on the
    way may swallow it)."""


class Signals:
    """SIGTERM/SIGINT mean stop; with `reload`, SIGHUP means reload."""

    def __init__(self, reload: bool = False) -> None:
        self._r, self._w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._reload = reload
        self._old: dict[int, Any] = {}
        self.stop_requested = False
        self._reload_requested = False
        self._starting = False
        self._old_wakeup: int | None = None

    def install(self) -> Signals:
        """Take over the signals (main thread only); `restore()` gives them back."""
        sigs = (*STOP_SIGNALS, signal.SIGHUP) if self._reload else STOP_SIGNALS
        for s in sigs:
            self._old[s] = signal.signal(s, self._handle)
        # The kernel may deliver a signal to any thread (gRPC's, a watcher's), and Python runs
        # the handler only when the main thread next runs: asleep in wait(), it would not, so
        # the interpreter's own C handler writes to the pipe as well and wakes it at once.
        self._old_wakeup = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        return self

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self._reload_requested = True
        else:
            self.stop_requested = True
        self.wake()
        if self._starting and signum != signal.SIGHUP:
            self._starting = False
            raise StopDuringStartup(signal.Signals(signum).name)

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """While the block runs, a stop signal raises StopDuringStartup (main thread)."""
        if self.stop_requested:
            raise StopDuringStartup("stop requested")
        self._starting = True
        try:
            yield
        finally:
            self._starting = False

    def request_stop(self) -> None:
        self.stop_requested = True
        self.wake()

    def request_reload(self) -> None:
        """A reload asked for by another thread (a configuration file that changed)."""
        self._reload_requested = True
        self.wake()

    def take_reload(self) -> bool:
        """True once for each SIGHUP (or request_reload) since the last call."""
        requested, self._reload_requested = self._reload_requested, False
        return requested

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # pipe full: a wake-up is already pending
            os.write(self._w, b"x")

    def fileno(self) -> int:
        return self._r

    def drain(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self._r, 4096):
                pass

    def wait(self, timeout: float | None = None) -> None:
        """Sleep until a signal, a wake() or the timeout."""
        with contextlib.suppress(InterruptedError):
            select.select([self._r], [], [], timeout)
        self.drain()

    def restore(self) -> None:
        if self._old_wakeup is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            self._old_wakeup = None
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old.clear()

    def close(self) -> None:
        self.restore()
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> Signals:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.close()
