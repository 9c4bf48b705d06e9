"""Keeping this node's ResourceSlices equal to its devices: written when, and only when, they
differ, with the pool generation raised on every change; recreated when something else
deletes them (a starting kubelet wipes every DRA slice of its node).

Two threads, so that a write never waits for a read. The watcher is the shared ListWatch
(edgefd.kube.listwatch, feature-sink's loop too) over this node's slices of our driver; its
handler (heldslices.py) keeps what the API server holds and judges each event once (the echo
of our own write, another pool's slice, a slice someone else deleted). The writer, here,
compares that with what it wants (slices.pool_slices) and writes the difference, so a
restart over unchanged slices writes nothing.

Every slice is owned by this node's Node, its UID read again after someone else deleted one
of our slices (a Node registered again has a new UID): heldslices.py says why.

Writes carry the resourceVersion last seen. A 409 means the copy is wrong in a way no event
repairs: the writer asks the ListWatch to list again, and writes once that list arrived.
Every failure waits out the shared retry schedule (edgefd.kube.retry: jittered backoff, said
once per kind, counted), which the list we asked for does not cut short (a new scan or
someone else's change does): a slice name taken by someone else (a 409 on create that no
list resolves) is retried slowly and said, never in a loop, and an unreachable API server
delays a change, never loses it. A 403 on list or watch is said once, and again when it
ends; `/readyz` gives it as the reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from edgefd.core.errors import EdgefdError
from edgefd.kube.errors import ApiConflict, ApiNotFound, failure_kind
from edgefd.kube.listwatch import ListWatch, resource_version
from edgefd.kube.retry import Retry

from .heldslices import HeldSlices
from .metrics import DraMetrics
from .readback import generation as _generation
from .readback import matches as _matches
from .slices import DRIVER, pool_slices, slice_object

log = logging.getLogger(__name__)

WATCH_SECONDS = 240


class SliceApi(Protocol):
    """kubeapi.DraApi's slice calls; an edgefd.kube Client, the ListWatch reads through it."""

    def slices_query(self, node: str, driver: str) -> tuple[str, str]: ...
    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]: ...
    def replace_slice(self, body: dict[str, Any]) -> dict[str, Any]: ...
    def delete_slice(self, name: str, resource_version: str | None = None) -> None: ...
    def get_node(self, name: str) -> dict[str, Any]: ...


class NameTaken(ApiConflict):
    """A create refused with 409: a slice of that name exists that this node's list does not
    show as ours (another node's or another pool's)."""


def _reason(exc: BaseException) -> str:
    return "name-taken" if isinstance(exc, NameTaken) else failure_kind(exc)


class SlicePublisher:
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
        self.on_published = on_published
        self._cond = threading.Condition()
        self._devices: list[dict[str, Any]] | None = None  # None: nothing scanned yet
        self._synced = False  # the held copy comes from a list (the latest one asked for)
        self._dirty = True
        self._kicked = False  # a new scan or someone else's change: end a backoff wait
        self._stopping = False
        self.in_sync = threading.Event()
        self.last_error = ""
        self._write_retry = Retry(
            f"publishing the ResourceSlices of {node}", initial=0.1, on_retry=self._retried("write")
        )
        self._watch_retry = Retry(
            f"watching the ResourceSlices of {node}", on_retry=self._retried("watch")
        )
        self.writes = 0
        self.generation = 0
        self.held = HeldSlices(node, self._changed)
        resource, path = api.slices_query(node, DRIVER)
        self._watch = ListWatch(
            api,  # type: ignore[arg-type]  # a DraApi: an edgefd.kube Client
            resource,
            path,
            f"resourceslices of {node}",
            self.held,
            watch_seconds=watch_seconds,
            retry=self._watch_retry,
        )
        self._writer = threading.Thread(target=self._write_loop, name="dra-publisher", daemon=True)

    # -- inputs

    def set_devices(self, devices: Iterable[dict[str, Any]]) -> None:
        """The node's devices (API form) as of the latest scan; wakes the writer on change."""
        devs = list(devices)
        with self._cond:
            if devs == self._devices:
                return
            self._devices = devs
            self._dirty = self._kicked = True
            self.in_sync.clear()
            self._cond.notify_all()

    @property
    def watch_refused(self) -> str:
        """Why the slices cannot be listed or watched, if the API server refuses (403); no
        longer once a watch is open again, even before it ends and the retry hears of it."""
        r = self._watch_retry
        if self._watch.up or not (r.failing and r.last_reason == "refused"):
            return ""
        return r.last_error or ""

    def _retried(self, loop: str) -> Callable[[str], None]:
        def count(reason: str) -> None:
            if self.metrics:
                self.metrics.api_retries.labels(loop=loop, reason=reason).inc()

        return count

    def _changed(self, how: str) -> None:
        """What the API server holds changed (heldslices.HeldSlices.on_change)."""
        with self._cond:
            if how == "listed":
                self._synced = True
            else:  # someone else's doing: worth acting on before a backoff is over
                self._kicked = True
                self.in_sync.clear()
            self._dirty = True
            self._cond.notify_all()

    # -- lifecycle

    def start(self) -> SlicePublisher:
        self._watch.start()
        self._writer.start()
        return self

    def stop(self, delete: bool = False, timeout: float = 5.0) -> None:
        """Stop both threads; with `delete`, remove this node's slices (best effort)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._watch.stop(timeout)
        if self._writer.is_alive():
            self._writer.join(timeout)
        if delete:
            self._delete_all()

    def _delete_all(self) -> None:
        for name, obj in sorted(self.held.snapshot().items()):
            try:
                self.api.delete_slice(name, resource_version(obj) or None)
                self._count("delete")
                log.info("deleted ResourceSlice %s (no prepared claims)", name)
            except ApiNotFound:
                pass
            except EdgefdError as e:
                log.warning("could not delete ResourceSlice %s: %s", name, e)

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
                self._failed(e)
                continue
            self._write_retry.succeeded()
            self.last_error = ""

    def _failed(self, e: EdgefdError) -> None:
        if self.metrics:
            self.metrics.slice_write_errors.labels(kind=type(e).__name__).inc()
        delay = self._write_retry.failed(e, _reason(e))
        self.last_error = str(e)
        stale = isinstance(e, ApiConflict)  # write again only with what the server holds now
        with self._cond:
            self._dirty, self._kicked = True, False
            self._synced = self._synced and not stale
        if stale:
            self._watch.relist("conflict")
        with self._cond:
            self._cond.wait_for(lambda: self._stopping or self._kicked, delay)

    def _reconcile(self) -> None:
        with self._cond:
            desired = pool_slices(self.node, self._devices or [])
        owner = self.held.owner(lambda: self.api.get_node(self.node))
        server = self.held.snapshot()
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
                body["metadata"]["resourceVersion"] = resource_version(known)
                try:
                    obj = self.api.replace_slice(body)
                    self._count("update")
                except ApiNotFound:  # deleted since we looked
                    body["metadata"].pop("resourceVersion")
                    obj = self._create(body)
            else:
                obj = self._create(body)
            self.held.wrote(name, obj)
        for name in sorted(set(server) - wanted):
            try:
                self.api.delete_slice(name, resource_version(server[name]) or None)
                self._count("delete")
            except ApiNotFound:
                pass
            self.held.removed(name)
        log.info(
            "published %d ResourceSlice(s) for %s, generation %d", len(desired), self.node, gen
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
