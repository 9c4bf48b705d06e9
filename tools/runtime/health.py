"""The probes every long-running edgefd process answers, wired one way: a freshness check for
/healthz and one call that starts the /healthz /readyz /metrics server (or says why not)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from edgefd.core.errors import EdgefdError
from edgefd.core.log import get_logger
from edgefd.core.service import Listen

if TYPE_CHECKING:  # prometheus_client is imported only by a process that serves metrics
    from .metrics import Check, HealthServer, Metrics

log = get_logger(__name__)

# /healthz fails after three missed periods, never sooner than this: a loaded node may delay
# one period, and a restart costs more than a late answer
MIN_STALE = 60.0


class Freshness:
    """Alive = the loop ran recently. `touch()` on every run; `check` is the /healthz."""

    def __init__(
        self, period: float, what: str = "scan", clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = max(3 * period, MIN_STALE)
        self.what = what
        self._clock = clock
        self.last = clock()

    def touch(self) -> None:
        self.last = self._clock()

    def check(self) -> tuple[bool, str]:
        age = self._clock() - self.last
        if age > self.limit:
            return False, f"no {self.what} for {age:.0f}s"
        return True, "ok"


def serve(
    listen: Listen, metrics: Metrics, healthz: Check | None, readyz: Check | None
) -> HealthServer | None:
    """Start the probe and metrics server on `listen` (None: no server). EdgefdError (exit 1)
    when the address cannot be bound."""
    if listen is None:
        return None
    from .metrics import HealthServer

    host, port = listen
    try:
        server = HealthServer(metrics, host, port, healthz=healthz, readyz=readyz).start()
    except OSError as e:
        raise EdgefdError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    log.info("serving /healthz /readyz /metrics on %s:%d", host, server.port)
    return server
