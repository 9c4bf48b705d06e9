"""The gRPC side of one resource: the DevicePlugin service on its own unix socket.

Why asyncio: the kubelet must get Allocate, GetPreferredAllocation and GetDevicePluginOptions
answered at once whatever else is connected. A thread-pool server gives every ListAndWatch
stream a worker thread for as long as it is open, so a handful of extra streams (a second
client, a kubelet that reconnects while its old stream lingers) took every worker and the
kubelet's Allocate waited, unanswered, for as long as they stayed open. Here each server runs
on one asyncio loop shared by all resources (one thread, `_Loop`): an open stream is a
coroutine parked on an asyncio.Event, costing a few kilobytes and no thread, and unary calls
run on the same loop between wake-ups. Nothing a handler does blocks (each answer is a pure
function of the advertised snapshot), so nothing can hold the loop. Open streams are still
capped (MAX_STREAMS per server, refused beyond with RESOURCE_EXHAUSTED; the cap is
..streamcap, the DRA health streams' too) so a client looping on ListAndWatch cannot grow
memory without bound; the kubelet's own stream comes first on a fresh server (one per
registration), so the cap never stands in its way.

A `ResourceState` holds what the resource advertises and outlives servers: the plugin stops
the server and starts a fresh one on every re-registration (an open ListAndWatch stream from
a previous kubelet must end before the new registration, see kubernetes #121994), while the
device list carries on. The hot-plug thread publishes into it; streams wake only when the
list changes, the client goes away or the server stops: no polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio

from edgefd.inventory.resources import Resource
from edgefd.runtime.files import FileIdentity, file_identity

from ..api import deviceplugin_pb2 as pb
from ..api import deviceplugin_pb2_grpc as pb_grpc
from ..links import LinkLayout
from ..streamcap import REFUSED, StreamCap
from .advertised import Advertised
from .allocate import UnknownDevice, container_response, preferred, resolve

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_STREAMS = 256  # open ListAndWatch streams per server; the kubelet needs one
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0


class _Loop:
    """The one asyncio loop every plugin server of the process runs on, in a daemon thread.

    One loop, not one per server: gRPC's asyncio stack is meant to be driven by a single
    loop, and a loop per resource would bring back a thread per resource for no gain.
    """

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _anchor: Any = None  # keeps gRPC's asyncio machinery up while the loop runs, see shutdown
    servers = 0  # started and not yet stopped, in this process

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="devplugin-grpc", daemon=True
                )
                thread.start()
                cls._loop, cls._thread = loop, thread
                # gRPC tears its asyncio poller down when its last server or channel goes,
                # closing a descriptor the loop still reads (a later callback fails with
                # EBADF). An idle channel that never connects keeps it up until the loop is
                # stopped; it is never closed: the process is ending when the loop stops.
                cls._anchor = asyncio.run_coroutine_threadsafe(_anchor(), loop).result(
                    START_TIMEOUT
                )
            return cls._loop

    @classmethod
    def shutdown(cls, timeout: float = STOP_TIMEOUT) -> None:
        """Stop the loop once every server on it has stopped (process shutdown). Left running
        into interpreter exit, it would still dispatch gRPC's poller callbacks after gRPC
        has closed their file descriptors (an "EBADF" traceback on every SIGTERM)."""
        with cls._lock:
            if cls.servers:
                return  # another plugin in this process still serves on it
            loop, thread = cls._loop, cls._thread
            cls._loop = cls._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)

    @classmethod
    def run(cls, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run `coro` on the loop and wait for its result (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coro, cls.get()).result(timeout)


async def _anchor() -> Any:
    return grpc.aio.insecure_channel("unix:///nonexistent/edgefd-anchor.sock")


class ResourceState:
    """The current device list of one resource, with change notification.

    Written by the hot-plug thread, read by the servers' loop: a lock guards the list and
    listeners are called (outside it) on every change that the streams would send.
    """

    def __init__(
        self,
        resource: Resource,
        links: LinkLayout,
        cdi_prefix: str | None,
        cdi_written: Callable[[str], bool] | None = None,
        on_allocate: Callable[[int], None] | None = None,
    ) -> None:
        self.resource = resource
        self.links = links
        self.cdi_prefix = cdi_prefix
        self.cdi_written = cdi_written  # whether a CDI name's spec is on disk (cdi.py)
        self.on_allocate = on_allocate  # devices allocated (-1: refused), for the metrics
        self._lock = threading.Lock()
        self._adv = Advertised.build((), resource.replicas)
        self.version = 0
        self._listeners: list[Callable[[], None]] = []

    @property
    def advertised(self) -> Advertised:
        with self._lock:
            return self._adv

    def snapshot(self) -> tuple[int, Advertised]:
        with self._lock:
            return self.version, self._adv

    def publish(self, adv: Advertised) -> bool:
        """Install a new device list; wake the streams only if what they send would change."""
        with self._lock:
            changed = adv.list_entries != self._adv.list_entries
            self._adv = adv
            if changed:
                self.version += 1
            listeners = list(self._listeners) if changed else []
        for notify in listeners:
            notify()
        return changed

    def subscribe(self, notify: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(notify)

    def unsubscribe(self, notify: Callable[[], None]) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._listeners.remove(notify)


def list_response(adv: Advertised) -> pb.ListAndWatchResponse:
    resp = pb.ListAndWatchResponse()
    for dev_id, health, numa in adv.list_entries:
        d = resp.devices.add(ID=dev_id, health=health)
        if numa is not None and numa >= 0:
            d.topology.nodes.add(ID=numa)
    return resp


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    """Answers the kubelet for one resource, from a ResourceState. Runs on the loop only."""

    def __init__(self, state: ResourceState, loop: asyncio.AbstractEventLoop) -> None:
        self.state = state
        self.loop = loop
        self.stopped = False
        self.cap = StreamCap(MAX_STREAMS, f"{state.resource.name}: ListAndWatch")
        self._changed = asyncio.Event()
        state.subscribe(self._notify)

    def _notify(self) -> None:
        """From any thread: wake every stream of this server."""
        with contextlib.suppress(RuntimeError):  # the loop is closing: nobody is waiting
            self.loop.call_soon_threadsafe(self._bump)

    def _bump(self) -> None:
        # a fresh Event per generation: a stream that took the old one is woken, and one
        # that takes the new one has already read the version it will compare against
        old, self._changed = self._changed, asyncio.Event()
        old.set()

    def stop(self) -> None:
        """On the loop: end every stream's wait (the server then cancels the calls)."""
        self.stopped = True
        self.state.unsubscribe(self._notify)
        self._bump()

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(
            pre_start_required=False,
            get_preferred_allocation_available=self.state.resource.replicas > 1,
        )

    async def ListAndWatch(
        self, request: pb.Empty, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        state = self.state
        if not self.cap.enter():
            await context.abort(REFUSED, self.cap.refusal)
        seen = -1
        try:
            while not self.stopped:
                changed = self._changed  # before reading the version: see _bump
                version, adv = state.snapshot()
                if version == seen:
                    await changed.wait()
                    continue
                seen = version
                log.debug("%s: sending %d device(s)", state.resource.name, len(adv.list_entries))
                yield list_response(adv)
        finally:
            self.cap.leave()

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.aio.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        adv = self.state.advertised
        resp = pb.PreferredAllocationResponse()
        for creq in request.container_requests:
            ids = preferred(
                list(creq.available_deviceIDs),
                list(creq.must_include_deviceIDs),
                creq.allocation_size,
                adv.by_kubelet_id,
            )
            resp.container_responses.add(deviceIDs=ids)
        return resp

    async def Allocate(
        self, request: pb.AllocateRequest, context: grpc.aio.ServicerContext
    ) -> pb.AllocateResponse:
        state = self.state
        adv = state.advertised
        resp = pb.AllocateResponse()
        for creq in request.container_requests:
            try:
                devs = resolve(list(creq.devices_ids), adv.by_kubelet_id)
            except UnknownDevice as e:
                msg = f"{state.resource.name}: {e}"
                log.warning("Allocate refused: %s", msg)
                if state.on_allocate:
                    state.on_allocate(-1)
                await context.abort(grpc.StatusCode.NOT_FOUND, msg)
            resp.container_responses.append(
                container_response(
                    state.resource, devs, state.links, state.cdi_prefix, state.cdi_written
                )
            )
            if state.on_allocate:
                state.on_allocate(len(creq.devices_ids))
        return resp

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.aio.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


class PluginServer:
    """One gRPC server on one socket; started once, stopped once. Called from plain threads;
    the server itself lives on the shared loop."""

    def __init__(self, state: ResourceState, socket_path: str) -> None:
        self.state = state
        self.socket_path = socket_path
        self.servicer: DevicePluginServicer | None = None
        self._server: grpc.aio.Server | None = None
        self.identity: FileIdentity | None = None

    async def _start(self) -> None:
        self.servicer = DevicePluginServicer(self.state, asyncio.get_running_loop())
        server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(self.servicer, server)
        server.add_insecure_port("unix:" + self.socket_path)
        await server.start()
        self._server = server

    async def _stop(self) -> None:
        if self.servicer is not None:
            self.servicer.stop()
        if self._server is not None:
            await self._server.stop(grace=None)

    def start(self) -> PluginServer:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        _Loop.run(self._start(), START_TIMEOUT)
        with _Loop._lock:
            _Loop.servers += 1
        self.identity = file_identity(self.socket_path)
        return self

    def socket_is_ours(self) -> bool:
        """Whether the socket file on disk is still the one this server listens on."""
        ident = file_identity(self.socket_path)
        return ident is not None and ident == self.identity

    @property
    def streams(self) -> int:
        return self.servicer.cap.open if self.servicer is not None else 0

    def stop(self, remove_socket: bool = True) -> None:
        """End every stream, stop serving and (if ours) remove the socket."""
        stop_all([self], remove_socket)

    def _forget(self, ours: bool, remove_socket: bool) -> None:
        with _Loop._lock:
            if self._server is not None:
                _Loop.servers -= 1
                self._server = None
        if remove_socket and ours:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)


def stop_all(servers: Sequence[PluginServer], remove_socket: bool = True) -> None:
    """Stop several servers at once, within one STOP_TIMEOUT for all: one after the other,
    each queued behind every other call on the one loop, 900 of them took minutes after a
    SIGTERM (issue 30, item 8) and the kubelet's grace period ran out."""
    if not servers:
        return
    ours = [s.socket_is_ours() for s in servers]

    async def stop() -> None:
        await asyncio.gather(*(s._stop() for s in servers), return_exceptions=True)

    try:
        _Loop.run(stop(), STOP_TIMEOUT)
    except Exception as e:  # a stop that times out must not keep the sockets around
        names = ", ".join(s.state.resource.name for s in servers[:3])
        more = f" and {len(servers) - 3} more" if len(servers) > 3 else ""
        log.warning("%s%s: stopping the server: %s", names, more, str(e) or type(e).__name__)
    for s, mine in zip(servers, ours, strict=True):
        s._forget(mine, remove_socket)


def shutdown() -> None:
    """Stop the loop every server ran on (call once all servers have stopped)."""
    _Loop.shutdown()
