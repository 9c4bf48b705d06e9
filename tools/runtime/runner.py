"""How every long-running edgefd tool runs: its components, and one `run` around them that owns
what they would otherwise each hand-write (signals, the probes and metrics server, reloads,
the order things start and stop in, and how a failure anywhere ends the process).

A component is anything with `start()` (returns once it serves: its threads run) and `stop()`
(returns once they are done); what else it is, it says by what it implements, each a protocol
below: `Readiness` (`ready()`, for /readyz) and `Liveness` (`alive()`, for /healthz), each
giving `(ok, why)`, and `Reconfigurable` (`reconfigure(config)`). A bus watcher, an inventory,
a list-watch, a sync loop, a device-plugin front-end: each is one, and knows nothing of
signals.

`run` builds the components inside its signal handling (building can block: a FIFO given as a
file, an API server that does not answer; a stop signal then ends it at once), starts them in
order, serves the probes, and waits. SIGTERM/SIGINT stop; SIGHUP, or a change of the watched
configuration file (a ConfigMap update), reloads: the tool's loader reads the new
configuration (an error keeps the one in use, said once and shown until a reload succeeds,
in /readyz and the metrics: reloads.py) and every component that has `reconfigure` gets it,
in reverse order (consumers first, so that the source they follow,
reconfigured last, hands them its next snapshot under the new configuration). Components stop
in reverse order too. A component's own thread that dies, or whose work is done (an events
file read to its end), says so through the `Lifeline` it was built with; the process then
stops as on a signal and exits with that failure's code (or 0). A failure that is not an
expected one (an EdgefdError, with its own code) is a component that died of a bug: the run
ends with ComponentDied, exit 70, whatever the exception was. Raised as it came, a thread's
OSError would read as a failed operation (1), a BrokenPipeError or a SystemExit(0) as success,
a KeyboardInterrupt as an interrupt: a crash loop that reports 0 is not seen for what it is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from edgefd.core.errors import EXIT_INTERNAL, EdgefdError
from edgefd.core.log import get_logger
from edgefd.core.service import Listen

if TYPE_CHECKING:  # prometheus_client only in a process that serves metrics
    from .metrics import Check
    from .reloads import Notices, ReloadStatus

log = get_logger(__name__)


class Component(Protocol):
    def start(self) -> object: ...
    def stop(self) -> object: ...


@runtime_checkable
class Readiness(Protocol):
    """A component that says whether it serves (/readyz): `(ok, why)`."""

    def ready(self) -> tuple[bool, str]: ...


@runtime_checkable
class Liveness(Protocol):
    """A component that says whether it is stuck (/healthz): `(ok, why)`."""

    def alive(self) -> tuple[bool, str]: ...


@runtime_checkable
class Reconfigurable(Protocol):
    """A component that takes a reloaded configuration (the tool's own type)."""

    def reconfigure(self, config: Any) -> None: ...


class ComponentDied(EdgefdError):
    """A component's thread died of something unexpected (a bug): the run ends with 70."""

    exit_code = EXIT_INTERNAL


class Lifeline:
    """What a component's threads use to end the process: `fail(exc)` (a bug, or a failure
    nothing can retry) or `done()` (its work is over). Also, for a loop that must notice a
    stop request on its own, `stopping` and `wait(timeout)`."""

    def __init__(self, wake: Callable[[], None] = lambda: None) -> None:
        self._wake = wake
        self._stop = threading.Event()
        self.failure: BaseException | None = None
        self.finished = False

    def fail(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        self._end()

    def done(self) -> None:
        self.finished = True
        self._end()

    def _end(self) -> None:
        self._stop.set()
        self._wake()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wait(self, timeout: float) -> None:
        self._stop.wait(timeout)


class Reload:
    """How a tool's configuration is reloaded: `load()` reads it anew (raising EdgefdError on
    a bad one), `path` is the file to watch for changes (None: SIGHUP only). With `current`
    (the configuration loaded at start) and `changes(old, new)` (lines such as
    `edgefd.io/coral-usb: replicas 1 → 2`), a reload says what it changed; with `notices`
    (edgefd.core.notices.NoticeBoard), a failed one is also told as the tool's notice, which
    feature-sink posts as a Warning Event on the Node (reloads.ReloadStatus)."""

    def __init__(
        self,
        load: Callable[[], Any],
        path: str | Path | None = None,
        *,
        current: Any = None,
        changes: Callable[[Any, Any], list[str]] | None = None,
        notices: Notices | None = None,
    ) -> None:
        self.load = load
        self.path = Path(path) if path is not None else None
        self.current = current
        self.changes = changes
        self.notices = notices


def readiness(components: Sequence[object]) -> list[Check]:
    return [c.ready for c in components if isinstance(c, Readiness)]


def liveness(components: Sequence[object]) -> list[Check]:
    return [c.alive for c in components if isinstance(c, Liveness)]


def combined(checks: Sequence[Check]) -> Check:
    """One probe answer from several: the first that fails, else every detail joined."""

    def check() -> tuple[bool, str]:
        details = []
        for c in checks:
            ok, why = c()
            if not ok:
                return False, why
            if why and why != "ok":
                details.append(why)
        return True, "; ".join(details) or "ok"

    return check


def run(
    build: Callable[[Lifeline], Sequence[Component]],
    *,
    startup_line: str,
    listen: Listen = None,
    metrics: Any = None,
    reload: Reload | None = None,
) -> int:
    """Build the components, start them, serve the probes on `listen` (with `metrics`, an
    edgefd.runtime.metrics.Metrics), and run until a stop signal or a component's lifeline
    ends it; then stop everything. The one place a tool's process takes the signals."""
    from edgefd.core import log as logs

    from .reloads import ReloadStatus
    from .signals import Signals, StopDuringStartup

    logs.serving()  # a service's log is its output: every state change at info
    log.info(
        "%s", startup_line, extra={"event": "start"}
    )  # before anything that logs (an API client, a first scan)
    with Signals(reload=reload is not None) as signals:
        lifeline = Lifeline(signals.wake)
        started: list[Component] = []
        config_watch = None
        server = None
        status = ReloadStatus(metrics, reload.notices) if reload is not None else None
        try:
            with signals.starting():
                if reload is not None and reload.path is not None:
                    # first: a change while the components start is a reload once they run
                    from .configfile import ConfigFileWatch

                    assert status is not None
                    config_watch = ConfigFileWatch(
                        reload.path, signals.request_reload, on_unreadable=status.unreadable
                    ).start()
                components = build(lifeline)
                start_in_order(components, started)
                checked = [*components, status] if status is not None else components
                server = serve_probes(listen, metrics, checked)
            while not (signals.stop_requested or lifeline.stopping):
                signals.wait()
                if reload is not None and signals.take_reload():
                    assert status is not None
                    _reload(reload, components, status)
            if lifeline.failure is None:
                log.info("stopping", extra={"event": "stop"})
        except StopDuringStartup as e:
            log.info("%s during start-up: stopping", e)
        finally:
            if config_watch is not None:
                config_watch.stop()
            stop_in_reverse(started)
            if server is not None:
                server.stop()
    if lifeline.failure is not None:
        raise died(lifeline.failure)
    return 0


def start_in_order(components: Sequence[Component], started: list[Component]) -> None:
    """Start each component in turn, each noted in `started` before its start (one that is
    interrupted while it starts is stopped too)."""
    for c in components:
        started.append(c)
        c.start()


def stop_in_reverse(started: Sequence[Component]) -> None:
    """Stop what was started, last first; a component that fails to stop is logged and the
    others still stop."""
    for c in reversed(started):
        try:
            c.stop()
        except Exception:
            log.exception("stopping %s failed", type(c).__name__)


def died(failure: BaseException) -> BaseException:
    """What a component's failure ends the run with: an expected failure as it is (its exit
    code is the tool's), anything else as ComponentDied (exit 70), caused by it."""
    if isinstance(failure, EdgefdError):
        return failure
    what = f"{type(failure).__name__}: {failure}" if str(failure) else type(failure).__name__
    out = ComponentDied(f"a component died: {what}")
    out.__cause__ = failure
    return out


def serve_probes(listen: Listen, metrics: Any, components: Sequence[object]) -> Any:
    """The /healthz /readyz /metrics server of `components` (None when not listening)."""
    if listen is None or metrics is None:
        return None
    from .health import serve

    return serve(listen, metrics, combined(liveness(components)), combined(readiness(components)))


def _reload(reload: Reload, components: Sequence[object], status: ReloadStatus) -> None:
    where = f" from {reload.path}" if reload.path is not None else ""
    log.info("reloading the configuration%s", where)
    try:
        config = reload.load()
    except EdgefdError as e:
        log.error("%s; keeping the configuration in use", e)
        status.failed(str(e))
        return
    for c in reversed(components):
        if isinstance(c, Reconfigurable):
            c.reconfigure(config)
    status.succeeded()
    if reload.changes is not None and reload.current is not None:  # else the components say it
        changes = reload.changes(reload.current, config)
        log.info("configuration reloaded: %s", "; ".join(changes) or "nothing changed")
    reload.current = config
