"""The sink's event loop: watch features.d, debounce, sync, resync, back off, stop cleanly.

Single-threaded on purpose: one `select()` waits for a directory event, the stop pipe, or the
next deadline (debounce, retry, resync, grace expiry). Nothing can run two syncs at once and
every wake-up is accounted for, which is what keeps the write count bounded under a burst.

inotify is used through ctypes (tools.common.inotify: no dependency). Where it is unavailable
(not Linux, no inotify instances left, the directory does not exist yet) the watcher polls the
directory's entries (name, inode, size, mtime) instead; the loop does not care which it got.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from tools.common.backoff import Backoff
from tools.common.cli import EdgefdError
from tools.common.inotify import (
    IN_ATTRIB,
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    Inotify,
)

from .desired import Desired
from .metrics import SinkMetrics
from .nodeapi import ApiConflict, ApiNotFound, ApiRefused, ApiUnreachable
from .sync import Syncer

log = logging.getLogger(__name__)

WATCH_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)


class DirWatcher:
    """Tells the loop "something in the directory may have changed".

    Uses inotify when it can; otherwise (or while the directory is missing) compares a
    snapshot of the entries every `poll_interval` seconds.
    """

    def __init__(self, directory: Path, poll_interval: float = 0.5, use_inotify: bool = True):
        self.directory = Path(directory)
        self.poll_interval = poll_interval
        self._ino: Inotify | None = None
        self._watching = False
        self._snapshot: object = None
        self._next_poll = 0.0
        if use_inotify:
            try:
                self._ino = Inotify()
            except OSError as e:
                log.warning("inotify unavailable (%s); polling %s", e, self.directory)
        self._try_watch()
        self._snapshot = self._take_snapshot()

    @property
    def mode(self) -> str:
        return "inotify" if self._watching else "poll"

    def _try_watch(self) -> None:
        if self._ino is None or self._watching:
            return
        try:
            self._ino.add_watch(self.directory, WATCH_MASK)
            self._watching = True
            log.info("watching %s with inotify", self.directory)
        except OSError as e:
            log.info("cannot watch %s yet (%s); polling until it can", self.directory, e.strerror)

    def _take_snapshot(self) -> object:
        try:
            with os.scandir(self.directory) as it:
                entries = []
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=True)
                        entries.append((e.name, st.st_ino, st.st_size, st.st_mtime_ns))
                    except OSError:
                        entries.append((e.name, 0, -1, 0))
            return tuple(sorted(entries))
        except OSError as e:
            return ("error", e.errno)

    def fileno(self) -> int | None:
        """The fd to select() on, or None when polling."""
        return self._ino.fileno() if self._ino is not None and self._watching else None

    def timeout(self, now: float) -> float | None:
        """How long select() may sleep before the watcher needs a poll."""
        if self.fileno() is not None:
            return None
        return max(0.0, self._next_poll - now)

    def check(self, now: float, readable: bool) -> bool:
        """Consume pending notifications; True when the directory may have changed."""
        changed = False
        if self._ino is not None and self._watching and readable:
            masks = self._read_masks(self._ino)
            changed = bool(masks)
            if any(m & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED) for m in masks):
                self._watching = False  # the directory went away: poll until it is back
                log.warning("%s was removed or moved; polling for it", self.directory)
            if any(m & IN_Q_OVERFLOW for m in masks):
                log.info("inotify queue overflowed; re-reading %s", self.directory)
        if not self._watching and now >= self._next_poll:
            self._next_poll = now + self.poll_interval
            self._try_watch()
            snap = self._take_snapshot()
            if snap != self._snapshot:
                self._snapshot = snap
                changed = True
        return changed

    @staticmethod
    def _read_masks(ino: Inotify) -> list[int]:
        """Drain pending events; return their masks (names do not matter: any change re-reads)."""
        masks: list[int] = []
        while events := ino.read():
            masks.extend(ev.mask for ev in events)
        return masks

    def close(self) -> None:
        if self._ino is not None:
            self._ino.close()
            self._ino = None


@dataclass
class Debouncer:
    """Coalesce a burst of changes: fire after `quiet` s without events, or `max_latency` s
    after the first one, whichever is first. Pure; times are monotonic seconds.

    The quiet window keeps a producer's delete+rewrite (or 1,000 quick edits) to a few syncs;
    the cap keeps a never-ending trickle from starving the node of updates.
    """

    quiet: float = 0.1
    max_latency: float = 0.5
    _first: float | None = field(default=None, repr=False)
    _last: float | None = field(default=None, repr=False)

    def event(self, now: float) -> None:
        if self._first is None:
            self._first = now
        self._last = now

    @property
    def pending(self) -> bool:
        return self._first is not None

    def deadline(self) -> float | None:
        if self._first is None or self._last is None:
            return None
        return min(self._last + self.quiet, self._first + self.max_latency)

    def due(self, now: float) -> bool:
        d = self.deadline()
        return d is not None and now >= d

    def reset(self) -> None:
        self._first = self._last = None


@dataclass
class LoopConfig:
    resync_interval: float = 300.0
    debounce: float = 0.1
    max_latency: float = 0.5
    max_backoff: float = 30.0
    poll_interval: float = 0.5
    use_inotify: bool = True


class StopFlag:
    """Set by SIGTERM/SIGINT; wakes the select() through a pipe (safe from a signal handler)."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self.is_set = False

    def set(self, *_args: object) -> None:
        self.is_set = True
        with contextlib.suppress(OSError):  # pipe full: a wake-up is already pending
            os.write(self._w, b"x")

    def fileno(self) -> int:
        return self._r

    def install(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            log.info("received %s; stopping (labels are kept)", signal.Signals(signum).name)
            self.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def close(self) -> None:
        os.close(self._r)
        os.close(self._w)


def failure_reason(exc: BaseException) -> str:
    if isinstance(exc, ApiUnreachable):
        return "unreachable"
    if isinstance(exc, ApiConflict):
        return "conflict"
    if isinstance(exc, ApiNotFound):
        return "notfound"
    if isinstance(exc, ApiRefused):
        return "refused"
    return "error"


class SinkLoop:
    """Runs syncs on changes, on a timer, and after failures, until stopped.

    `read_desired` is called at every sync (a re-read is cheap; it is what makes a missed
    notification harmless). The desired state is kept in memory across failures, so when the
    API comes back the sink converges from what it last read, then re-reads.
    """

    def __init__(
        self,
        read_desired: Callable[[], Desired],
        syncer: Syncer,
        metrics: SinkMetrics,
        watcher: DirWatcher | None,
        config: LoopConfig,
        stop: StopFlag,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read_desired = read_desired
        self.syncer = syncer
        self.metrics = metrics
        self.watcher = watcher
        self.config = config
        self.stop = stop
        self.clock = clock
        self.backoff = Backoff(initial=0.2, cap=config.max_backoff)
        self.debouncer = Debouncer(config.debounce, config.max_latency)
        self.heartbeat = clock()
        self.last_success: float | None = None
        self.last_error: str | None = None
        self.syncing_since: float | None = None

    def sync_once(self) -> bool:
        """One sync attempt; returns success. Never raises for API trouble."""
        now_wall = datetime.now(UTC)
        self.syncing_since = self.clock()
        try:
            desired = self.read_desired()
            result = self.syncer.sync(desired, now_wall)
        except (EdgefdError, OSError) as e:
            reason = failure_reason(e)
            self.metrics.syncs.inc(result="failure")
            self.metrics.failures.inc(reason=reason)
            msg = str(e)
            if msg != self.last_error:
                log.warning("sync failed (%s): %s", reason, msg)
            else:
                log.debug("sync failed again (%s): %s", reason, msg)
            self.last_error = msg
            self._expiry = None
            return False
        finally:
            self.syncing_since = None
        if self.last_error is not None:
            log.warning("sync succeeded again after failures")
        self.last_error = None
        self.metrics.syncs.inc(result="success")
        self.last_success = self.clock()
        self.metrics.last_success.set(time.time())
        self._expiry = result.next_expiry
        return True

    _expiry: datetime | None = None

    def run(self) -> None:
        """Loop until the stop flag is set. The first sync happens immediately."""
        cfg = self.config
        next_sync: float | None = self.clock()  # scheduled sync (start, retry, resync, expiry)
        while not self.stop.is_set:
            now = self.clock()
            self.heartbeat = now
            if (next_sync is not None and now >= next_sync) or self.debouncer.due(now):
                self.debouncer.reset()
                if self.sync_once():
                    self.backoff.reset()
                    next_sync = self.clock() + cfg.resync_interval
                    if self._expiry is not None:
                        until = (self._expiry - datetime.now(UTC)).total_seconds()
                        next_sync = min(next_sync, self.clock() + max(0.0, until) + 0.05)
                else:
                    next_sync = self.clock() + self.backoff.next_delay()
                continue
            # sleep until the next thing that can happen
            deadlines = [d for d in (next_sync, self.debouncer.deadline()) if d is not None]
            wt = self.watcher.timeout(now) if self.watcher else None
            if wt is not None:
                deadlines.append(now + wt)
            timeout = max(0.0, min(deadlines) - now) if deadlines else 1.0
            timeout = min(timeout, 1.0)  # keep the heartbeat fresh for /healthz
            fds = [self.stop.fileno()]
            wfd = self.watcher.fileno() if self.watcher else None
            if wfd is not None:
                fds.append(wfd)
            try:
                ready, _, _ = select.select(fds, [], [], timeout)
            except InterruptedError:
                ready = []
            now = self.clock()
            changed = bool(self.watcher) and self.watcher.check(now, wfd in ready)
            # While syncs fail, a change does not bring the retry forward (that would hammer a
            # struggling API server at the debounce rate); the retry re-reads the directory.
            if changed and self.last_error is None:
                self.debouncer.event(now)
        log.info("stopped")

    def healthy(self, wedged_after: float) -> tuple[bool, str]:
        """Alive and not stuck: the loop came round recently (a sync counts as progress
        only while it is within its request timeouts)."""
        now = self.clock()
        if self.syncing_since is not None and now - self.syncing_since > wedged_after:
            return False, f"a sync has been running for {now - self.syncing_since:.0f}s"
        if self.syncing_since is None and now - self.heartbeat > wedged_after:
            return False, f"loop has not run for {now - self.heartbeat:.0f}s"
        return True, "ok"

    def ready(self, max_age: float) -> tuple[bool, str]:
        if self.last_success is None:
            return False, f"no successful sync yet ({self.last_error or 'starting'})"
        age = self.clock() - self.last_success
        if age > max_age:
            return False, f"last successful sync {age:.0f}s ago ({self.last_error or 'idle'})"
        return True, f"ok (last sync {age:.0f}s ago)"
