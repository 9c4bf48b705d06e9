"""Keeping a local copy of what one collection query selects, current through one watch.

A list, then a watch from the list's resourceVersion with bookmarks, renewed from the last
resourceVersion seen whenever the server ends it, so an idle copy costs one open watch and no
periodic request: the server ends a watch only after its `timeoutSeconds` (here jittered in
[watch_seconds, 2 x watch_seconds), the API server's own default), and sends a bookmark about
once a minute that keeps the resourceVersion fresh and proves the link alive (a watch that
hears nothing for `idle_timeout` is dead and is reopened). A 410 Gone (the server no longer
has that resourceVersion: its watch cache moved on, etcd was compacted, the API server
restarted) means list again. Any other failure is retried from the same resourceVersion with
the shared backoff (edgefd.kube.retry), so an API-server restart costs one watch request, or
a list and a watch, per client: no storm of re-reads.

The handler hears `listed(objects, reason)` after every list (all objects, by name),
`event(type, object)` for each ADDED/MODIFIED/DELETED, `lost()` when the watch failed (the
copy may be stale until `listed` or the next event), and, if it has one, `bookmark()` at each
bookmark (the watch is alive and current).

A list that succeeds ends a failing streak of the retry at once (a 403 that the API server
no longer gives is said to be over then, not when the next watch ends minutes later). The
owner can ask for a list itself (`relist`): a write it made was refused as stale, so its copy
is wrong in a way no event will repair; the open watch is closed and the loop lists, then
watches from that list.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlencode

from edgefd.core.errors import EdgefdError

from .client import Client, Watch
from .errors import ApiGone, ApiUnreachable, failure_kind
from .retry import Retry

log = logging.getLogger(__name__)

WATCH_SECONDS = 1800  # [30, 60) min, as the API server picks for a watch that names none
IDLE_TIMEOUT = 150.0  # 2.5 bookmark periods: a link silent this long is dead
SHORT_WATCH = 1.0  # a watch the server ends this soon, with nothing in it, counts as failed


class Handler(Protocol):
    def listed(self, objects: dict[str, dict[str, Any]], reason: str) -> None: ...
    def event(self, kind: str, obj: dict[str, Any]) -> None: ...
    def lost(self) -> None: ...


def resource_version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def newer(a: str, b: str) -> bool:
    """Whether resourceVersion `a` is newer than `b`. Opaque to clients by contract, etcd
    revisions in practice: compared as numbers when both are, else `a` counts as newer."""
    if a.isdigit() and b.isdigit():
        return int(a) > int(b)
    return True


def name_selector(name: str) -> str:
    """The query selecting exactly one object by name (RBAC sees the name, too)."""
    return urlencode({"fieldSelector": f"metadata.name={name}"})


class ListWatch:
    """One list-then-watch loop on its own thread (start/stop), for `path` (a collection URL
    with its selector query). `on_list(reason)` counts lists ("start", "gone", "error", or the
    reason given to `relist`)."""

    def __init__(
        self,
        client: Client,
        resource: str,
        path: str,
        what: str,
        handler: Handler,
        *,
        watch_seconds: float = WATCH_SECONDS,
        idle_timeout: float = IDLE_TIMEOUT,
        retry: Retry | None = None,
        on_list: Callable[[str], None] | None = None,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.client = client
        self.resource = resource
        self.path = path
        self.what = what
        self.handler = handler
        self.watch_seconds = watch_seconds
        self.idle_timeout = idle_timeout
        self.retry = retry or Retry(f"watching {what}")
        self.on_list = on_list or (lambda reason: None)
        self.jitter = jitter
        self.resource_version = ""
        self.up = False  # listed, and a watch is open
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._watch: Watch | None = None
        self._asked: str | None = None  # a list the owner asked for (relist), not made yet
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> ListWatch:
        self._thread = threading.Thread(target=self.run, name=f"watch {self.what}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            watch = self._watch
        if watch is not None:
            watch.close()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)

    def relist(self, reason: str = "asked") -> None:
        """List again as soon as the loop can (after a failure: once its backoff is over), and
        watch from that list; `reason` is what `on_list` and the handler hear."""
        with self._lock:
            self._asked = reason
            watch = self._watch
        if watch is not None:
            watch.close()  # the loop then finds the request, not a failed watch

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _take_asked(self) -> str | None:
        with self._lock:
            asked, self._asked = self._asked, None
        return asked

    # -- the loop

    def run(self) -> None:
        reason: str | None = "start"  # why the next round lists first; None: resume the watch
        while not self._stop.is_set():
            try:
                asked = self._take_asked()
                if reason is None:
                    reason = asked
                if reason is not None:
                    self._list(reason)
                    reason = None
                    self.retry.succeeded()
                ended_well = self._watch_once()
                with self._lock:
                    if self._asked is not None:
                        continue  # closed for the list the owner asked for: no failure
                if ended_well:
                    self.retry.succeeded()
                else:  # ended at once, empty (a proxy cutting it?): do not spin
                    raise ApiUnreachable(f"watch {self.what}: the server ended it at once")
            except ApiGone as e:
                # the server dropped that resourceVersion: list again, now (rate-limited)
                log.info("%s: %s; listing again", self.what, e)
                reason = "gone"
            except EdgefdError as e:
                if self._stop.is_set():
                    break
                self.up = False
                self.handler.lost()
                if not self.resource_version:
                    reason = "error"  # never listed: a watch has nothing to resume from
                self._stop.wait(self.retry.failed(e, failure_kind(e)))
            finally:
                self.up = False
        log.debug("%s: watch stopped", self.what)

    def _list(self, reason: str) -> None:
        lst = (
            self.client.request("GET", self.resource, self.path, f"list {self.what}", verb="LIST")
            or {}
        )
        objects = {}
        for obj in lst.get("items") or ():
            name = (obj.get("metadata") or {}).get("name")
            if name:
                objects[name] = obj
        self.resource_version = resource_version(lst)
        self.on_list(reason)
        self.handler.listed(objects, reason)

    def _watch_once(self) -> bool:
        """One watch from the last resourceVersion, until the server ends it; False when it
        ended at once with nothing in it."""
        started = time.monotonic()
        heard = False
        seconds = int(self.watch_seconds * (1.0 + self.jitter()))
        query = urlencode({"resourceVersion": self.resource_version, "allowWatchBookmarks": "true"})
        sep = "&" if "?" in self.path else "?"
        watch = self.client.watch(
            self.resource,
            f"{self.path}{sep}{query}",
            f"watch {self.what}",
            seconds,
            idle_timeout=self.idle_timeout,
        )
        with self._lock:
            self._watch = watch
            asked = self._asked is not None  # relist() came while it was being opened
        try:
            if self._stop.is_set() or asked:
                return True
            self.up = True
            for ev in watch:
                heard = True
                obj = ev.get("object") or {}
                rv = resource_version(obj)
                if rv:
                    self.resource_version = rv
                kind = ev.get("type")
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self.handler.event(kind, obj)
                elif kind == "BOOKMARK" and hasattr(self.handler, "bookmark"):
                    self.handler.bookmark()  # the watch is alive and current
        finally:
            with self._lock:
                self._watch = None
            watch.close()
        return heard or self._stop.is_set() or time.monotonic() - started >= SHORT_WATCH
