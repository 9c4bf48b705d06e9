"""This node's ResourceSlices of its own pool, and the Node that owns them, as the API server
holds them: the handler the publisher gives edgefd.kube.listwatch.ListWatch, so the writer
compares what it wants with what is there without asking the API server first.

Kept apart from the writer (publisher.py) because what is *held* and what is *wanted* change
on different threads for different reasons: here the server's word arrives (a list, an event)
and is judged once, in one place:

- Only this node's pool is ours. The query selects the node's slices of our driver; a slice
  of another pool among them (another component's, an administrator's) is not kept, so it
  is never rewritten, deleted or counted in the pool's generation. It is said once at info
  level, not at every list and event that shows it again.
- The echo of our own write changes nothing. A slice whose resourceVersion is the one our
  write returned holds what we sent; only anything else (changed or deleted by someone else,
  left by an earlier run) is worth comparing again.
- A late event never undoes a newer state: an object is replaced only by one at least as new
  (resourceVersions compared as edgefd.kube.listwatch.newer does).
- Every slice is owned by this node's Node (ownerReferences with its UID), so a deleted Node
  takes its slices along. The UID is read before the first write and again after someone
  else deleted one of our slices: a Node deleted and registered again has a new UID, and the
  old owner would have the collector delete the slices once more. While the Node cannot be
  read the slices are written without an owner, which is added once it can.

`on_change(how)` tells the writer: "listed" (a full list arrived), "changed" (something other
than our echo), "deleted" (someone else deleted one of our slices). It is called outside the
lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from edgefd.core.errors import EdgefdError
from edgefd.kube.listwatch import newer, resource_version

from .readback import pool
from .slices import node_owner

log = logging.getLogger(__name__)


def _not_older(a: str, b: str) -> bool:
    """Whether resourceVersion `a` may replace `b`: the same, newer, or not comparable (an
    empty or opaque one), so that only a provably late event is dropped."""
    return a == b or newer(a, b)


class HeldSlices:
    """The ListWatch handler (listed / event / lost) plus what the writer reads and records."""

    def __init__(self, node: str, on_change: Callable[[str], None]) -> None:
        self.node = node
        self.on_change = on_change
        self._lock = threading.Lock()
        self._held: dict[str, dict[str, Any]] = {}  # name -> slice, as last heard
        self._ours: dict[str, str] = {}  # name -> resourceVersion our own write returned
        self._foreign: set[str] = set()  # other pools' slices already said
        self._owner: list[dict[str, Any]] | None = None  # None: not read (yet, or again)
        self._owner_error = ""

    # -- the writer's side

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self._held)

    def wrote(self, name: str, obj: dict[str, Any]) -> None:
        """The answer to our own create or replace: its watch echo is then no news."""
        rv = resource_version(obj)
        with self._lock:
            self._ours[name] = rv
            if _not_older(rv, resource_version(self._held.get(name) or {})):
                self._held[name] = obj

    def owner(self, read_node: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
        """This node's Node as the slices' owner (`read_node` asks the API server for it, only
        when not known); [] while it cannot be read (asked again at the next write)."""
        with self._lock:
            if self._owner is not None:
                return self._owner
        try:
            owner = node_owner(read_node())
        except EdgefdError as e:
            if str(e) != self._owner_error:
                log.warning("slices written without their Node as owner for now: %s", e)
            self._owner_error = str(e)
            return []
        self._owner_error = ""
        with self._lock:
            self._owner = owner
        return owner

    def removed(self, name: str) -> None:
        """We deleted it (or found it gone)."""
        with self._lock:
            self._held.pop(name, None)
            self._ours.pop(name, None)

    # -- the ListWatch handler

    def listed(self, objects: dict[str, dict[str, Any]], reason: str) -> None:
        held = {n: o for n, o in objects.items() if self._of_our_pool(o)}
        with self._lock:
            self._held = held
        self.on_change("listed")

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            return
        rv = resource_version(obj)
        if kind != "DELETED" and not self._of_our_pool(obj):
            kind = "DELETED"  # moved to another pool: no longer ours to write
        how = ""
        with self._lock:
            known = self._held.get(name)
            if kind == "DELETED":
                if known is not None and _not_older(rv, resource_version(known)):
                    del self._held[name]
                    self._ours.pop(name, None)
                    self._owner = None  # the Node may be new too: read its UID again
                    how = "deleted"
            elif known is None or _not_older(rv, resource_version(known)):
                self._held[name] = obj
                if self._ours.get(name) != rv:
                    how = "changed"
        if how == "deleted":
            log.info("ResourceSlice %s was deleted", name)
        if how:
            self.on_change(how)

    def lost(self) -> None:
        """The watch failed: the copy stays as last heard. It is only ever a guess for the
        writer, whose every write is guarded by the resourceVersion it read, so a stale copy
        costs a refused write and a list, never a wrong slice."""

    # --

    def _of_our_pool(self, obj: dict[str, Any]) -> bool:
        if pool(obj) == self.node:
            return True
        name = (obj.get("metadata") or {}).get("name") or ""
        with self._lock:
            said = name in self._foreign
            self._foreign.add(name)
        if not said:
            log.info(
                "ResourceSlice %s on %s is of pool %r, not this node's: leaving it alone",
                name,
                self.node,
                pool(obj),
            )
        return False
