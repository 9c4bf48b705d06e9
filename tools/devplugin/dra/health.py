"""DRAResourceHealth: the health of this node's devices, streamed to the kubelet, which shows
it in the pod's `status.containerStatuses[].allocatedResourcesStatus` (KEP-4680).

The board holds the latest health of every device in the pool, as the inventory's snapshots
say it (absent -> Unhealthy with the inventory's reason, "unplugged from port 1-1.3",
"re-enumerating at port 2-1"); each NodeWatchResources stream sends the whole pool when it
opens, at once after every change, and again every HEARTBEAT seconds. The resend is not
decoration: the kubelet turns a device it has heard nothing about for `TIMEOUT` seconds into
Unknown, so a quiet stream would erase a true "Healthy".

Every device of the pool is reported, not only the prepared ones: a claim prepared a moment
after a change then already has its device's health, and the kubelet keeps only what its pods
use. Both proto packages the 1.37 kubelet speaks are served (it takes `v1` when offered, older
kubelets `v1alpha1`): the messages are the same, field for field.

An open stream holds one of the server's workers for its whole life (the kubelet keeps one
open; a lingering one across its restart, a debugging client, add to it). So the streams of
both packages together are capped at MAX_STREAMS (..streamcap: RESOURCE_EXHAUSTED beyond it),
and the kubelet plugin's server has that many workers on top of the ones NodePrepareResources
and NodeUnprepareResources need (kubeletplugin.py): however many streams are open, a claim is
never prepared late for want of a worker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import grpc

from edgefd.inventory.device import Device

from ..streamcap import REFUSED, StreamCap
from .api import health_pb2, health_pb2_grpc, health_v1alpha1_pb2, health_v1alpha1_pb2_grpc

HEARTBEAT = 10.0  # seconds between full reports when nothing changes
TIMEOUT = 30  # seconds the kubelet trusts a report (its own default, said explicitly)
MAX_MESSAGE = 1024  # the kubelet truncates longer messages
MAX_STREAMS = 8  # open NodeWatchResources streams, both packages; the kubelet needs one

# "<package>.<service>" as the registration's supported versions name them, newest first
SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")


def health_of(dev: Device) -> tuple[bool, str]:
    """Healthy with where it is, or Unhealthy with the reason a person reads."""
    if dev.healthy:
        return True, f"present at {dev.key.where}"
    return False, (dev.reason or "cannot be used")[:MAX_MESSAGE]


class HealthBoard:
    """The pool's device health, with a version that moves on every change; streams wait
    on it. Thread-safe: written by the inventory's thread, read by the gRPC workers."""

    def __init__(
        self, pool: str, clock: Callable[[], float] = time.time, heartbeat: float = HEARTBEAT
    ) -> None:
        self.pool = pool
        self.clock = clock
        self.heartbeat = heartbeat
        self._cond = threading.Condition()
        self._health: dict[str, tuple[bool, str]] = {}
        self._since: dict[str, float] = {}  # when each device's health last changed
        self.version = 0
        self.closed = False
        self.cap = StreamCap(MAX_STREAMS, "DRAResourceHealth: NodeWatchResources")

    @property
    def streams(self) -> int:
        return self.cap.open

    def update(self, devices: Mapping[str, Device]) -> bool:
        """The devices of the latest snapshot, by name; True when any health changed."""
        new = {name: health_of(d) for name, d in devices.items()}
        with self._cond:
            if new == self._health:
                return False
            now = self.clock()
            self._since = {
                n: (self._since.get(n, now) if self._health.get(n) == h else now)
                for n, h in new.items()
            }
            self._health = new
            self.version += 1
            self._cond.notify_all()
            return True

    def get(self, name: str) -> tuple[bool, str] | None:
        with self._cond:
            return self._health.get(name)

    def wait(
        self, seen: int, timeout: float, done: threading.Event | None = None
    ) -> tuple[int, dict[str, tuple[bool, str]]]:
        """The health once the version is not `seen` (or `timeout` passed, the board closed,
        `done` set)."""
        with self._cond:
            self._cond.wait_for(
                lambda: self.version != seen or self.closed or (done is not None and done.is_set()),
                timeout,
            )
            return self.version, dict(self._health)

    def _wake(self, done: threading.Event) -> None:
        done.set()
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """End every stream (the plugin is stopping)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def report(self, pb: Any, health: Mapping[str, tuple[bool, str]]) -> Any:
        """One NodeWatchResourcesResponse of `pb` (either package's module)."""
        resp = pb.NodeWatchResourcesResponse()
        with self._cond:
            since = dict(self._since)
        for name in sorted(health):
            ok, message = health[name]
            resp.devices.add(
                device=pb.DeviceIdentifier(pool_name=self.pool, device_name=name),
                health=pb.HEALTHY if ok else pb.UNHEALTHY,
                last_updated_time=int(since.get(name, self.clock())),
                health_check_timeout_seconds=TIMEOUT,
                message=message,
            )
        return resp

    def stream(self, pb: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        """What one NodeWatchResources call yields until the kubelet hangs up or we stop. A
        call that ends (the kubelet gone, the server stopping) wakes its wait at once, so a
        stopping server never waits out a heartbeat for its worker. Beyond the cap the call
        is refused before it waits at all."""
        if not self.cap.enter():
            context.abort(REFUSED, self.cap.refusal)
        done = threading.Event()
        context.add_callback(lambda: self._wake(done))
        try:
            seen = -1
            while not (self.closed or done.is_set()) and context.is_active():
                seen, health = self.wait(seen, self.heartbeat, done)
                if self.closed or done.is_set() or not context.is_active():
                    return
                yield self.report(pb, health)
        finally:
            self.cap.leave()


def add_to_server(board: HealthBoard, server: grpc.Server) -> None:
    """Serve both packages of the health service from one board."""

    class V1(health_pb2_grpc.DRAResourceHealthServicer):
        def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            return board.stream(health_pb2, context)

    class V1Alpha1(health_v1alpha1_pb2_grpc.DRAResourceHealthServicer):
        def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            return board.stream(health_v1alpha1_pb2, context)

    health_pb2_grpc.add_DRAResourceHealthServicer_to_server(V1(), server)
    health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(V1Alpha1(), server)
