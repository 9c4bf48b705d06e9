"""The gRPC side of one resource: the DevicePlugin service on its own unix socket.

A `ResourceState` holds what the resource advertises and outlives servers: the plugin stops
the server and starts a fresh one on every re-registration (an open ListAndWatch stream from
a previous kubelet must end before the new registration, see kubernetes #121994), while the
device list carries on. Streams block on a condition variable and wake only when the list
changes, the client goes away or the server stops: no polling.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from concurrent import futures

import grpc

from .allocate import LinkLayout, UnknownDevice, container_response, preferred, resolve
from .api import deviceplugin_pb2 as pb
from .api import deviceplugin_pb2_grpc as pb_grpc
from .config import Resource
from .devices import Advertised
from .registration import FileIdentity, file_identity

log = logging.getLogger(__name__)


class ResourceState:
    """The current device list of one resource, with change notification."""

    def __init__(self, resource: Resource, links: LinkLayout, cdi_prefix: str | None) -> None:
        self.resource = resource
        self.links = links
        self.cdi_prefix = cdi_prefix
        self.cond = threading.Condition()
        self._adv = Advertised.build((), resource.replicas)
        self.version = 0
        self.on_allocate: Callable[[int], None] | None = None

    @property
    def advertised(self) -> Advertised:
        with self.cond:
            return self._adv

    def publish(self, adv: Advertised) -> bool:
        """Install a new device list; wake the streams only if what they send would change."""
        with self.cond:
            changed = adv.list_entries != self._adv.list_entries
            self._adv = adv
            if changed:
                self.version += 1
                self.cond.notify_all()
            return changed

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()


def list_response(adv: Advertised) -> pb.ListAndWatchResponse:
    resp = pb.ListAndWatchResponse()
    for dev_id, health, numa in adv.list_entries:
        d = resp.devices.add(ID=dev_id, health=health)
        if numa is not None and numa >= 0:
            d.topology.nodes.add(ID=numa)
    return resp


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    """Answers the kubelet for one resource, from a ResourceState."""

    def __init__(self, state: ResourceState) -> None:
        self.state = state
        self.stopped = False
        self.streams = 0

    def stop(self) -> None:
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
        if not context.add_callback(state.wake):
            return
        seen = -1
        self.streams += 1
        try:
            while True:
                with state.cond:
                    while not self.stopped and context.is_active() and state.version == seen:
                        state.cond.wait()
                    if self.stopped or not context.is_active():
                        return
                    seen = state.version
                    adv = state._adv
                log.debug("%s: sending %d device(s)", state.resource.name, len(adv.list_entries))
                yield list_response(adv)
        finally:
            self.streams -= 1

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
                container_response(state.resource, devs, state.links, state.cdi_prefix)
            )
            if state.on_allocate:
                state.on_allocate(len(creq.devices_ids))
        return resp

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


class PluginServer:
    """One gRPC server on one socket; started once, stopped once."""

    def __init__(self, state: ResourceState, socket_path: str, max_workers: int = 4) -> None:
        self.socket_path = socket_path
        self.servicer = DevicePluginServicer(state)
        self._executor = futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="devplugin-grpc"
        )
        self._server = grpc.server(self._executor, maximum_concurrent_rpcs=max_workers * 4)
        pb_grpc.add_DevicePluginServicer_to_server(self.servicer, self._server)
        self.identity: FileIdentity | None = None

    def start(self) -> PluginServer:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        self._server.add_insecure_port("unix:" + self.socket_path)
        self._server.start()
        self.identity = file_identity(self.socket_path)
        return self

    def socket_is_ours(self) -> bool:
        """Whether the socket file on disk is still the one this server listens on."""
        ident = file_identity(self.socket_path)
        return ident is not None and ident == self.identity

    def stop(self, remove_socket: bool = True) -> None:
        """End every stream, stop serving, release the threads and (if ours) the socket."""
        self.servicer.stop()
        ours = self.socket_is_ours()
        self._server.stop(grace=None).wait(5)
        self._executor.shutdown(wait=True, cancel_futures=True)
        if remove_socket and ours:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)
