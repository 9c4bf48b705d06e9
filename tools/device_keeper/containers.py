"""From a holder (namespace, pod, container) to the running container: its ID, a process in
it, and its cgroup directories, through the CRI (containerd and CRI-O serve the same API).

`ListContainers` filtered by the labels the kubelet puts on every container
(`io.kubernetes.pod.namespace`, `io.kubernetes.pod.name`, `io.kubernetes.container.name`) and
state RUNNING gives the ID; `ContainerStatus(verbose)` gives the runtime's `info` JSON, whose
`pid` and `runtimeSpec.linux.cgroupsPath` both runtimes fill. The cgroup path is taken from
the spec, not from /proc/<pid>/cgroup: the latter is relative to the reader's cgroup
namespace, which a container's is not. A path of the form `slice:prefix:name` is the systemd
cgroup driver's.

The same spec's `linux.devices` are the nodes the runtime made in the container at creation,
each at its path with its number (a DeviceSpec's or a CDI spec's, the ones its cgroup allows):
what the keeper revokes when the device moves on, whatever the container's path names later.

A CRI pid is only a number: before the keeper writes into `/proc/<pid>/root`, the process must
be in the container's cgroup (by its `/proc/<pid>/cgroup`), and its start time (`stat` field
22) must be the one seen then, again once the root is open: a pid the container no longer has,
reused by a process of another container, is never written into.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from edgefd.core.errors import EdgefdError, Unreachable

from .holders import Holder
from .rules import DeviceNumber

SOCKETS = {"containerd": "/run/containerd/containerd.sock", "crio": "/var/run/crio/crio.sock"}
LABEL_NAMESPACE = "io.kubernetes.pod.namespace"
LABEL_POD = "io.kubernetes.pod.name"
LABEL_CONTAINER = "io.kubernetes.container.name"
LABEL_POD_UID = "io.kubernetes.pod.uid"
MAX_SPEC_DEVICES = 4096
log = logging.getLogger("device-keeper")
Devices = tuple[tuple[str, DeviceNumber], ...]


class NotThisContainer(EdgefdError):
    """The pid the runtime gave is not (or no longer) a process of the container."""


@dataclass(frozen=True)
class Container:
    holder: Holder
    id: str
    pid: int
    cgroups_path: str
    devices: Devices = ()  # the runtime spec's linux.devices: (container path, number)

    def spec_numbers(self, path: str) -> set[DeviceNumber]:
        """The numbers the runtime made at `path` when it created the container."""
        return {n for p, n in self.devices if p == path}

    def identify(self, proc: str) -> int:
        """The start time of the container's pid, once the pid is seen in its cgroup;
        NotThisContainer otherwise."""
        start = process_start(proc, self.pid)
        want = [c for c in cgroup_path(self.cgroups_path).split("/") if c][-2:]
        try:
            with open(f"{proc}/{self.pid}/cgroup", encoding="utf-8", errors="replace") as f:
                lines = f.read(65536).splitlines()
        except OSError as e:
            raise NotThisContainer(f"process {self.pid}: {e.strerror}") from None
        paths = [line.split(":", 2)[2] for line in lines if line.count(":") >= 2]
        if not want or not any(_below(p, want) for p in paths):
            raise NotThisContainer(
                f"process {self.pid} is not in the container's cgroup {self.cgroups_path}"
            )
        self.same(proc, start)  # the cgroup read was of the process timed
        return start

    def same(self, proc: str, start: int) -> None:
        """NotThisContainer unless the pid is still the process that started at `start`."""
        if process_start(proc, self.pid) != start:
            raise NotThisContainer(f"process {self.pid} is another process now (pid reused)")

    @property
    def systemd(self) -> bool:
        """The systemd cgroup driver names a scope `slice:prefix:name`, not a path."""
        return not self.cgroups_path.startswith("/") and self.cgroups_path.count(":") == 2

    def cgroup_dirs(self, cgroup_fs: str) -> list[str]:
        return cgroup_dirs(self.cgroups_path, cgroup_fs)


def cgroup_path(cgroups_path: str) -> str:
    """The container's cgroup below the hierarchies' root: the runtime's `cgroupsPath`, or
    under the systemd driver (`slice:prefix:name`) its scope in its slices (systemd.Scope);
    "" for a systemd path that names no scope."""
    if cgroups_path.startswith("/") or cgroups_path.count(":") != 2:
        return cgroups_path
    from .systemd import Scope

    try:
        return Scope.of(cgroups_path).path
    except ValueError:
        return ""


def cgroup_dirs(cgroups_path: str, cgroup_fs: str) -> list[str]:
    """Where a container's device rules live under the cgroup filesystem mount: the v1
    devices controller's directory and/or the v2 directory (both exist on a hybrid host; the
    kernel applies both). None: the container is gone."""
    cgroups_path = cgroup_path(cgroups_path)
    if not cgroups_path:
        return []
    rel = cgroups_path.lstrip("/")
    out = []
    v1 = os.path.join(cgroup_fs, "devices", rel)
    if os.path.isfile(os.path.join(v1, "devices.list")):
        out.append(v1)
    for v2_root in (os.path.join(cgroup_fs, "unified"), cgroup_fs):
        if os.path.isfile(os.path.join(v2_root, "cgroup.controllers")):
            d = os.path.join(v2_root, rel)
            if os.path.isdir(d):
                out.append(d)
            break
    return out


def _below(path: str, want: list[str]) -> bool:
    """`path` (relative to the reader's cgroup namespace: `..` components) is the cgroup
    whose last components are `want`, or one under it."""
    parts = [c for c in path.split("/") if c]
    n = len(want)
    return any(parts[i : i + n] == want for i in range(len(parts) - n + 1))


def process_start(proc: str, pid: int) -> int:
    """The start time of `pid` (clock ticks after boot); NotThisContainer if it is gone."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            data = f.read(4096)
        return int(data[data.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError) as e:
        raise NotThisContainer(f"process {pid} is gone ({type(e).__name__})") from None


def parse_devices(info: dict[str, str]) -> Devices:
    """The runtime spec's `linux.devices` (path, number) from a verbose status's info map;
    entries that are not a char or block node with a number are skipped."""
    try:
        doc = json.loads(info.get("info") or "{}")
    except (ValueError, RecursionError):
        return ()
    spec = doc.get("runtimeSpec") if isinstance(doc, dict) else None
    linux = spec.get("linux") if isinstance(spec, dict) else None
    devices = linux.get("devices") if isinstance(linux, dict) else None
    out = []
    for d in (devices if isinstance(devices, list) else [])[:MAX_SPEC_DEVICES]:
        if not isinstance(d, dict) or not isinstance(d.get("path"), str):
            continue
        major, minor = d.get("major"), d.get("minor")
        kind = {"c": "c", "u": "c", "b": "b"}.get(str(d.get("type")))  # OCI: u, unbuffered c
        if kind is None or not isinstance(major, int) or not isinstance(minor, int):
            continue
        try:
            out.append((d["path"], DeviceNumber(kind, major, minor)))
        except ValueError:
            continue
    return tuple(out)


def parse_info(info: dict[str, str]) -> tuple[int, str]:
    """(pid, cgroupsPath) from a verbose ContainerStatus's info map; ValueError if absent."""
    try:
        doc = json.loads(info.get("info") or "{}")
    except RecursionError:
        raise ValueError("the runtime's info is nested too deep") from None
    doc = doc if isinstance(doc, dict) else {}
    spec = doc.get("runtimeSpec")
    linux = spec.get("linux") if isinstance(spec, dict) else None
    path = linux.get("cgroupsPath") if isinstance(linux, dict) else None
    pid = doc.get("pid")
    if not isinstance(pid, int) or pid <= 0 or not isinstance(path, str) or not path:
        raise ValueError("the runtime's info has no pid or cgroupsPath")
    return pid, path


class Runtime:
    """The node's CRI runtime service."""

    def __init__(self, socket: str = SOCKETS["containerd"], timeout: float = 5.0) -> None:
        self.socket = socket
        self.timeout = timeout

    def cgroup_driver(self) -> str:
        """ "systemd" or "cgroupfs" as the runtime says (CRI RuntimeConfig, containerd >= 2.0,
        CRI-O); "" when it cannot say (an older runtime: each container's cgroupsPath says)."""
        from .api import cri_pb2 as pb

        try:
            resp = self._call("RuntimeConfig", pb.RuntimeConfigRequest())
        except Unreachable as e:
            if "UNIMPLEMENTED" in str(e):
                return ""
            raise
        if not resp.HasField("linux"):
            return ""
        return "systemd" if resp.linux.cgroup_driver == pb.SYSTEMD else "cgroupfs"

    def _call(self, method: str, request: Any) -> Any:
        import grpc

        from .api import cri_pb2_grpc as rpc

        with grpc.insecure_channel(f"unix://{os.path.abspath(self.socket)}") as ch:
            try:
                return getattr(rpc.RuntimeServiceStub(ch), method)(request, timeout=self.timeout)
            except grpc.RpcError as e:
                raise Unreachable(f"CRI {method}: {e.code().name}: {e.details()}") from None

    def containers(self, holder: Holder) -> list[Container]:
        """The container(s) of a holder the runtime has running or created (one, unless a
        restart is under way): a container created while its device moved is granted before
        it runs. Only the pod the kubelet runs now: when containers of more than one pod of
        that name are there (a force-deleted pod's, still running), those of the pod created
        last, the others named in a warning and never granted."""
        from .api import cri_pb2 as pb

        labels = {
            LABEL_NAMESPACE: holder.namespace,
            LABEL_POD: holder.pod,
            LABEL_CONTAINER: holder.container,
        }
        flt = pb.ContainerFilter(label_selector=labels)
        listed = self._call("ListContainers", pb.ListContainersRequest(filter=flt))
        live = [
            c
            for c in listed.containers
            if c.state in (pb.CONTAINER_CREATED, pb.CONTAINER_RUNNING)
            and all(c.labels.get(k) == v for k, v in labels.items())  # a runtime may ignore it
        ]
        out = []
        for c in current_pod(holder, live):
            status = self._call(
                "ContainerStatus", pb.ContainerStatusRequest(container_id=c.id, verbose=True)
            )
            try:
                pid, path = parse_info(dict(status.info))
            except ValueError as e:
                if c.state == pb.CONTAINER_CREATED:
                    continue  # no process yet: the catch-up after the move finds it running
                raise Unreachable(f"container {c.id[:12]} of {holder}: {e}") from None
            out.append(Container(holder, c.id, pid, path, parse_devices(dict(status.info))))
        return out


def current_pod(holder: Holder, listed: list[Any]) -> list[Any]:
    """The CRI containers of the pod (by its UID) created last; the rest are another pod's of
    the same name, said once here."""
    by_uid: dict[str, list[Any]] = {}
    for c in listed:
        by_uid.setdefault(c.labels.get(LABEL_POD_UID, ""), []).append(c)
    if len(by_uid) <= 1:
        return listed
    newest = max(by_uid, key=lambda uid: max(c.created_at for c in by_uid[uid]))
    others = ", ".join(
        f"{c.id[:12]} (pod {uid or '?'})" for uid, cs in by_uid.items() if uid != newest for c in cs
    )
    log.warning(
        "%s: containers of another pod of that name are there too (%s): only pod %s's, "
        "created last, is granted",
        holder,
        others,
        newest or "?",
    )
    return by_uid[newest]
