"""The kubelet's side of DRA: registration through the plugin watcher and the DRAPlugin
service (with the DRAResourceHealth service beside it, health.py), each on its own unix
socket.

The kubelet's plugin watcher finds `<kubelet-dir>/plugins_registry/edgefd.io-reg-<hex>.sock`,
calls Registration.GetInfo (type DRAPlugin, our driver name, the service socket, `v1.DRAPlugin`),
dials the service socket and reports back with NotifyRegistrationStatus. The kubelet finds the
socket again by itself when it restarts; the plugin only has to keep serving, and to serve
afresh if its socket file disappears (..kubeletsocket: one server per socket, the process's
one watch of the socket directories, acted on at once).

The registration socket has a name of its own per process (`<hex>`: the start time), and the
sockets of earlier processes are removed at start. After a reboot the previous one is still on
disk; a kubelet that starts before us dials it, and keeps retrying that path with growing
backoff, so a new socket under the same name is found seconds late and then registered twice
(the kubelet sees a newer file and registers again). A new name is a new plugin to the kubelet:
registered within its next reconcile (1 s).

NodePrepareResources reads claims from the API server, so the service has a small pool of
workers and a claim's failure is reported in its own entry (the kubelet retries those)
rather than failing the call. The health streams beside it each hold a worker for as long as
they are open, so the server has their cap (health.MAX_STREAMS) of stream workers beside
PREPARE_WORKERS: with every stream the cap allows open, preparation still has its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable

import grpc

from edgefd.core.errors import EdgefdError

from ..kubeletsocket import KubeletSocket, SocketDirs, stop_all
from .api import dra_pb2 as dra
from .api import dra_pb2_grpc as dra_grpc
from .api import pluginregistration_pb2 as reg
from .api import pluginregistration_pb2_grpc as reg_grpc
from .checkpoint import PreparedDevice
from .claims import ClaimRef, Preparer
from .health import MAX_STREAMS as MAX_HEALTH_STREAMS
from .health import SERVICES as HEALTH_SERVICES
from .health import HealthBoard
from .health import add_to_server as add_health
from .slices import DRIVER

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
SERVICE_VERSION = "v1.DRAPlugin"
REGISTRY_SUBDIR = "plugins_registry"
PLUGINS_SUBDIR = "plugins"
SERVICE_SOCKET = "dra.sock"
REGISTRATION_PREFIX = f"{DRIVER}-reg"  # earlier releases: edgefd.io-reg.sock
PREPARE_WORKERS = 4  # the service's workers for unary calls, whatever streams are open


def registration_socket_name() -> str:
    """`edgefd.io-reg-<start time in ns, hex>.sock`: this process's own (see above)."""
    return f"{REGISTRATION_PREFIX}-{time.time_ns():x}.sock"


class Registration(reg_grpc.RegistrationServicer):
    """What the plugin watcher asks, and what it says back."""

    def __init__(
        self,
        endpoint: str,
        on_status: Callable[[bool, str], None],
        versions: tuple[str, ...] = (SERVICE_VERSION,),
    ) -> None:
        self.endpoint = endpoint
        self.on_status = on_status
        self.versions = versions

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=PLUGIN_TYPE,
            name=DRIVER,
            endpoint=self.endpoint,
            supported_versions=list(self.versions),
        )

    def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        self.on_status(request.plugin_registered, request.error)
        return reg.RegistrationStatusResponse()


class DraService(dra_grpc.DRAPluginServicer):
    """NodePrepareResources / NodeUnprepareResources over a Preparer."""

    def __init__(self, preparer: Preparer, on_call: Callable[[str, bool], None]) -> None:
        self.preparer = preparer
        self.on_call = on_call

    def NodePrepareResources(
        self, request: dra.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodePrepareResourcesResponse:
        resp = dra.NodePrepareResourcesResponse()
        for c in request.claims:
            ref = ClaimRef(c.namespace, c.uid, c.name)
            out = resp.claims[c.uid]
            try:
                for d, requests in merged(self.preparer.prepare(ref)):
                    out.devices.add(
                        request_names=requests,
                        pool_name=d.pool,
                        device_name=d.device,
                        cdi_device_ids=list(d.cdi_ids),
                    )
                self.on_call("prepare", True)
            except Exception as e:  # this claim's entry says why; the kubelet retries it
                del out.devices[:]
                out.error = f"{c.namespace}/{c.name}: {_reason(e)}"
                if isinstance(e, EdgefdError | OSError):
                    log.warning("prepare %s/%s failed: %s", c.namespace, c.name, out.error)
                else:
                    log.exception("prepare %s/%s failed", c.namespace, c.name)
                self.on_call("prepare", False)
        return resp

    def NodeUnprepareResources(
        self, request: dra.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodeUnprepareResourcesResponse:
        resp = dra.NodeUnprepareResourcesResponse()
        for c in request.claims:
            out = resp.claims[c.uid]
            try:
                self.preparer.unprepare(ClaimRef(c.namespace, c.uid, c.name))
                self.on_call("unprepare", True)
            except Exception as e:
                out.error = f"{c.namespace}/{c.name}: {_reason(e)}"
                log.warning("unprepare %s/%s failed: %s", c.namespace, c.name, out.error)
                self.on_call("unprepare", False)
        return resp


def merged(devices: Iterable[PreparedDevice]) -> list[tuple[PreparedDevice, list[str]]]:
    """Each device once, with every request it was allocated for: a claim whose status lists
    a device twice must not give a container its CDI device twice."""
    out: dict[tuple[str, str], tuple[PreparedDevice, list[str]]] = {}
    for d in devices:
        _, requests = out.setdefault((d.pool, d.device), (d, []))
        if d.request and d.request not in requests:
            requests.append(d.request)
    return list(out.values())


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    return str(e) or type(e).__name__


class KubeletPlugin:
    """The two sockets, kept served: `check()` (called when the directories change) serves
    afresh whichever socket is no longer ours. The service comes up before the registration
    socket, so the kubelet never dials an endpoint that is not there yet."""

    def __init__(
        self,
        kubelet_dir: str,
        preparer: Preparer,
        dirs: SocketDirs,
        on_call: Callable[[str, bool], None] = lambda op, ok: None,
        on_registration: Callable[[bool, str], None] = lambda ok, err: None,
        health: HealthBoard | None = None,
    ) -> None:
        self.registry_dir = os.path.join(kubelet_dir, REGISTRY_SUBDIR)
        self.plugin_dir = self.plugin_dir_of(kubelet_dir)
        self.registration_socket = os.path.join(self.registry_dir, registration_socket_name())
        self.service_socket = os.path.join(self.plugin_dir, SERVICE_SOCKET)
        self.preparer = preparer
        self.on_call = on_call
        self.health = health
        self._on_registration = on_registration
        self._lock = threading.Lock()
        self.registered = threading.Event()
        self.last_error = ""
        self.registrations = 0
        self._service = self._service_socket()
        self._registration = self._registration_socket()
        dirs.watch(self.registry_dir, lambda _names: self.check())
        dirs.watch(self.plugin_dir, lambda _names: self.check())

    @staticmethod
    def plugin_dir_of(kubelet_dir: str) -> str:
        """`<kubelet-dir>/plugins/edgefd.io`: the service socket, the checkpoint, the links,
        the claims' device metadata."""
        return os.path.join(kubelet_dir, PLUGINS_SUBDIR, DRIVER)

    def _status(self, ok: bool, error: str) -> None:
        if ok:
            self.registrations += 1
            self.last_error = ""
            self.registered.set()
            log.info("registered with the kubelet (%s)", SERVICE_VERSION)
        else:
            self.registered.clear()
            self.last_error = error or "the kubelet refused the registration"
            log.warning("kubelet registration failed: %s", self.last_error)
        self._on_registration(ok, error)

    def _service_socket(self) -> KubeletSocket:
        svc = DraService(self.preparer, self.on_call)
        health = self.health

        def add(server: grpc.Server) -> None:
            dra_grpc.add_DRAPluginServicer_to_server(svc, server)
            if health is not None:
                add_health(health, server)

        streams = MAX_HEALTH_STREAMS if health is not None else 0
        return KubeletSocket(
            self.service_socket, add, unary=PREPARE_WORKERS, streams=streams, name="dra"
        )

    def _registration_socket(self) -> KubeletSocket:
        versions = (SERVICE_VERSION, *(HEALTH_SERVICES if self.health is not None else ()))
        servicer = Registration(self.service_socket, self._status, versions)
        return KubeletSocket(
            self.registration_socket,
            lambda s: reg_grpc.add_RegistrationServicer_to_server(servicer, s),
            unary=2,
            name="dra-registration",
        )

    def remove_stale(self) -> list[str]:
        """Remove the registration sockets of earlier processes (left by a reboot or a crash:
        the kubelet would dial them in vain)."""
        removed = []
        for name in sorted(os.listdir(self.registry_dir)):
            path = os.path.join(self.registry_dir, name)
            if not (name.startswith(REGISTRATION_PREFIX) and name.endswith(".sock")):
                continue
            with contextlib.suppress(FileNotFoundError):
                if path != self.registration_socket and stat.S_ISSOCK(os.lstat(path).st_mode):
                    os.unlink(path)
                    removed.append(path)
        for path in removed:
            log.info("removed %s: an earlier process's registration socket", path)
        return removed

    def start(self) -> KubeletPlugin:
        os.makedirs(self.registry_dir, exist_ok=True)
        self.remove_stale()
        with self._lock:
            self._service.start()
            self._registration.start()
        log.info(
            "DRA kubelet plugin on %s (registration %s)",
            self.service_socket,
            self.registration_socket,
        )
        return self

    def check(self) -> None:
        """Serve afresh what lost its socket (a directory wiped, a socket deleted)."""
        with self._lock:
            self._service.ensure()
            if self._registration.ensure():
                self.registered.clear()

    def stop(self) -> None:
        with self._lock:
            stop_all([self._registration, self._service])
        self.registered.clear()
