"""The sink's loop: sync on a change, on a timer and after failures, back off, stop cleanly.

One thread decides: it sleeps until the next deadline (retry, resync, grace expiry) or until it
is woken (a signal, or the features.d watcher on its own thread saying something changed, the
burst already coalesced). Nothing can run two syncs at once and every wake-up is accounted for,
which is what keeps the write count bounded under a burst.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from edgefd.core.backoff import Backoff
from edgefd.core.errors import EdgefdError
from edgefd.runtime.signals import Signals

from .desired import Desired, FeaturesDirGone
from .metrics import SinkMetrics
from .nodeapi import ApiConflict, ApiNotFound, ApiRefused, ApiUnreachable
from .sync import OwnershipUntrusted, Syncer

log = logging.getLogger(__name__)


@dataclass
class LoopConfig:
    resync_interval: float = 300.0
    max_backoff: float = 30.0


def failure_reason(exc: BaseException) -> str:
    if isinstance(exc, ApiUnreachable):
        return "unreachable"
    if isinstance(exc, ApiConflict):
        return "conflict"
    if isinstance(exc, ApiNotFound):
        return "notfound"
    if isinstance(exc, ApiRefused):
        return "refused"
    if isinstance(exc, OwnershipUntrusted):
        return "untrusted"
    if isinstance(exc, FeaturesDirGone):
        return "features_dir"
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
        config: LoopConfig,
        signals: Signals,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read_desired = read_desired
        self.syncer = syncer
        self.metrics = metrics
        self.config = config
        self.signals = signals
        self.clock = clock
        self.backoff = Backoff(initial=0.2, cap=config.max_backoff)
        self._changed = False
        self.heartbeat = clock()
        self.last_success: float | None = None
        self.last_error: str | None = None
        self.syncing_since: float | None = None
        # the failure being lived through (its reason), since when, and how many attempts
        self.failing: str | None = None
        self.failing_since: float | None = None
        self.failed_attempts = 0

    def sync_once(self) -> bool:
        """One sync attempt; returns success. Never raises for API trouble."""
        now_wall = datetime.now(UTC)
        self.syncing_since = self.clock()
        try:
            desired = self.read_desired()
            result = self.syncer.sync(desired, now_wall)
        except (EdgefdError, OSError) as e:
            reason = failure_reason(e)
            self.metrics.syncs.labels(result="failure").inc()
            self.metrics.failures.labels(reason=reason).inc()
            # once per kind of failure: an unreachable API's message differs at every attempt
            # (connection objects, addresses), and a steady outage must not fill the log
            if reason != self.failing:
                log.warning("sync failed (%s): %s; retrying with backoff", reason, e)
            else:
                log.debug("sync failed again (%s): %s", reason, e)
            if self.failing is None:
                self.failing_since = self.clock()
            self.failing, self.failed_attempts = reason, self.failed_attempts + 1
            self.last_error = str(e)
            self._expiry = None
            return False
        finally:
            self.syncing_since = None
        if self.failing is not None:
            log.info(
                "sync succeeded again after %d failed attempt(s) over %.0fs (%s)",
                self.failed_attempts,
                self.clock() - (self.failing_since or self.clock()),
                self.failing,
            )
        self.failing, self.failing_since, self.failed_attempts = None, None, 0
        self.last_error = None
        self.metrics.syncs.labels(result="success").inc()
        self.last_success = self.clock()
        self.metrics.last_success.set(time.time())
        self._expiry = result.next_expiry
        return True

    _expiry: datetime | None = None

    def changed(self, _names: frozenset[str] = frozenset()) -> None:
        """Something in features.d changed (called on the watcher's thread, debounced)."""
        self._changed = True
        self.signals.wake()

    def run(self) -> None:
        """Loop until a stop is requested. The first sync happens immediately."""
        cfg = self.config
        next_sync = self.clock()  # scheduled sync (start, retry, resync, expiry)
        while not self.signals.stop_requested:
            now = self.clock()
            self.heartbeat = now
            if self._changed:
                self._changed = False
                # While syncs fail, a change does not bring the retry forward (that would
                # hammer a struggling API server); the retry re-reads the directory anyway.
                if self.last_error is None:
                    next_sync = now
            if now >= next_sync:
                if self.sync_once():
                    self.backoff.reset()
                    next_sync = self.clock() + cfg.resync_interval
                    if self._expiry is not None:
                        until = (self._expiry - datetime.now(UTC)).total_seconds()
                        next_sync = min(next_sync, self.clock() + max(0.0, until) + 0.05)
                else:
                    next_sync = self.clock() + self.backoff.next_delay()
                continue
            # at most 1 s, to keep the heartbeat fresh for /healthz
            self.signals.wait(min(1.0, max(0.0, next_sync - now)))
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
