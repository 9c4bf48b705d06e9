"""The trailing event a feature file needs when it changed twice within nfd-worker's tick.

nfd-worker (v0.19.0, source/local/local.go `runNotifier`) watches features.d with fsnotify and
rate-limits itself: the first event of any kind (create, write, remove, rename, chmod) makes it
read the directory at once, every later event until its next 1 s tick is dropped, and nothing
is sent when the tick comes. So when a second change lands inside the tick opened by an earlier
one (a Coral plugged, then re-enumerated 0.3 s later), nfd-worker keeps the first content until
its periodic re-scan (60 s by default). One more event after the tick makes it read the final
content; nothing else is rewritten.

The event is a chmod to the file's own mode (IN_ATTRIB, fsnotify's Chmod, which NFD counts):
no byte changes, the mtime stays (the sink's settle check reads it), one syscall. It is sent
only after a write that followed another change of the directory by less than a tick: edgefd's
own last event (this process), or the directory's mtime (a rename by another producer, the
staging directory created); a steady state, where nothing is written, sends none.

The decisions take a clock, so tests run them without sleeping; the one thread that waits for a
due time is started when something is due and ends when nothing is.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .log import get_logger

log = get_logger(__name__)

NFD_TICK = 1.0  # nfd-worker's rate limit: time.NewTicker(time.Second) in runNotifier
MARGIN = 0.2  # scheduling slack: the trailing event comes surely after the tick


def touch_attrib(path: Path) -> bool:
    """Send IN_ATTRIB for `path` without changing it: chmod to its own mode, through a
    descriptor opened without following a link (a symlink planted there is left alone).
    False when the file is gone or not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        os.fchmod(fd, stat.S_IMODE(st.st_mode))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class Nudge:
    """Trailing events for one process's feature files (one instance shared by its
    publishers, so each knows of the others' events).

    Call `recent(directory)` just before the rename that publishes a file, and `wrote(path,
    recent)` after it; `flush()` before the process ends waits for what is still due."""

    def __init__(
        self,
        *,
        tick: float = NFD_TICK,
        margin: float = MARGIN,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        event: Callable[[Path], bool] = touch_attrib,
        threaded: bool = True,
    ) -> None:
        self.window = tick + margin
        self.clock = clock
        self.wall = wall
        self.event = event
        self.threaded = threaded
        self.sent = 0  # trailing events sent (tests, logs)
        self._last: float | None = None  # this process's last event in a watched directory
        self._due: dict[Path, float] = {}  # file -> clock time of its trailing event
        self._firing = 0  # events taken off _due and not yet sent (another thread's)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def recent(self, directory: str | os.PathLike[str]) -> bool:
        """Whether an event in `directory` less than a tick ago may have opened a window that
        swallows the next one. A directory mtime in the future (a clock stepped back) counts
        as recent: one event too many is harmless, one too few is not."""
        with self._cond:
            if self._last is not None and self.clock() - self._last < self.window:
                return True
        try:
            mtime = os.stat(directory).st_mtime
        except OSError:
            return False
        return self.wall() - mtime < self.window

    def wrote(self, path: str | os.PathLike[str], recent: bool) -> None:
        """`path` was just renamed into its directory (an event); after a `recent` one, its
        trailing event is due a tick (and the margin) from now."""
        with self._cond:
            now = self.clock()
            self._last = now
            if recent:
                self._due[Path(path)] = now + self.window
                self._cond.notify_all()
                self._ensure_thread()

    def next_due(self) -> float | None:
        """Seconds until the next trailing event (0 when overdue), None when none is due."""
        with self._cond:
            return self._wait_locked()

    def fire_due(self) -> list[Path]:
        """Send every trailing event whose time has come; the files they went to."""
        with self._cond:
            now = self.clock()
            ready = [p for p, at in self._due.items() if at <= now]
            for p in ready:
                del self._due[p]
            self._firing += len(ready)
        fired = []
        try:
            for p in ready:
                if self.event(p):
                    fired.append(p)
                    log.debug("trailing event for %s (after a second change within NFD's tick)", p)
        finally:
            with self._cond:
                self._firing -= len(ready)
                if fired:
                    self.sent += len(fired)
                    self._last = self.clock()  # itself an event: a write right after needs one
                self._cond.notify_all()
        return fired

    def flush(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """Wait for, and send, every trailing event still due (a process about to exit)."""
        while (wait := self.next_due()) is not None:
            if wait > 0:
                sleep(wait)
            self.fire_due()
        # the background thread may have taken an event off the list and not sent it yet:
        # a process that ended now would lose it (a run on a loaded machine did)
        with self._cond:
            self._cond.wait_for(lambda: self._firing == 0, timeout=5.0)

    def _wait_locked(self) -> float | None:
        if not self._due:
            return None
        return max(0.0, min(self._due.values()) - self.clock())

    def _ensure_thread(self) -> None:
        if not self.threaded or (self._thread is not None and self._thread.is_alive()):
            return
        self._thread = threading.Thread(target=self._run, name="nfd-nudge", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                wait = self._wait_locked()
                if wait is None:
                    self._thread = None
                    return
                if wait > 0:
                    self._cond.wait(wait)
                    continue
            with contextlib.suppress(Exception):  # a trailing event is best effort
                self.fire_due()
