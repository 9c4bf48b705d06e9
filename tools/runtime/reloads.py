"""How a tool's configuration reloads went, told where an operator looks: /readyz, /metrics
and, where the tool may post one, a Warning Event on its Node.

A failed reload keeps the configuration in use, so nothing the operator changed takes
effect; one ERROR line was all that said so, and an operator who raised `replicas` saw
nothing change and had no signal why. The state stays degraded until a reload succeeds: the
pod stays ready (it serves, with the old configuration: not-ready would take working devices
away), and /readyz names the reason beside the components' own details.

The Event: the tools that reload hold no right to Events (devplugin has no token in
device-plugin mode, device-keeper and the scanners have none; feature-sink is the identity
that may post them), so a failed reload is written as the tool's notice
(edgefd.core.notices) into its own directory (`--notice-dir`), which the pod mounts
read-only into feature-sink; the sink posts it as a Warning Event on the Node, naming the
writer by that directory. The notice is removed by the next reload that succeeds, and at
start (the configuration just loaded is the file's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from edgefd.core.log import get_logger
from edgefd.core.notices import CONFIG_RELOAD_FAILED as EVENT_REASON

log = get_logger(__name__)

FAILURES = "edgefd_config_reload_failures_total"
LAST_SUCCESS = "edgefd_config_last_reload_success_timestamp_seconds"
# 1 while the configuration in use is the file's, 0 while a failed reload is kept from it: the
# state itself, which an alert can hold for as long as it lasts (the counter only says that a
# failure happened; Prometheus' own `prometheus_config_last_reload_successful` is the model)
SUCCESSFUL = "edgefd_config_last_reload_successful"


class Notices(Protocol):
    """Where a degraded state is told beyond this process (edgefd.core.notices.NoticeBoard):
    best effort, never raising."""

    def post(self, reason: str, message: str) -> None: ...
    def clear(self) -> None: ...


class ReloadStatus:
    """The outcome of the last reload: `failed(why)`, `succeeded()`, and `ready()` for /readyz.
    `metrics` (an edgefd.runtime.metrics.Metrics, or None when the tool serves none) gets the
    three series; the configuration loaded at start counts as the first success (and clears a
    notice an earlier run of the tool left)."""

    def __init__(
        self,
        metrics: Any = None,
        notices: Notices | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._notices = notices
        self._clock = clock
        self._lock = threading.Lock()
        self._failure = ""  # why the configuration in use is not the file's; "" when it is
        self._unreadable = ""  # the failure that is the file being unreadable, if it is one
        self._failures = self._last_success = self._successful = None
        if metrics is not None:
            self._failures = metrics.counter(
                FAILURES,
                "Configuration reloads that failed (the configuration in use was kept).",
            )
            self._last_success = metrics.gauge(
                LAST_SUCCESS,
                "When the configuration in use was loaded (Unix time; start-up counts).",
            )
            self._last_success.set(clock())
            self._successful = metrics.gauge(
                SUCCESSFUL,
                "Whether the configuration in use is the file's (0 while a failed reload is "
                "kept from it).",
            )
            self._successful.set(1)
        if notices is not None:
            notices.clear()

    @property
    def failure(self) -> str:
        with self._lock:
            return self._failure

    def failed(self, why: str) -> None:
        """A reload failed: counted, kept for /readyz, and told as a notice (an Event)."""
        with self._lock:
            self._failure = why
        if self._failures is not None:
            self._failures.inc()
        if self._successful is not None:
            self._successful.set(0)
        if self._notices is not None:
            self._notices.post(
                EVENT_REASON, f"configuration reload failed: {why}; kept the one in use"
            )

    def succeeded(self) -> None:
        with self._lock:
            self._failure = self._unreadable = ""
        if self._last_success is not None:
            self._last_success.set(self._clock())
        if self._successful is not None:
            self._successful.set(1)
        if self._notices is not None:
            self._notices.clear()

    def unreadable(self, why: str) -> None:
        """From the file watch: the file cannot be read (a FIFO, a directory, too large:
        a failed reload as any other), or "" once it can again (a reload follows if its
        bytes changed; if not, the configuration in use is the file's again)."""
        if why:
            self.failed(why)
            with self._lock:
                self._unreadable = why
            return
        with self._lock:
            cleared = self._failure == self._unreadable  # not a bad configuration read since
            if cleared:
                self._failure = ""
            self._unreadable = ""
        if cleared and self._successful is not None:
            self._successful.set(1)
        if cleared and self._notices is not None:
            self._notices.clear()

    def ready(self) -> tuple[bool, str]:
        """Always ready (the configuration in use still serves); the reason when degraded."""
        why = self.failure
        if not why:
            return True, "ok"
        return True, f"configuration reload failed: {why}; the configuration in use is kept"
