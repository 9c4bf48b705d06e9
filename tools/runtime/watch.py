"""One watcher for everything edgefd waits on: features.d (the sink), the kubelet's plugin
directory (the device plugin), and the sysfs bus listings (hot-plug, for the scanners' --watch
and the device plugin).

`Watcher` calls `on_change(names)` on its own thread, never concurrently with itself, soon
after something changes in one of its directories. `names` are the entry names that changed,
or an empty set for "anything may have changed" (a queue overflow, a uevent, a periodic
rescan). How changes are seen, per directory:

* **inotify** for an ordinary directory (no dependency: ctypes, see inotify.py);
* **uevents** for a sysfs directory, where inotify reports nothing: kernel uevents through
  pyudev's netlink monitor. They reach sockets in any network namespace owned by the initial
  user namespace, so a pod without hostNetwork gets them too (not with `hostUsers: false`);
  the listing is still polled, slowly, as a safety net;
* **polling** a cheap listing every `poll_interval`: where inotify or netlink cannot
  be had, and while a directory does not exist yet (it is watched once it appears).

Bursts (a producer's delete-and-rewrite, a hub with four devices, a Coral re-enumerating) are
coalesced: `on_change` runs once `debounce` seconds pass without news, and at the latest
`max_delay` after the first. With `rescan_interval`, it also runs that often whatever happens,
as a backstop for changes no listing shows (a driver binding).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import inotify as ino
from .files import filesystem_type

log = logging.getLogger(__name__)

WATCH_MASK = (
    ino.IN_MODIFY
    | ino.IN_ATTRIB
    | ino.IN_CLOSE_WRITE
    | ino.IN_MOVED_FROM
    | ino.IN_MOVED_TO
    | ino.IN_CREATE
    | ino.IN_DELETE
    | ino.IN_DELETE_SELF
    | ino.IN_MOVE_SELF
    | ino.IN_ONLYDIR
)
_GONE = ino.IN_DELETE_SELF | ino.IN_MOVE_SELF | ino.IN_IGNORED
SAFETY_NET_POLL = 1.0  # listing check beside a working uevent monitor


@dataclass
class Debouncer:
    """Coalesce a burst: fire `quiet` s after the last event, or `max_latency` s after the
    first, whichever is first. Pure; times are monotonic seconds."""

    quiet: float = 0.1
    max_latency: float = 0.5
    _first: float | None = field(default=None, repr=False)
    _latest: float | None = field(default=None, repr=False)

    def event(self, now: float) -> None:
        if self._first is None:
            self._first = now
        self._latest = now

    @property
    def pending(self) -> bool:
        return self._first is not None

    def deadline(self) -> float | None:
        if self._first is None or self._latest is None:
            return None
        return min(self._latest + self.quiet, self._first + self.max_latency)

    def due(self, now: float) -> bool:
        d = self.deadline()
        return d is not None and now >= d

    def reset(self) -> None:
        self._first = self._latest = None


Listing = dict[str, tuple[int, ...]]  # a directory's entry names, each with a cheap identity


class _Dir:
    """One watched directory and how it is being watched."""

    def __init__(self, path: Path, sysfs: bool) -> None:
        self.path = path
        self.sysfs = sysfs
        self.wd: int | None = None  # inotify watch descriptor
        self.listing: Listing | None = None

    def take_listing(self) -> Listing | None:
        """Names with a cheap identity; None when the directory cannot be listed. On sysfs only
        the inode number from readdir (no stat): a re-enumerated device gets a new entry."""
        try:
            with os.scandir(self.path) as it:
                if self.sysfs:
                    return {e.name: (e.inode(),) for e in it}
                out: Listing = {}
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                        out[e.name] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                    except OSError:
                        out[e.name] = (0,)
                return out
        except OSError:
            return None


def _diff(old: Listing | None, new: Listing | None) -> set[str] | None:
    """Changed names; an empty name means "the directory itself appeared or vanished"."""
    if old == new:
        return None
    if old is None or new is None:
        return {""}
    return {n for n in old.keys() | new.keys() if old.get(n) != new.get(n)}


class Watcher:
    """Calls `on_change(names)` soon after something changes in `directories`."""

    def __init__(
        self,
        on_change: Callable[[frozenset[str]], None],
        directories: Sequence[str | os.PathLike[str]] = (),
        *,
        uevent_subsystems: Sequence[str] = (),
        poll_interval: float = 0.25,
        debounce: float = 0.1,
        max_delay: float = 0.5,
        rescan_interval: float | None = None,
        use_inotify: bool = True,
        use_uevents: bool | None = None,
        uevent_source: str | None = None,
        name: str = "watch",
    ) -> None:
        self.on_change = on_change
        self.poll_interval = poll_interval
        self.rescan_interval = rescan_interval
        self.use_inotify = use_inotify
        self.uevent_subsystems = tuple(uevent_subsystems)
        self.uevent_source = uevent_source  # "udev" | "kernel" | None: udev if it runs
        self.name = name
        self._dirs = [_Dir(Path(d), filesystem_type(d) == "sysfs") for d in directories]
        self._want_uevents = (
            any(d.sysfs for d in self._dirs) if use_uevents is None else use_uevents
        ) and bool(self.uevent_subsystems)
        self._debouncer = Debouncer(debounce, max_delay)
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._ino: ino.Inotify | None = None
        self._monitor: Any = None
        self._thread: threading.Thread | None = None
        self._wake_at: float | None = None  # monotonic: call on_change then, see wake_at()
        self.calls = 0  # how many times on_change ran (for tests and logs)

    # ---------------------------------------------------------------- lifecycle

    @property
    def mode(self) -> str:
        """How changes are seen: "uevent", "inotify", "poll", or a mix joined by '+'."""
        modes = []
        if self._monitor is not None:
            modes.append("uevent")
        for d in self._dirs:
            m = "inotify" if d.wd is not None else "uevent" if d.sysfs and self._monitor else "poll"
            if m not in modes:
                modes.append(m)
        return "+".join(modes) or "none"

    def start(self) -> Watcher:
        """Start watching; every change after start() returns is seen."""
        if self.use_inotify and any(not d.sysfs for d in self._dirs):
            try:
                self._ino = ino.Inotify()
            except OSError as e:
                log.info("inotify unavailable (%s); polling", e)
        if self._want_uevents:
            self._monitor = self._open_monitor()
        for d in self._dirs:
            self._arm(d)
            d.listing = d.take_listing()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        log.debug("%s: watching %s (%s)", self.name, [str(d.path) for d in self._dirs], self.mode)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
        self._thread = None
        if self._ino is not None:
            self._ino.close()
            self._ino = None
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_r = self._wake_w = -1

    def __enter__(self) -> Watcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def trigger(self) -> None:
        """Ask for an `on_change(frozenset())` call, debounced like any change."""
        with self._lock:
            self._pending.add("")
        self._wake()

    def wake_at(self, deadline: float | None) -> None:
        """Call `on_change(frozenset())` at monotonic time `deadline` too (None: cancel): for
        a state that expires by itself, like a hold. Replaces an earlier request."""
        with self._lock:
            self._wake_at = deadline
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    # ---------------------------------------------------------------- sources

    def _arm(self, d: _Dir) -> None:
        """Put an inotify watch on `d` if it can have one (exists, not sysfs)."""
        if self._ino is None or d.sysfs or d.wd is not None:
            return
        try:
            d.wd = self._ino.add_watch(d.path, WATCH_MASK)
        except OSError as e:
            log.debug("%s: cannot watch %s yet (%s); polling", self.name, d.path, e.strerror)

    def _open_monitor(self) -> Any:
        try:
            import pyudev  # lazy: only a watcher of real sysfs needs it
        except ImportError:
            log.info("pyudev not installed; polling the bus directories")
            return None
        try:
            source = self.uevent_source or (
                "udev" if Path("/run/udev/control").exists() else "kernel"
            )
            monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source=source)
            for sub in self.uevent_subsystems:
                monitor.filter_by(sub)
            monitor.start()
        except Exception as e:  # netlink refused (user namespace, seccomp): poll instead
            log.info("no netlink uevent monitor (%s); polling the bus directories", e)
            return None
        log.debug("uevent monitor on netlink source %r", source)
        return monitor

    def _polled(self) -> list[_Dir]:
        return [d for d in self._dirs if d.wd is None]

    def _poll_every(self, d: _Dir) -> float:
        if d.sysfs and self._monitor is not None:
            return max(self.poll_interval, SAFETY_NET_POLL)
        return self.poll_interval

    # ---------------------------------------------------------------- the loop

    def _note(self, names: set[str], now: float) -> None:
        if names:
            with self._lock:
                self._pending |= names
            self._debouncer.event(now)

    def _run(self) -> None:
        now = time.monotonic()
        next_poll = {id(d): now + self._poll_every(d) for d in self._dirs}
        next_rescan = now + self.rescan_interval if self.rescan_interval else None
        while not self._stop.is_set():
            now = time.monotonic()
            deadlines = [next_poll[id(d)] for d in self._polled()]
            with self._lock:
                wake_at = self._wake_at
            for t in (self._debouncer.deadline(), next_rescan, wake_at):
                if t is not None:
                    deadlines.append(t)
            timeout = max(0.0, min(deadlines) - now) if deadlines else None
            fds = [self._wake_r]
            if self._ino is not None:
                fds.append(self._ino.fileno())
            if self._monitor is not None:
                fds.append(self._monitor.fileno())
            try:
                ready, _, _ = select.select(fds, [], [], timeout)
            except (OSError, ValueError):
                if self._stop.is_set():
                    return
                raise
            if self._stop.is_set():
                return
            now = time.monotonic()
            if self._wake_r in ready:
                with contextlib.suppress(OSError):
                    os.read(self._wake_r, 4096)
                with self._lock:
                    triggered = bool(self._pending)
                if triggered:
                    self._debouncer.event(now)
            if self._ino is not None and self._ino.fileno() in ready:
                self._note(self._read_inotify(), now)
            if self._monitor is not None and self._monitor.fileno() in ready:
                self._note(self._read_uevents(), now)
            for d in self._polled():
                if now >= next_poll[id(d)]:
                    next_poll[id(d)] = now + self._poll_every(d)
                    self._arm(d)  # a directory that appeared gets its inotify watch now
                    now_listed = d.take_listing()
                    changed = _diff(d.listing, now_listed)
                    d.listing = now_listed
                    if changed:
                        self._note(changed, now)
            if wake_at is not None and now >= wake_at:
                # "anything may have changed" covers a burst pending meanwhile
                self._debouncer.reset()
                with self._lock:
                    if self._wake_at == wake_at:
                        self._wake_at = None
                    self._pending = set()
                self._call(frozenset())
            elif self._debouncer.due(now):
                self._debouncer.reset()
                with self._lock:
                    names, self._pending = self._pending, set()
                self._call(frozenset() if "" in names else frozenset(names))
                if next_rescan is not None:
                    next_rescan = time.monotonic() + (self.rescan_interval or 0)
            elif next_rescan is not None and now >= next_rescan:
                next_rescan = now + (self.rescan_interval or 0)
                self._call(frozenset())

    def _read_inotify(self) -> set[str]:
        assert self._ino is not None
        names: set[str] = set()
        by_wd = {d.wd: d for d in self._dirs if d.wd is not None}
        while events := self._ino.read():
            for ev in events:
                d = by_wd.get(ev.wd)
                if ev.mask & ino.IN_Q_OVERFLOW:
                    names.add("")
                elif d is not None and ev.mask & _GONE:
                    # removed or replaced: poll until it exists again, then watch it anew
                    log.info("%s: %s went away; polling for it", self.name, d.path)
                    d.wd = None
                    d.listing = d.take_listing()
                    names.add("")
                elif ev.name:
                    names.add(ev.name)
        return names

    def _read_uevents(self) -> set[str]:
        try:
            while (dev := self._monitor.poll(timeout=0)) is not None:
                log.debug("uevent %s %s", getattr(dev, "action", "?"), dev.sys_path)
        except Exception as e:
            log.warning("uevent monitor failed (%s); polling only from now on", e)
            self._monitor = None
        return {""}

    def _call(self, names: frozenset[str]) -> None:
        self.calls += 1
        try:
            self.on_change(names)
        except Exception:
            log.exception("%s: callback failed; will try again on the next change", self.name)
