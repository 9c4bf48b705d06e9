"""The gRPC side of one resource: the DevicePlugin service on its own unix socket
(..kubeletsocket: one threaded server per socket, as DRA's).

A `ResourceState` holds what the resource advertises and outlives servers: the plugin stops
the server and starts a fresh one on every re-registration (an open ListAndWatch stream from
a previous kubelet must end before the new registration, see kubernetes #121994), while the
device list carries on. The hot-plug thread publishes into it; each ListAndWatch stream is a
blocking generator that waits on the state's condition and wakes only when the list changes,
the call ends (the kubelet gone, the server stopping: its callback) or a heartbeat passes: no
polling. An open stream holds a worker, so the server has MAX_STREAMS workers for streams
beside those of the unary calls, and a stream beyond the cap is refused (..streamcap): the
kubelet's Allocate is answered at once whatever else is connected.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence

import grpc

from edgefd.devplugin.resources import Resource

from ..api import deviceplugin_pb2 as pb
from ..api import deviceplugin_pb2_grpc as pb_grpc
from ..kubeletsocket import KubeletSocket
from ..kubeletsocket import stop_all as stop_sockets
from ..links import LinkLayout
from ..streamcap import REFUSED, StreamCap
from .advertised import Advertised
from .allocate import UnknownDevice, container_response, preferred, resolve

log = logging.getLogger(__name__)

MAX_STREAMS = 8  # open ListAndWatch streams per server (each a worker); the kubelet needs one
UNARY_WORKERS = 4  # Allocate, GetPreferredAllocation, GetDevicePluginOptions, PreStartContainer
WAKE = 30.0  # seconds a quiet stream waits before it looks again (a missed wake-up is bounded)


class ResourceState:
    """The current device list of one resource, with a version that moves when what the
    streams send would change. Written by the hot-plug thread, read by the servers' workers."""

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
        self._cond = threading.Condition()
        self._adv = Advertised.build((), resource.replicas)
        self.version = 0

    @property
    def advertised(self) -> Advertised:
        with self._cond:
            return self._adv

    def snapshot(self) -> tuple[int, Advertised]:
        with self._cond:
            return self.version, self._adv

    def publish(self, adv: Advertised) -> bool:
        """Install a new device list; wake the streams only if what they send would change."""
        with self._cond:
            changed = adv.list_entries != self._adv.list_entries
            self._adv = adv
            if changed:
                self.version += 1
                self._cond.notify_all()
        return changed

    def wait(
        self, seen: int, ended: Callable[[], bool], timeout: float = WAKE
    ) -> tuple[int, Advertised] | None:
        """The next version after `seen` (at once if there is one), or None once `ended()`
        (checked whenever woken: `wake` after the caller's state changed)."""
        with self._cond:
            while self.version == seen and not ended():
                self._cond.wait(timeout)
            return None if ended() else (self.version, self._adv)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


def list_response(adv: Advertised) -> pb.ListAndWatchResponse:
    resp = pb.ListAndWatchResponse()
    for dev_id, health, numa in adv.list_entries:
        d = resp.devices.add(ID=dev_id, health=health)
        if numa is not None and numa >= 0:
            d.topology.nodes.add(ID=numa)
    return resp


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    """Answers the kubelet for one resource, from a ResourceState; one per server."""

    def __init__(self, state: ResourceState) -> None:
        self.state = state
        self.stopped = False
        self.cap = StreamCap(MAX_STREAMS, f"{state.resource.name}: ListAndWatch")

    def stop(self) -> None:
        """End every stream (the server is stopping)."""
        self.stopped = True
        self.state.wake()

    def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(
            pre_start_required=False,
            get_preferred_allocation_available=self.state.resource.replicas > 1,
        )

    def ListAndWatch(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> Iterator[pb.ListAndWatchResponse]:
        state = self.state
        if not self.cap.enter():
            context.abort(REFUSED, self.cap.refusal)
        gone = threading.Event()
        context.add_callback(lambda: (gone.set(), state.wake()))

        def ended() -> bool:
            return self.stopped or gone.is_set()

        try:
            seen = -1
            while (now := state.wait(seen, ended)) is not None:
                seen, adv = now
                log.debug("%s: sending %d device(s)", state.resource.name, len(adv.list_entries))
                yield list_response(adv)
        finally:
            self.cap.leave()

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
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

    def Allocate(
        self, request: pb.AllocateRequest, context: grpc.ServicerContext
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
                context.abort(grpc.StatusCode.NOT_FOUND, msg)
            resp.container_responses.append(
                container_response(
                    state.resource, devs, state.links, state.cdi_prefix, state.cdi_written
                )
            )
            if state.on_allocate:
                state.on_allocate(len(creq.devices_ids))
        return resp

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


class PluginServer:
    """One resource's server on its socket (a KubeletSocket); started once, stopped once."""

    def __init__(self, state: ResourceState, socket_path: str) -> None:
        self.state = state
        self.socket_path = socket_path
        self.servicer = DevicePluginServicer(state)
        self.socket = KubeletSocket(
            socket_path,
            lambda server: pb_grpc.add_DevicePluginServicer_to_server(self.servicer, server),
            unary=UNARY_WORKERS,
            streams=MAX_STREAMS,
            name=f"plugin-{state.resource.short_name}",
        )

    def start(self) -> PluginServer:
        self.socket.start()
        return self

    def socket_is_ours(self) -> bool:
        """Whether the socket file on disk is still the one this server listens on."""
        return self.socket.is_ours()

    @property
    def streams(self) -> int:
        return self.servicer.cap.open

    def stop(self, remove_socket: bool = True) -> None:
        """End every stream, stop serving and (if ours) remove the socket."""
        stop_all([self], remove_socket)


def stop_all(servers: Sequence[PluginServer], remove_socket: bool = True) -> None:
    """Stop several servers at once, within one deadline for all (a SIGTERM among hundreds
    of resources must end within the kubelet's grace period)."""
    for s in servers:
        s.servicer.stop()
    stop_sockets([s.socket for s in servers], remove_socket)
