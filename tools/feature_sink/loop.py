"""The sink's loop: sync on a change, when its object drifts, on a timer and after failures;
back off; stop cleanly. A component of the runner (edgefd.runtime.runner): its own thread,
its probes, no signals of its own.

One thread decides: it sleeps until the next deadline (retry, safety resync, grace expiry) or
until it is woken (schedule.Triggers: a stop; the features.d watcher saying something
changed, the burst already coalesced; the object's watch saying someone else changed its
labels). What it does next is schedule.next_step's decision, a pure function. Nothing can run
two syncs at once and every wake-up is accounted for, which is what keeps the write count
bounded under a burst.

Two things keep it from hammering the API server whatever happens around it: failed syncs
retry with jittered backoff (edgefd.kube.retry, stretched to the server's Retry-After), and
repairs back off when someone keeps changing the same object back (two writers fighting over
a label would otherwise trade writes as fast as the API server takes them). Under both, the
client's rate limit (edgefd.kube.ratelimit) is the hard bound.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from edgefd.core.backoff import Backoff
from edgefd.core.errors import EdgefdError
from edgefd.kube.errors import failure_kind
from edgefd.kube.retry import Retry

from .desired import Desired, FeaturesDirGone
from .metrics import SinkMetrics
from .nodeapi import ApiUnreachable
from .schedule import State, Triggers, next_step
from .sync import OwnershipUntrusted, Syncer

log = logging.getLogger(__name__)

# An owned label changed again less than FIGHT_WINDOW after the sink repaired it is a fight
# (a person runs kubectl seconds apart at best; a controller undoes a write in milliseconds).
# From the FIGHT_REPAIRS-th repair of a fight on, each waits a growing backoff (up to
# max_backoff) before undoing the other writer again.
FIGHT_WINDOW = 2.0
FIGHT_REPAIRS = 3
# A drift sync that found nothing to repair (another writer changed a label in the sink's
# namespaces that it neither owns nor wants) holds the next drift sync this long: a burst of
# such changes costs one sync per window, not one per change. A repair lifts the hold.
DRIFT_COALESCE = 0.5


@dataclass
class LoopConfig:
    resync_interval: float = 3600.0
    max_backoff: float = 30.0
    wedged_after: float = 60.0  # /healthz: a sync running longer, or a loop this long idle
    ready_max_age: float = 7260.0  # /readyz: the last successful sync no older than this


def failure_reason(exc: BaseException) -> str:
    kind = failure_kind(exc)
    if kind != "error":
        return kind
    if isinstance(exc, OwnershipUntrusted):
        return "untrusted"
    if isinstance(exc, FeaturesDirGone):
        return "features_dir"
    return "error"


class SinkLoop:
    """Runs syncs on changes, on drift, on a timer, and after failures, until stopped.

    `read_desired` is called at every sync (a re-read is cheap; it is what makes a missed
    notification harmless). The desired state is kept in memory across failures, so when the
    API comes back the sink converges from what it last read, then re-reads. `triggers` is
    what the watchers wake it with (made first and given to them too: schedule.py); `retry`
    owns the failure streak and its backoff.
    """

    def __init__(
        self,
        read_desired: Callable[[], Desired],
        syncer: Syncer,
        metrics: SinkMetrics,
        config: LoopConfig,
        triggers: Triggers | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_crash: Callable[[BaseException], None] | None = None,
    ) -> None:
        """`on_crash`: where a bug in the loop goes (the runner's lifeline: the process ends
        with it); None lets it propagate out of `run`."""
        self.read_desired = read_desired
        self.syncer = syncer
        self.metrics = metrics
        self.config = config
        self.clock = clock
        self.on_crash = on_crash
        self.triggers = triggers if triggers is not None else Triggers(clock)
        self._thread: threading.Thread | None = None
        self.retry = Retry(
            "sync",
            initial=0.2,
            cap=config.max_backoff,
            on_retry=lambda reason: metrics.retries.labels(loop="sync", reason=reason).inc(),
            speak=False,  # the loop says it itself, with how long the failure lasted
            clock=clock,
        )
        self.heartbeat = clock()
        self.last_success: float | None = None
        self.syncing_since: float | None = None
        self._expiry: datetime | None = None
        self._retry_in = 0.0
        # the repair backoff (see FIGHT_WINDOW)
        self._fight = Backoff(initial=0.5, cap=config.max_backoff)
        self._repairs = 0
        self._last_repair: float | None = None
        self._repairing_since = 0.0  # when the drift the running sync repairs was seen
        self._repair_at = 0.0
        self._quiet_until = 0.0  # see DRIFT_COALESCE

    def sync_once(self, trigger: str = "start", fresh: bool = True) -> bool:
        """One sync attempt; returns success. Never raises for API trouble."""
        self.metrics.triggers.labels(trigger=trigger).inc()
        now_wall = datetime.now(UTC)
        self.syncing_since = self.clock()
        try:
            desired = self.read_desired()
            result = self.syncer.sync(desired, now_wall, fresh=fresh)
        except (EdgefdError, OSError) as e:
            reason = failure_reason(e)
            self.metrics.syncs.labels(result="failure").inc()
            self.metrics.failures.labels(reason=reason).inc()
            # once per kind of failure: an unreachable API's message differs at every attempt
            # (connection objects, addresses), and a steady outage must not fill the log
            if reason != self.retry.last_reason:
                log.warning("sync failed (%s): %s; retrying with backoff", reason, e)
            else:
                log.debug("sync failed again (%s): %s", reason, e)
            self._retry_in = self.retry.failed(e, reason)
            if isinstance(e, ApiUnreachable) and e.retry_after is None:
                # no answer at all: what the watch last said may be stale (its connection may
                # not have noticed yet), so the retries read the object until it speaks again
                self.syncer.lost()
            self._expiry = None
            return False
        finally:
            self.syncing_since = None
        if self.retry.failing:
            log.info(
                "sync succeeded again after %d failed attempt(s) over %.0fs (%s)",
                self.retry.failures,
                self.retry.lasted(),
                self.retry.last_reason,
            )
        self.retry.succeeded()
        self.metrics.syncs.labels(result="success").inc()
        self.last_success = self.clock()
        self.metrics.last_success.set(time.time())
        self._expiry = result.next_expiry
        if trigger == "drift" and result.wrote:
            self._repaired(self._repairing_since)
        if trigger == "drift":
            self._quiet_until = 0.0 if result.wrote else self.clock() + DRIFT_COALESCE
        return True

    def _repaired(self, seen: float) -> None:
        """A write undid someone else's change, seen at `seen`: count it, and back off a
        fight (the change came soon after the previous repair)."""
        self.metrics.repairs.inc()
        last = self._last_repair
        fight = last is not None and seen - last < FIGHT_WINDOW
        self._repairs = self._repairs + 1 if fight else 1
        now = self._last_repair = self.clock()
        if self._repairs < FIGHT_REPAIRS:
            self._fight.reset()
            return
        delay = self._fight.next_delay()
        self._repair_at = now + delay
        self.metrics.repair_holds.inc()
        level = logging.WARNING if self._repairs == FIGHT_REPAIRS else logging.DEBUG
        log.log(
            level,
            "%s: owned labels were changed back %d times in a row, each within %.0f s of the "
            "repair (another writer fighting over them?); repairs now wait %.1f s, backing off "
            "up to %.0f s",
            self.syncer.what,
            self._repairs,
            FIGHT_WINDOW,
            delay,
            self.config.max_backoff,
        )

    def _drift_due(self) -> float:
        """When a pending drift may be synced: after a fight's hold and a quiet window."""
        return max(self._repair_at, self._quiet_until)

    def changed(self, _names: frozenset[str] = frozenset()) -> None:
        """Something in features.d changed (the watcher's `on_change`)."""
        self.triggers.features_changed()

    def drifted(self) -> None:
        """The object changed under the sink."""
        self.triggers.drifted()

    # -- as a component of the runner

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="sink-loop", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            self.run()
        except BaseException as e:
            if self.on_crash is None:
                raise
            log.critical("the sync loop died: %s", e, exc_info=True)
            self.on_crash(e)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the sync under way (its requests have timeouts); labels are kept."""
        self.triggers.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def run(self) -> None:
        """Loop until `stop()`. The first sync happens immediately."""
        cfg, t = self.config, self.triggers
        next_sync, why = self.clock(), "start"  # the scheduled sync
        while not t.stopping:
            now = self.clock()
            self.heartbeat = now
            state = State(next_sync, why, self.retry.failing, t.changed, t.drift, self._drift_due())
            step = next_step(state, now)
            if step.run is None:
                # at most 1 s, to keep the heartbeat fresh for /healthz
                t.wait(min(1.0, max(0.0, step.wake_at - now)))
                continue
            seen = t.take(step.took)
            if step.run == "drift":
                self._repairing_since = seen
            # the first sync and the safety resync read the object from the API server; the
            # others plan against the watch's copy (when the watch is up: a retry after an
            # outage or a 429 then costs one request, not two)
            if self.sync_once(step.run, fresh=step.run in ("start", "resync")):
                next_sync, why = self.clock() + cfg.resync_interval, "resync"
                if self._expiry is not None:
                    until = (self._expiry - datetime.now(UTC)).total_seconds()
                    at = self.clock() + max(0.0, until) + 0.05
                    if at < next_sync:
                        next_sync, why = at, "expiry"
            else:
                next_sync, why = self.clock() + self._retry_in, "retry"
        log.info("stopped")

    def alive(self, wedged_after: float | None = None) -> tuple[bool, str]:
        """Alive and not stuck: the loop came round recently (a sync counts as progress
        only while it is within its request timeouts)."""
        wedged_after = self.config.wedged_after if wedged_after is None else wedged_after
        now = self.clock()
        if self.syncing_since is not None and now - self.syncing_since > wedged_after:
            return False, f"a sync has been running for {now - self.syncing_since:.0f}s"
        if self.syncing_since is None and now - self.heartbeat > wedged_after:
            return False, f"loop has not run for {now - self.heartbeat:.0f}s"
        return True, "ok"

    def ready(self, max_age: float | None = None) -> tuple[bool, str]:
        max_age = self.config.ready_max_age if max_age is None else max_age
        error = self.retry.last_error
        if self.last_success is None:
            return False, f"no successful sync yet ({error or 'starting'})"
        age = self.clock() - self.last_success
        if age > max_age:
            return False, f"last successful sync {age:.0f}s ago ({error or 'idle'})"
        return True, f"ok (last sync {age:.0f}s ago)"
