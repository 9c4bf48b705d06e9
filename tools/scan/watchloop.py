"""`--watch`: keep the feature files in step with the buses, as a native sidecar.

One Watcher sees bus changes (uevents on real sysfs, inotify on a fixture tree, a listing poll
where neither works); each change rescans every bus once and rewrites only the files whose
bytes changed. The hold (hold.py) keeps a vanished device for a few seconds, so the loop also
wakes when a hold expires. With `--listen`, /readyz turns ready once every file has been
written completely once (the pod's startup probe: feature-sink starts only after that),
/healthz says the loop is alive, /metrics says how changes are seen and what was written.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from edgefd.cli import Listen
from edgefd.core.errors import EdgefdError
from edgefd.core.hostroot import HostRoot
from edgefd.core.log import get_logger
from edgefd.core.publish import Publisher

from .derive import Evaluation
from .hold import Hold

log = get_logger(__name__)


class WatchLoop:
    """Rewrites the producers' files whenever what they would contain changes."""

    def __init__(
        self,
        host: HostRoot,
        buses: Sequence[str],
        evaluate_all: Callable[[float], list[Evaluation]],
        emit: Callable[[Evaluation], None],
        publishers: Sequence[Publisher],
        hold: Hold | None,
        *,
        rescan_interval: float,
        poll_interval: float,
        listen: Listen = None,
    ) -> None:
        self.host = host
        self.buses = tuple(buses)
        self.evaluate_all = evaluate_all
        self.emit = emit
        self.publishers = tuple(publishers)
        self.hold = hold
        self.rescan_interval = rescan_interval
        self.poll_interval = poll_interval
        self.listen = listen
        self.mode = "starting"
        self._lock = threading.Lock()
        self._last: dict[str, bytes] = {}
        self._expiry: float | None = None
        self._last_refresh = time.monotonic()
        self._failure: BaseException | None = None
        self._metrics: Any = None

    # ---------------------------------------------------------------- one refresh

    def refresh(self, _names: frozenset[str] = frozenset()) -> None:
        """Rescan; emit each producer whose file would change. Runs on the watcher's thread
        and on the main thread (hold expiry), never both at once."""
        with self._lock:
            now = time.monotonic()
            self._last_refresh = now
            try:
                evaluations = self.evaluate_all(now)
                for ev, pub in zip(evaluations, self.publishers, strict=True):
                    data = pub.render(ev.labels)
                    if data != self._last.get(pub.producer):
                        self.emit(ev)
                        self._last[pub.producer] = data
                        self._count("writes", producer=pub.producer)
            except EdgefdError as e:  # unreadable host, unwritable output: keep the last files
                self._count("failures")
                log.error("%s (keeping the previous files; retrying on the next change)", e)
            except Exception as e:  # a bug: stop rather than run on with stale files
                self._failure = e
            self._expiry = self.hold.next_expiry() if self.hold is not None else None
            if self._metrics is not None:
                self._metrics.held.set(self.hold.held if self.hold is not None else 0)

    def describe(self) -> dict[str, Any]:
        """How the loop sees changes and what it holds (for `--output json`)."""
        return {
            "mode": self.mode,
            "hold_seconds": self.hold.seconds if self.hold is not None else 0.0,
            "held_devices": self.hold.held if self.hold is not None else 0,
        }

    # ---------------------------------------------------------------- health

    def ready(self) -> tuple[bool, str]:
        missing = [p.producer for p in self.publishers if p.producer not in self._last]
        if missing:
            return False, f"not written yet: {', '.join(missing)}"
        return True, f"ok ({', '.join(p.producer for p in self.publishers)}; {self.mode})"

    def healthy(self) -> tuple[bool, str]:
        age = time.monotonic() - self._last_refresh
        limit = max(3 * self.rescan_interval, 60.0)
        if age > limit:
            return False, f"no scan for {age:.0f}s"
        return True, "ok"

    def _count(self, what: str, **labels: str) -> None:
        if self._metrics is not None:
            counter = getattr(self._metrics, what)
            (counter.labels(**labels) if labels else counter).inc()

    # ---------------------------------------------------------------- the loop

    def run(self) -> int:
        """Write now, then on every change and hold expiry, until SIGTERM/SIGINT."""
        from edgefd.runtime.signals import Signals
        from edgefd.runtime.watch import Watcher

        signals = Signals().install()
        watcher = Watcher(
            self.refresh,
            [self.host.path(f"/sys/bus/{b}/devices") for b in self.buses],
            uevent_subsystems=self.buses,
            poll_interval=self.poll_interval,
            rescan_interval=self.rescan_interval,
            name="hotplug",
        )
        server = None
        # watch before the first scan, so a change during that scan is not lost
        watcher.start()
        self.mode = watcher.mode
        try:
            server = self._serve()
            self.refresh()
            log.info("watching %s (%s)", self.host.root, self.mode)
            while not signals.stop_requested and self._failure is None:
                now = time.monotonic()
                expiry = self._expiry
                if expiry is not None and now >= expiry:
                    self.refresh()
                    continue
                wait = 1.0 if expiry is None else min(1.0, max(0.0, expiry - now) + 0.01)
                signals.wait(wait)
        finally:
            watcher.stop()
            signals.close()
            if server is not None:
                server.stop()
        if self._failure is not None:
            raise self._failure
        return 0

    def _serve(self) -> Any:
        if self.listen is None:
            return None
        from edgefd.runtime.metrics import HealthServer, Metrics

        m = Metrics()
        m.writes = m.counter(
            "edgefd_scan_writes_total", "Feature files written, by producer", ["producer"]
        )
        m.failures = m.counter(
            "edgefd_scan_failures_total", "Scans that could not read the host (files kept)"
        )
        m.held = m.gauge(
            "edgefd_scan_held_devices", "Vanished devices still counted, within their hold"
        )
        mode = m.gauge("edgefd_scan_watch_mode", "How device changes are seen", ["mode"])
        mode.labels(mode=self.mode).set(1)
        self._metrics = m
        host, port = self.listen
        try:
            server = HealthServer(m, host, port, healthz=self.healthy, readyz=self.ready).start()
        except OSError as e:
            raise EdgefdError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
        log.info("serving /healthz /readyz /metrics on %s:%d", host, server.port)
        return server
