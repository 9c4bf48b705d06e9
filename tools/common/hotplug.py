"""Noticing device hot-plug quickly and cheaply, for the scanners' --watch and the device plugin.

NFD notices USB/PCI changes on a 60 s poll. A `Watcher` calls `on_change` within a second of a
device appearing or vanishing:

* kernel uevents through pyudev's netlink `Monitor` when the host root is `/` and netlink is
  available (`udev` source when a udev daemon runs, else raw `kernel` uevents);
* a cheap listing check of `<root>/sys/bus/<subsystem>/devices` (names and inode numbers from
  one `readdir`, no `stat`) every `poll_interval` seconds: the only source for a fixture root
  or where netlink is unavailable, and a safety net beside udev (a pod outside the host
  network namespace never sees kernel uevents), at a slower rate there;
* a full `on_change` every `rescan_interval` seconds whatever happens, as a backstop for
  changes no listing shows (a driver binding).

Bursts (a hub with four devices, a Coral re-enumerating) are debounced into one call. The
callback runs on the watcher's own thread, never concurrently with itself.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .hostroot import HostRoot

log = logging.getLogger(__name__)


def udev_available(host: HostRoot) -> bool:
    """Whether a netlink uevent monitor can describe this host: only for the real root."""
    return str(host.root) == "/"


def listing_fingerprint(host: HostRoot, subsystems: Iterable[str]) -> tuple[Any, ...]:
    """A cheap identity of the device set: names and inode numbers of the bus entries.

    Inode numbers come from `readdir` (no `stat`), and a device that re-enumerates (a Coral
    switching from boot to runtime IDs keeps its port name) gets a new sysfs entry, hence a new
    inode, so this catches it too.
    """
    fp: list[Any] = []
    for sub in subsystems:
        try:
            with os.scandir(host.path(f"/sys/bus/{sub}/devices")) as it:
                fp.append((sub, tuple(sorted((e.name, e.inode()) for e in it))))
        except OSError:
            fp.append((sub, None))
    return tuple(fp)


class Watcher:
    """Calls `on_change()` soon after devices of `subsystems` are added or removed."""

    def __init__(
        self,
        host: HostRoot,
        subsystems: Iterable[str] = ("usb", "pci"),
        rescan_interval: float = 30.0,
        on_change: Callable[[], None] | None = None,
        *,
        poll_interval: float = 0.25,
        debounce: float = 0.1,
        max_delay: float = 0.5,
        use_udev: bool | None = None,
        udev_source: str | None = None,
    ) -> None:
        self.host = host
        self.subsystems = tuple(subsystems)
        self.rescan_interval = rescan_interval
        self.on_change = on_change or (lambda: None)
        self.poll_interval = poll_interval
        self.debounce = debounce
        self.max_delay = max_delay
        self._want_udev = udev_available(host) if use_udev is None else use_udev
        # "udev" (events re-broadcast by a udev daemon) or "kernel"; None: udev when its
        # control socket exists, else raw kernel uevents
        self.udev_source = udev_source
        self._pending = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._monitor: Any = None
        self.mode = "poll"
        self.calls = 0  # how many times on_change ran (for tests and logs)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> Watcher:
        if self._want_udev:
            self._monitor = self._open_monitor()
        self.mode = "udev" if self._monitor is not None else "poll"
        # taken before start() returns: a change right after it is never part of the baseline
        self._baseline = listing_fingerprint(self.host, self.subsystems)
        if self._monitor is not None:
            self._spawn(self._udev_loop, "hotplug-udev")
        self._spawn(self._poll_loop, "hotplug-poll")
        self._spawn(self._dispatch_loop, "hotplug-dispatch")
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._pending.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout)
        self._threads.clear()

    def __enter__(self) -> Watcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def trigger(self) -> None:
        """Ask for an `on_change` call (debounced like a device event)."""
        self._pending.set()

    def _spawn(self, fn: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=fn, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    # ---------------------------------------------------------------- sources

    def _open_monitor(self) -> Any:
        try:
            import pyudev  # lazy: only a watcher on the real root needs it
        except ImportError:
            log.info("pyudev not installed; polling the bus directories")
            return None
        try:
            context = pyudev.Context()
            source = self.udev_source or (
                "udev" if Path("/run/udev/control").exists() else "kernel"
            )
            monitor = pyudev.Monitor.from_netlink(context, source=source)
            for sub in self.subsystems:
                monitor.filter_by(sub)
            monitor.start()
        except Exception as e:  # netlink refused (container, seccomp): fall back to polling
            log.info("no netlink uevent monitor (%s); polling the bus directories", e)
            return None
        log.debug("uevent monitor on netlink source %r", source)
        return monitor

    def _udev_loop(self) -> None:
        monitor = self._monitor
        while not self._stop.is_set():
            try:
                dev = monitor.poll(timeout=0.5)
            except Exception as e:
                log.warning("uevent monitor failed (%s); polling only from now on", e)
                return
            if dev is not None:
                log.debug("uevent %s %s", getattr(dev, "action", "?"), dev.sys_path)
                self._pending.set()

    def _poll_loop(self) -> None:
        # beside a udev monitor the listing check is only a safety net: check less often
        interval = self.poll_interval if self._monitor is None else max(self.poll_interval, 1.0)
        last = self._baseline
        while not self._stop.wait(interval):
            fp = listing_fingerprint(self.host, self.subsystems)
            if fp != last:
                last = fp
                self._pending.set()

    # ---------------------------------------------------------------- dispatch

    def _dispatch_loop(self) -> None:
        next_rescan = time.monotonic() + self.rescan_interval
        while not self._stop.is_set():
            fired = self._pending.wait(max(0.0, next_rescan - time.monotonic()))
            if self._stop.is_set():
                return
            if fired:
                # coalesce a burst: wait for `debounce` of quiet, at most `max_delay` in all
                first = time.monotonic()
                self._pending.clear()
                while (
                    time.monotonic() - first < self.max_delay
                    and self._pending.wait(self.debounce)
                    and not self._stop.is_set()
                ):
                    self._pending.clear()
            self._call()
            next_rescan = time.monotonic() + self.rescan_interval

    def _call(self) -> None:
        self.calls += 1
        try:
            self.on_change()
        except Exception:
            log.exception("hot-plug callback failed; will try again on the next change")
