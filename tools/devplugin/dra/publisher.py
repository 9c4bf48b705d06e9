"""Keeping this node's ResourceSlices equal to its devices: written when, and only when, they
differ, with the pool generation raised on every change; recreated when something else
deletes them (a starting kubelet wipes every DRA slice of its node).

Two threads. The watcher lists this node's slices of our driver and watches them, so the
publisher always knows what the API server holds without asking; the writer compares that
with what it wants (slices.pool_slices) and writes the difference. A slice whose
resourceVersion is the one our own write returned is known to hold what we sent, so the echo
of our writes never causes another; anything else (an object changed or deleted by someone
else, slices left by an earlier run) is compared by content and rewritten if it differs. A
restart that finds its slices as it would write them writes nothing.

Only this node's pool is ours: the list selects the node's slices of our driver, and a slice
of another pool among them (another component's, an administrator's) is never rewritten or
deleted, nor counted in the pool's generation; it is said once at info level.

Every slice is owned by this node's Node object (ownerReferences, its UID read from the API
server): a Node that is deleted takes its slices with it. The UID is read before the first
write and again after someone else deleted one of our slices (a Node deleted and registered
again has a new UID, and the old owner would have the collector delete the slices once
more); while the Node cannot be read the slices are written without an owner, and the
owner is added once it can.

Writes use the resourceVersion we last saw (409 -> list again, write again). Every failure,
a 409 included, waits out the shared retry schedule (edgefd.kube.retry: jittered backoff,
said at warning level once per kind, counted), so a slice name taken by someone else (a 409
on create that no re-read resolves) is retried slowly and said, never in a loop; "the API is
down" never loses a change, it only delays it. The watcher's failures go through the same
schedule: a 403 on list or watch is said once, and again when it recovers, and `/readyz`
gives it as the reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from edgefd.core.errors import EdgefdError
from edgefd.kube.errors import ApiConflict, ApiNotFound, failure_kind
from edgefd.kube.retry import Retry

from .metrics import DraMetrics
from .readback import generation as _generation
from .readback import matches as _matches
from .readback import pool as _pool
from .slices import DRIVER, node_owner, pool_slices, slice_object

log = logging.getLogger(__name__)

WATCH_SECONDS = 240


class SliceApi(Protocol):
    def list_slices(self, node: str, driver: str) -> dict[str, Any]: ...
    def watch_slices(self, node: str, driver: str, resource_version: str, seconds: int) -> Any: ...
    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]: ...
    def replace_slice(self, body: dict[str, Any]) -> dict[str, Any]: ...
    def delete_slice(self, name: str, resource_version: str | None = None) -> None: ...
    def get_node(self, name: str) -> dict[str, Any]: ...


def _rv(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _newer(a: str, b: str) -> bool:
    """Whether resourceVersion `a` is older than `b` (opaque to clients, but etcd revisions
    in practice; anything else counts as not older)."""
    return a.isdigit() and b.isdigit() and int(a) < int(b)


class NameTaken(ApiConflict):
    """A create refused with 409: a slice of that name exists that this node's list does not
    show as ours (another node's or another pool's)."""


def _reason(exc: BaseException) -> str:
    return "name-taken" if isinstance(exc, NameTaken) else failure_kind(exc)


class Publisher:
    def __init__(
        self,
        api: SliceApi,
        node: str,
        metrics: DraMetrics | None = None,
        watch_seconds: int = WATCH_SECONDS,
        on_published: Callable[[], None] | None = None,
    ) -> None:
        self.api = api
        self.node = node
        self.metrics = metrics
        self.watch_seconds = watch_seconds
        self.on_published = on_published
        self._cond = threading.Condition()
        self._devices: list[dict[str, Any]] | None = None  # None: nothing scanned yet
        self._server: dict[str, dict[str, Any]] = {}  # what the API server holds
        self._synced = False
        self._ours: dict[str, str] = {}  # slice name -> resourceVersion our write returned
        self._dirty = True
        self._stopping = False
        self._watch: Any = None
        self._owner: list[dict[str, Any]] | None = None  # None: not read (yet, or again)
        self._owner_error = ""
        self.in_sync = threading.Event()
        self.last_error = ""
        self._foreign: set[str] = set()  # other pools' slices already said
        self._write_retry = Retry(
            f"publishing the ResourceSlices of {node}", initial=0.1, on_retry=self._retried("write")
        )
        self._watch_retry = Retry(
            f"watching the ResourceSlices of {node}", on_retry=self._retried("watch")
        )
        self.writes = 0
        self.generation = 0
        self._threads = [
            threading.Thread(target=self._write_loop, name="dra-publisher", daemon=True),
            threading.Thread(target=self._watch_loop, name="dra-slice-watch", daemon=True),
        ]

    # -- inputs

    def set_devices(self, devices: Iterable[dict[str, Any]]) -> None:
        """The node's devices (API form) as of the latest scan; wakes the writer on change."""
        devs = list(devices)
        with self._cond:
            if devs == self._devices:
                return
            self._devices = devs
            self._dirty = True
            self.in_sync.clear()
            self._cond.notify_all()

    def desired(self) -> list[tuple[str, dict[str, Any]]]:
        with self._cond:
            devs = self._devices
        return pool_slices(self.node, devs or [])

    @property
    def watch_refused(self) -> str:
        """Why the slices cannot be listed or watched, if the API server refuses (403)."""
        r = self._watch_retry
        return r.last_error or "" if r.failing and r.last_reason == "refused" else ""

    def _retried(self, loop: str) -> Callable[[str], None]:
        def count(reason: str) -> None:
            if self.metrics:
                self.metrics.api_retries.labels(loop=loop, reason=reason).inc()

        return count

    # -- lifecycle

    def start(self) -> Publisher:
        for t in self._threads:
            t.start()
        return self

    def stop(self, delete: bool = False, timeout: float = 5.0) -> None:
        """Stop both threads; with `delete`, remove this node's slices (best effort)."""
        with self._cond:
            self._stopping = True
            watch = self._watch
            self._cond.notify_all()
        if watch is not None:
            watch.close()
        for t in self._threads:
            if t.is_alive():
                t.join(timeout)
        if delete:
            self._delete_all()

    def _delete_all(self) -> None:
        with self._cond:
            names = dict(self._server)
        for name, obj in sorted(names.items()):
            try:
                self.api.delete_slice(name, _rv(obj) or None)
                self._count("delete")
                log.info("deleted ResourceSlice %s (no prepared claims)", name)
            except ApiNotFound:
                pass
            except EdgefdError as e:
                log.warning("could not delete ResourceSlice %s: %s", name, e)

    # -- what the API server holds

    def _of_our_pool(self, obj: dict[str, Any]) -> bool:
        """Whether a slice the node's list shows is of this node's pool; another pool's is
        said once and left alone."""
        if _pool(obj) == self.node:
            return True
        name = (obj.get("metadata") or {}).get("name") or ""
        if name not in self._foreign:
            self._foreign.add(name)
            log.info(
                "ResourceSlice %s on %s is of pool %r, not this node's: leaving it alone",
                name,
                self.node,
                _pool(obj),
            )
        return False

    def _set_server(self, objs: dict[str, dict[str, Any]]) -> None:
        objs = {n: o for n, o in objs.items() if self._of_our_pool(o)}
        with self._cond:
            self._server = objs
            self._synced = True
            self._dirty = True
            self._cond.notify_all()

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            return
        rv = _rv(obj)
        if kind != "DELETED" and not self._of_our_pool(obj):
            kind = "DELETED"  # moved to another pool: no longer ours to write
        with self._cond:
            known = self._server.get(name)
            if kind == "DELETED":
                if known is not None and not _newer(rv, _rv(known)):
                    del self._server[name]
                    self._ours.pop(name, None)
                    self._owner = None  # the Node may be new too: read its UID again
                    self._dirty = True
                    log.info("ResourceSlice %s was deleted", name)
            elif known is None or not _newer(rv, _rv(known)):
                self._server[name] = obj
                if self._ours.get(name) != rv:
                    self._dirty = True
            if self._dirty:
                self.in_sync.clear()
                self._cond.notify_all()

    def _watch_loop(self) -> None:
        while not self._stopping:
            try:
                lst = self.api.list_slices(self.node, DRIVER)
                objs = {o["metadata"]["name"]: o for o in lst.get("items") or ()}
                self._set_server(objs)
                self._watch_retry.succeeded()
                rv = _rv(lst)
                while not self._stopping:
                    watch = self.api.watch_slices(self.node, DRIVER, rv, self.watch_seconds)
                    with self._cond:
                        self._watch = watch
                    if self._stopping:
                        watch.close()
                        return
                    for ev in watch:
                        obj = ev.get("object") or {}
                        rv = _rv(obj) or rv
                        if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                            self._event(ev["type"], obj)
            except ApiConflict:
                continue  # the resourceVersion expired: list again (rate-limited by the client)
            except EdgefdError as e:
                if self._stopping:
                    return
                delay = self._watch_retry.failed(e, _reason(e))
                with self._cond:
                    self._cond.wait(delay)

    # -- writing

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not (self._dirty and self._synced):
                    self._cond.wait()
                if self._stopping:
                    return
                self._dirty = False
            if self._devices is None:
                continue  # nothing scanned yet: do not publish "no devices"
            try:
                self._reconcile()
            except EdgefdError as e:
                if self.metrics:
                    self.metrics.slice_write_errors.labels(kind=type(e).__name__).inc()
                delay = self._write_retry.failed(e, _reason(e))
                self.last_error = str(e)
                if isinstance(e, ApiConflict):
                    self._refresh()  # what the server holds now, before the next attempt
                with self._cond:
                    self._dirty = True
                    if not self._stopping:
                        self._cond.wait(delay)
                continue
            self._write_retry.succeeded()
            self.last_error = ""

    def _refresh(self) -> None:
        try:
            lst = self.api.list_slices(self.node, DRIVER)
        except EdgefdError as e:
            log.debug("listing ResourceSlices: %s", e)
            with self._cond:
                self._dirty = True
            return
        self._set_server({o["metadata"]["name"]: o for o in lst.get("items") or ()})

    def owner(self) -> list[dict[str, Any]]:
        """This node's Node as the slices' owner; [] while it cannot be read (retried at the
        next write)."""
        with self._cond:
            if self._owner is not None:
                return self._owner
        try:
            owner = node_owner(self.api.get_node(self.node))
        except EdgefdError as e:
            if str(e) != self._owner_error:
                log.warning("slices written without their Node as owner for now: %s", e)
            self._owner_error = str(e)
            return []
        self._owner_error = ""
        with self._cond:
            self._owner = owner
        return owner

    def _reconcile(self) -> None:
        desired = self.desired()
        owner = self.owner()
        with self._cond:
            server = dict(self._server)
        gen = max((_generation(o) for o in server.values()), default=0)
        wanted = {n for n, _ in desired}
        if set(server) == wanted and all(
            _matches(s, server.get(n), gen, owner) for n, s in desired
        ):
            self._published(gen)
            return
        # never below what this process wrote before: if the slices were deleted meanwhile (a
        # starting kubelet wipes them), a consumer that saw them must see a newer generation
        gen = max(gen, self.generation) + 1
        for name, spec in desired:
            body = slice_object(name, spec, gen, owner)
            known = server.get(name)
            if known is not None:
                body["metadata"]["resourceVersion"] = _rv(known)
                try:
                    obj = self.api.replace_slice(body)
                    self._count("update")
                except ApiNotFound:  # deleted since we looked
                    body["metadata"].pop("resourceVersion")
                    obj = self._create(body)
            else:
                obj = self._create(body)
            with self._cond:
                self._ours[name] = _rv(obj)
                if not _newer(_rv(obj), _rv(self._server.get(name) or {})):
                    self._server[name] = obj
        for name in sorted(set(server) - wanted):
            try:
                self.api.delete_slice(name, _rv(server[name]) or None)
                self._count("delete")
            except ApiNotFound:
                pass
            with self._cond:
                self._server.pop(name, None)
                self._ours.pop(name, None)
        log.info(
            "published %d ResourceSlice(s) for %s, generation %d",
            len(desired),
            self.node,
            gen,
        )
        self._published(gen)

    def _create(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        try:
            obj = self.api.create_slice(body)
        except ApiConflict as e:
            raise NameTaken(
                f"cannot create ResourceSlice {name}: a slice of that name exists and is not"
                f" of this node's pool (another node's or another pool's): {e}"
            ) from e
        self._count("create")
        return obj

    def _published(self, gen: int) -> None:
        self.generation = gen
        if self.metrics:
            self.metrics.slice_generation.set(gen)
        with self._cond:
            if not self._dirty:
                self.in_sync.set()
        if self.on_published:
            self.on_published()

    def _count(self, op: str) -> None:
        self.writes += 1
        if self.metrics:
            self.metrics.slice_writes.labels(op=op).inc()
