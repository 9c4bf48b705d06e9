"""The inventory: one device source per process that every consumer subscribes to as an equal.

It owns the hot-plug watcher (one per process), the scans (one of every bus per change, for
all subscribers), the one catalogue match and the selectors, presence (the hold and the
memory, presence.py, persisted in one state file) and the facts; after every scan it hands
each subscriber the same immutable Snapshot, with the Diff to the one before. The scanners'
labels, the device plugin, DRA, the device links, CDI specs and device-keeper are subscribers;
none of them scans, matches or remembers on its own (not even since when a device is missing,
or where it was: presence.py).

Threads: `refresh()` runs on the watcher's thread (a change, a periodic rescan, a hold that
expires, a time a subscriber asked for with `wake_at`) or on any thread that calls it (start,
a reload); a lock makes scans one at a time, so subscribers are called one snapshot at a
time, in subscription order, on the thread that scanned, and must not call `refresh()`
themselves (they may call `wake_at`). A subscriber that raises is logged and the others still
get the snapshot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from edgefd.bus.catalogue import Catalogue
from edgefd.bus.enumerate import BusReader, ScanResult
from edgefd.core.errors import EdgefdError, HostUnreadable
from edgefd.core.hostroot import HostRoot
from edgefd.core.log import DEBUG, get_logger
from edgefd.core.record import Record
from edgefd.core.service import WATCH_DEFAULTS, WatchSettings

from .device import Device
from .health_sources import HealthSources, NodesSource
from .presence import Presence
from .select import Selector, glob_devices, globs_of, identify
from .snapshot import Diff, Snapshot, diff

if TYPE_CHECKING:
    from collections.abc import Mapping

    from edgefd.runtime.metrics import Metrics

    from .metrics import InventoryMetrics
    from .temperature import TemperatureLimit, TemperatureSource

log = get_logger(__name__)

DEFAULT_HOLD = 3.0

OnSnapshot = Callable[[Snapshot], None]
OnError = Callable[[EdgefdError], None]


class Settings(Protocol):
    """What of a configuration the inventory takes: devplugin's resources configuration is one
    (the inventory knows no tool's type)."""

    @property
    def selectors(self) -> Sequence[Selector]: ...
    @property
    def memory(self) -> float | None: ...
    @property
    def temperature(self) -> Mapping[str, TemperatureLimit]: ...


class _Subscriber(Record):
    name: str
    on_snapshot: OnSnapshot
    on_error: OnError | None


class Inventory:
    def __init__(
        self,
        host: HostRoot,
        readers: Sequence[BusReader[Any]],
        *,
        catalogue: Catalogue | None = None,
        selectors: Sequence[Selector] = (),
        hold: float = DEFAULT_HOLD,
        forget_after: float | None = None,
        state_file: str | Path | None = None,
        settings: WatchSettings = WATCH_DEFAULTS,
        metrics: Metrics | None = None,
        use_uevents: bool | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        temperature: Mapping[str, TemperatureLimit] | None = None,
    ) -> None:
        """`forget_after`: seconds an absent device is remembered (None: for ever).
        `state_file`: where remembered devices are kept across restarts (None: nowhere).
        `temperature`: judge the health of devices that say their temperature, with these
        resources' settings (None: not at all; the labels do not depend on health)."""
        self.host = host
        self.readers = tuple(readers)
        self.catalogue = catalogue
        self.selectors = tuple(selectors)
        self.settings = settings
        self.use_uevents = use_uevents
        self.state_file = Path(state_file) if state_file is not None else None
        self.metrics: InventoryMetrics | None = None
        if metrics is not None:  # prometheus_client only in a process that serves metrics
            from .metrics import InventoryMetrics

            self.metrics = InventoryMetrics(metrics)
        self.freshness: Any = None  # the /healthz of a watching inventory: start()
        self.last_error = ""
        self.scans = 0  # scans run, failed ones included
        self._clock, self._mono = clock, monotonic
        self._lock = threading.RLock()  # a subscriber may ask for a wake-up (wake_at)
        self._subscribers: list[_Subscriber] = []
        self._presence = Presence(hold, forget_after)
        self._temperature: TemperatureSource | None = None
        sources: list[Any] = [NodesSource(host.exists)]
        if temperature is not None:
            from .temperature import TemperatureSource

            self._temperature = TemperatureSource(host, catalogue, temperature)
            sources.append(self._temperature)
        self._health = HealthSources(sources)
        self._snapshot: Snapshot | None = None
        self._watcher: Any = None
        self._saved: Any = None
        self._save_error = ""
        self._wakes: dict[str, float] = {}  # subscriber -> wall clock it wants a scan at
        if self.state_file is not None:
            self._restore()

    # -- subscribers

    def subscribe(
        self, on_snapshot: OnSnapshot, *, on_error: OnError | None = None, name: str = ""
    ) -> Callable[[], None]:
        """Call `on_snapshot` with every snapshot from now on, starting with the current one
        if there is one (so none is missed or seen twice); `on_error` when a scan fails (the
        host cannot be read: the last snapshot still stands). Returns the unsubscribe."""
        name = name or getattr(on_snapshot, "__qualname__", "subscriber")
        sub = _Subscriber(name, on_snapshot, on_error)
        with self._lock:
            self._subscribers.append(sub)
            if self._snapshot is not None:
                self._call(sub, self._snapshot)

        def unsubscribe() -> None:
            with self._lock:
                if sub in self._subscribers:
                    self._subscribers.remove(sub)

        return unsubscribe

    def _call(self, sub: _Subscriber, snap: Snapshot) -> None:
        try:
            sub.on_snapshot(snap)
        except Exception:  # one consumer's bug must not stop the others or the scanning
            log.exception("inventory subscriber %s failed on snapshot %d", sub.name, snap.seq)

    # -- configuration

    def reconfigure(self, config: Settings) -> None:
        """A reloaded configuration (a component of the runner: edgefd.runtime.runner): its
        selectors, memory and temperature settings, then a scan with them, so that every
        subscriber's next snapshot is the new configuration's."""
        with self._lock:
            self.selectors = tuple(config.selectors)
            self._presence.forget_after = config.memory
            if self._temperature is not None:
                self._temperature.configure(config.temperature)
        self.refresh()

    @property
    def hold(self) -> float:
        return self._presence.hold

    # -- scanning

    @property
    def snapshot(self) -> Snapshot | None:
        """The latest snapshot (None before the first successful scan)."""
        return self._snapshot

    def refresh(self, _names: frozenset[str] = frozenset()) -> Snapshot | None:
        """Scan every bus now and hand the snapshot to every subscriber. A host that cannot
        be read gives no snapshot (None): "could not look" must never become "everything was
        unplugged"; subscribers' `on_error` hear about it."""
        return self._scan(strict=False)

    def scan(self) -> Snapshot:
        """`refresh` for one-shot use: HostUnreadable propagates to the caller."""
        snap = self._scan(strict=True)
        assert snap is not None
        return snap

    def _scan(self, strict: bool) -> Snapshot | None:
        with self._lock:
            if self.freshness is not None:
                self.freshness.touch()
            self.scans += 1
            if self.metrics:
                self.metrics.scans.inc()
            try:
                scans = {r.bus: r.scan(self.host) for r in self.readers}
            except HostUnreadable as e:
                if strict:
                    raise
                self._failed(e)
                return None
            if self.last_error:
                log.warning("the host can be read again")
                self.last_error = ""
            snap = self._update(scans)
            self._wakes = {who: at for who, at in self._wakes.items() if at > snap.time}
            self._save()
            for sub in list(self._subscribers):
                self._call(sub, snap)
            self._arm_wake()
            return snap

    def _failed(self, e: HostUnreadable) -> None:
        if self.metrics:
            self.metrics.scan_failures.inc()
        if str(e) != self.last_error:
            log.error("%s; keeping the last snapshot until the host can be read again", e)
        self.last_error = str(e)
        for sub in list(self._subscribers):
            if sub.on_error is not None:
                try:
                    sub.on_error(e)
                except Exception:
                    log.exception("inventory subscriber %s failed on a scan error", sub.name)

    def _update(self, scans: dict[str, ScanResult[Any]]) -> Snapshot:
        wall, mono = self._clock(), self._mono()

        seen: list[tuple[Any, Device | None]] = []
        for res in scans.values():
            for rec in res.devices:
                dev = identify(rec, self.catalogue, self.selectors, wall)
                seen.append((rec, dev if dev is None else self._health.judge(dev)))
        self._health.settle(frozenset(d.name for _, d in seen if d is not None))
        globs = globs_of(self.selectors)
        if globs:  # bare /dev nodes: a resource made of globs
            from edgefd.bus.devnodes import glob_nodes

            nodes = glob_nodes(self.host, globs)
            seen.extend((None, d) for d in glob_devices(self.selectors, nodes, wall))
        self._presence.update(seen, wall, mono)
        devices = tuple(self._presence.devices(mono))
        prev = self._snapshot
        before = {d.name: d for d in prev.devices} if prev is not None else {}
        snap = Snapshot(
            seq=(prev.seq if prev is not None else 0) + 1,
            time=wall,
            devices=devices,
            scans=scans,
            held=self._presence.held(mono),
            held_names=self._presence.held_names(mono),
            diff=diff(before, {d.name: d for d in devices}) if devices or before else Diff(),
            warnings=tuple(w for r in scans.values() for w in r.warnings),
        )
        if log.isEnabledFor(DEBUG):
            for w in snap.warnings:
                log.debug("scan: %s", w)
            for change in snap.diff.changes:
                log.debug("device %s", change.describe())
        self._snapshot = snap
        if self.metrics:
            self.metrics.held.set(snap.held_count)
            present = sum(1 for d in devices if d.present)
            self.metrics.devices.labels(presence="present").set(present)
            self.metrics.devices.labels(presence="absent").set(len(devices) - present)
            if self._temperature is not None:
                from edgefd.runtime.metrics import replace_series

                readings = self._temperature.readings.items()
                replace_series(self.metrics.temperature, (({"device": n}, t) for n, t in readings))
                limits = self._temperature.limits.items()
                replace_series(
                    self.metrics.temperature_limit, (({"device": n}, t) for n, t in limits)
                )
        return snap

    # -- the state file

    def _restore(self) -> None:
        from . import state

        assert self.state_file is not None
        now = self._clock()
        self._presence.restore(state.load(self.state_file, now), now, self._mono())

    def _save(self, force: bool = False) -> None:
        """Write the remembered devices when who, where or whether present changed (not on
        every scan: last-seen times move all the time), and at stop."""
        if self.state_file is None or self._snapshot is None:
            return
        from . import state

        devices = self._snapshot.devices
        body = [(state.device_to_json(d) | {"last_seen": 0}, d.present) for d in devices]
        if body == self._saved and not force:
            return
        try:
            state.save(self.state_file, devices)
        except OSError as e:
            if str(e) != self._save_error:
                log.warning("cannot write %s (%s): devices are not remembered", self.state_file, e)
            self._save_error = str(e)
            return
        self._saved, self._save_error = body, ""

    # -- scans at a time: a state that changes by itself

    def wake_at(self, who: str, at: float | None) -> None:
        """Scan again at wall-clock time `at` (None: no longer), for `who` (one request each,
        replacing its last): a subscriber whose view of a snapshot changes with time alone,
        like an eviction deadline, gets a snapshot then. Beside the hold's own expiry, on the
        one watcher: no timer of its own anywhere."""
        with self._lock:
            if at is None:
                self._wakes.pop(who, None)
            else:
                self._wakes[who] = at
            self._arm_wake()

    def _arm_wake(self) -> None:
        """Under the lock: the watcher wakes at the earliest of the hold's expiry and the
        subscribers' requests (monotonic)."""
        if self._watcher is None:
            return
        mono = self._mono()
        times = [self._presence.next_expiry(mono)]
        if self._wakes:
            now = self._clock()
            times += [mono + max(0.0, at - now) for at in self._wakes.values()]
        due = [t for t in times if t is not None]
        self._watcher.wake_at(min(due) if due else None)

    # -- hot-plug

    @property
    def mode(self) -> str:
        """How changes are seen: "uevent", "inotify", "poll" (a mix joined by '+')."""
        return self._watcher.mode if self._watcher is not None else "none"

    def start(self) -> Inventory:
        """Watch every bus (before the first scan, so a change during it is not lost), then
        scan once."""
        from edgefd.runtime.health import Freshness
        from edgefd.runtime.watch import Watcher

        self.freshness = Freshness(self.settings.rescan_interval)
        buses = [r.bus for r in self.readers]
        s = self.settings
        self._watcher = Watcher(
            self.refresh,
            [self.host.path(f"/sys/bus/{b}/devices") for b in buses],
            uevent_subsystems=buses,
            poll_interval=s.poll_interval,
            debounce=s.debounce,
            max_delay=s.max_delay,
            rescan_interval=s.rescan_interval,
            use_uevents=self.use_uevents,
            name="hotplug",
        ).start()
        if self.metrics:
            self.metrics.m.watch_mode("inventory", self.mode)
        log.info("hot-plug: %s", self.mode)
        self.refresh()
        return self

    def alive(self) -> tuple[bool, str]:
        """/healthz: the watcher's rescans keep coming (see runtime.health.Freshness)."""
        return self.freshness.check() if self.freshness is not None else (True, "starting")

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
        with self._lock:
            self._save(force=True)

    def describe(self) -> dict[str, Any]:
        """How changes are seen and what is held (for `--output json`)."""
        snap = self._snapshot
        return {
            "mode": self.mode,
            "hold_seconds": self.hold,
            "held_devices": snap.held_count if snap is not None else 0,
        }
