"""From a holder (namespace, pod, container) to the running container: its ID, a process in
it, and its cgroup directories, through the CRI (containerd and CRI-O serve the same API).

`ListContainers` filtered by the labels the kubelet puts on every container
(`io.kubernetes.pod.namespace`, `io.kubernetes.pod.name`, `io.kubernetes.container.name`) and
state RUNNING gives the ID; `ContainerStatus(verbose)` gives the runtime's `info` JSON, whose
`pid` and `runtimeSpec.linux.cgroupsPath` both runtimes fill. The cgroup path is taken from
the spec, not from /proc/<pid>/cgroup: the latter is relative to the reader's cgroup
namespace, which a container's is not. A path of the form `slice:prefix:name` is the systemd
cgroup driver's.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from edgefd.core.errors import Unreachable

from .holders import Holder

SOCKETS = {"containerd": "/run/containerd/containerd.sock", "crio": "/var/run/crio/crio.sock"}
LABEL_NAMESPACE = "io.kubernetes.pod.namespace"
LABEL_POD = "io.kubernetes.pod.name"
LABEL_CONTAINER = "io.kubernetes.container.name"


@dataclass(frozen=True)
class Container:
    holder: Holder
    id: str
    pid: int
    cgroups_path: str

    @property
    def systemd(self) -> bool:
        """The systemd cgroup driver names a scope `slice:prefix:name`, not a path."""
        return not self.cgroups_path.startswith("/") and self.cgroups_path.count(":") == 2

    def cgroup_dirs(self, cgroup_fs: str) -> list[str]:
        """Where this container's device rules live under the cgroup filesystem mount:
        the v1 devices controller's directory and/or the v2 directory (both exist on a
        hybrid host; the kernel applies both)."""
        rel = self.cgroups_path.lstrip("/")
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


def parse_info(info: dict[str, str]) -> tuple[int, str]:
    """(pid, cgroupsPath) from a verbose ContainerStatus's info map; ValueError if absent."""
    doc = json.loads(info.get("info") or "{}")
    pid = int(doc.get("pid") or 0)
    path = ((doc.get("runtimeSpec") or {}).get("linux") or {}).get("cgroupsPath") or ""
    if pid <= 0 or not path:
        raise ValueError("the runtime's info has no pid or cgroupsPath")
    return pid, str(path)


class Runtime:
    """The node's CRI runtime service."""

    def __init__(self, socket: str = SOCKETS["containerd"], timeout: float = 5.0) -> None:
        self.socket = socket
        self.timeout = timeout

    def _call(self, method: str, request: Any) -> Any:
        import grpc

        from .api import cri_pb2_grpc as rpc

        with grpc.insecure_channel(f"unix://{os.path.abspath(self.socket)}") as ch:
            try:
                return getattr(rpc.RuntimeServiceStub(ch), method)(request, timeout=self.timeout)
            except grpc.RpcError as e:
                raise Unreachable(f"CRI {method}: {e.code().name}: {e.details()}") from None

    def containers(self, holder: Holder) -> list[Container]:
        """The running container(s) of a holder (one, unless a restart is under way)."""
        from .api import cri_pb2 as pb

        labels = {
            LABEL_NAMESPACE: holder.namespace,
            LABEL_POD: holder.pod,
            LABEL_CONTAINER: holder.container,
        }
        flt = pb.ContainerFilter(
            state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING), label_selector=labels
        )
        listed = self._call("ListContainers", pb.ListContainersRequest(filter=flt))
        out = []
        for c in listed.containers:
            if any(c.labels.get(k) != v for k, v in labels.items()):
                continue  # a runtime that ignored the selector
            status = self._call(
                "ContainerStatus", pb.ContainerStatusRequest(container_id=c.id, verbose=True)
            )
            try:
                pid, path = parse_info(dict(status.info))
            except ValueError as e:
                raise Unreachable(f"container {c.id[:12]} of {holder}: {e}") from None
            out.append(Container(holder, c.id, pid, path))
        return out
