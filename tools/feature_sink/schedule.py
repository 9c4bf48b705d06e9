"""When the sink syncs next, and what wakes it (loop.py runs what this decides).

`Triggers` is what other threads tell the loop, made before any of them so that each is given
it at construction: features.d changed (the directory watcher), the object drifted (its
watch: watched.py), stop. `next_step` is the decision, a pure function of the loop's state and
the time: run a sync now (and why), or sleep until when. Four rules, in order:

* a change of features.d runs a sync at once, and takes a pending drift along;
* drift runs a sync once a fight's hold and the quiet window after a drift sync that repaired
  nothing are over (loop.py sets both);
* while syncs fail, neither brings the retry forward (that would hammer a struggling API
  server; the retry re-reads everything anyway);
* otherwise the scheduled sync (start, retry, resync, a grace period's expiry) runs when due.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class State:
    """What the decision looks at."""

    next_sync: float  # the scheduled sync, monotonic
    why: str  # what it is: start, retry, resync, expiry
    failing: bool  # the last sync failed (the retry is what is scheduled)
    changed: bool  # features.d changed since the last sync
    drift: bool  # the object drifted since the last sync
    drift_due: float  # when a pending drift may be synced (a fight's hold, a quiet window)


@dataclass(frozen=True)
class Step:
    """Run a sync now (`run`: why) or sleep until `wake_at`; `took` the triggers it answers
    ("changed", "drift"), which the loop then clears."""

    run: str | None
    wake_at: float
    took: frozenset[str] = frozenset()


def next_step(s: State, now: float) -> Step:
    if s.changed and not s.failing:
        return Step("features", now, frozenset({"changed", "drift"}))
    if s.drift and not s.failing and now >= s.drift_due:
        return Step("drift", now, frozenset({"drift"}))
    if now >= s.next_sync:
        return Step(s.why, now)
    wake_at = s.next_sync
    if s.drift and not s.failing:
        wake_at = min(wake_at, s.drift_due)
    return Step(None, wake_at)


class Triggers:
    """What wakes the loop, told from other threads. `drift_seen` is when the pending drift
    was first seen (a fight is measured from it)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self.changed = False
        self.drift = False
        self.drift_seen = 0.0

    def features_changed(self, _names: frozenset[str] = frozenset()) -> None:
        """Something in features.d changed (the watcher's thread, the burst coalesced)."""
        with self._lock:
            self.changed = True
        self._wake.set()

    def drifted(self) -> None:
        """The object changed under the sink (its watch's thread)."""
        with self._lock:
            if not self.drift:
                self.drift_seen = self.clock()
            self.drift = True
        self._wake.set()

    def take(self, took: frozenset[str]) -> float:
        """Clear what a sync answers; when the drift it answers was first seen."""
        with self._lock:
            seen = self.drift_seen
            if "changed" in took:
                self.changed = False
            if "drift" in took:
                self.drift = False
        return seen

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def wait(self, timeout: float) -> None:
        self._wake.wait(timeout)
        self._wake.clear()
