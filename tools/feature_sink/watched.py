"""The sink's own object (its Node, or its NodeFeature) as the API server last told it, kept
current by one watch (edgefd.kube.listwatch), so that a sync reads no object and a foreign
change is seen the moment it is made.

What matters to the sink of that object is its *fingerprint* (the labels in the namespaces
the sink may write and the ownership annotation; the NodeFeature's spec labels): a change of
anything else (a kubelet's status update, every few seconds on a real Node; another
controller's label in its own namespace) is stored and nothing more. A changed fingerprint
that the sink did not write itself is *drift* (someone removed or edited a label, the
annotation was touched, the object was deleted): `on_drift` wakes the loop, which re-plans at
once and repairs what it owns. The echo of the sink's own write is recognised by its
resourceVersion (`remember`, with the write's answer) and wakes nothing.

The copy is a hint, never trusted for correctness: every write is guarded by the
resourceVersion it was planned against, so a stale copy costs a refused write and a fresh
read, not a wrong label.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

from edgefd.kube.listwatch import newer, resource_version

from .metrics import SinkMetrics

Fingerprint = Callable[[dict[str, Any] | None], Hashable]


class WatchedObject:
    """The ListWatch handler for one object named `name`, plus what the sink reads of it."""

    def __init__(
        self,
        name: str,
        fingerprint: Fingerprint,
        on_drift: Callable[[], None],
        metrics: SinkMetrics | None = None,
    ) -> None:
        self.name = name
        self.fingerprint = fingerprint
        self.on_drift = on_drift
        self.metrics = metrics
        self._lock = threading.Lock()
        self._obj: dict[str, Any] | None = None
        self._print: Hashable = None
        self._known = False  # listed (or written) at least once
        self._trusted = False  # known, and the watch has not failed since

    # -- what a sync reads

    def get(self) -> tuple[bool, dict[str, Any] | None]:
        """(trusted, the object or None when it does not exist). Untrusted: read it from the
        API server instead."""
        with self._lock:
            return self._trusted, self._obj

    def remember(self, obj: dict[str, Any] | None) -> None:
        """The object as the sink's own write left it (the answer to the write): its watch
        echo then changes nothing."""
        if obj:
            self._store(obj, deleted=False, drift=False)

    # -- the ListWatch handler

    def listed(self, objects: dict[str, dict[str, Any]], reason: str) -> None:
        obj = objects.get(self.name)
        with self._lock:
            was_known, before = self._known, self._print
            self._obj = obj
            self._print = self.fingerprint(obj)
            self._known = self._trusted = True
            changed = was_known and self._print != before
        if changed:
            self._drifted("list")

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        if self.metrics is not None:
            self.metrics.object_events.labels(type=kind).inc()
        if (obj.get("metadata") or {}).get("name") != self.name:
            return  # the selector names one object; anything else is not ours to act on
        self._store(obj, deleted=kind == "DELETED", drift=True)

    def lost(self) -> None:
        """The watch failed, or the API server did not answer a request: read the object
        from it until the watch speaks again."""
        with self._lock:
            self._trusted = False

    def bookmark(self) -> None:
        """The watch is alive and has delivered everything up to now."""
        with self._lock:
            self._trusted = self._known

    # --

    def _store(self, obj: dict[str, Any], deleted: bool, drift: bool) -> None:
        rv = resource_version(obj)
        with self._lock:
            current = resource_version(self._obj) if self._obj is not None else ""
            stale = bool(rv and current) and not newer(rv, current)
            if stale and not (deleted and rv == current):
                return  # not newer than what we hold (a late event, or our write's echo)
            new = None if deleted else obj
            before = self._print
            self._obj = new
            self._print = self.fingerprint(new)
            was_known = self._known
            self._known = True
            if drift:
                self._trusted = True
            changed = was_known and self._print != before
        if changed and drift:
            self._drifted("deleted" if deleted else "event")

    def _drifted(self, how: str) -> None:
        if self.metrics is not None:
            self.metrics.drift.labels(seen=how).inc()
        self.on_drift()
