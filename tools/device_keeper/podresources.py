"""The kubelet's pod-resources API v1, `List`: every pod's containers with their devices.

The socket is `<kubelet-dir>/pod-resources/kubelet.sock`; the keeper's container mounts that
directory read-only (a read-only mount does not stop connecting to a socket). Device-plugin
devices are always listed; DRA devices (`dynamic_resources`) need the kubelet feature gate
`KubeletPodResourcesDynamicResources` (on by default since 1.34, GA and locked on since 1.36).
"""

from __future__ import annotations

import os
from typing import Any

from edgefd.core.errors import Unreachable

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


class PodResources:
    def __init__(self, socket: str = DEFAULT_SOCKET, timeout: float = 5.0) -> None:
        self.socket = socket
        self.timeout = timeout

    def list(self) -> list[Any]:
        """The PodResources messages of every pod on the node."""
        import grpc

        from .api import podresources_pb2 as pb
        from .api import podresources_pb2_grpc as rpc

        if not os.path.exists(self.socket):
            raise Unreachable(f"{self.socket}: no pod-resources socket (is the kubelet running?)")
        with grpc.insecure_channel(f"unix://{os.path.abspath(self.socket)}") as ch:
            try:
                resp = rpc.PodResourcesListerStub(ch).List(
                    pb.ListPodResourcesRequest(), timeout=self.timeout
                )
            except grpc.RpcError as e:
                raise Unreachable(f"pod-resources List: {e.code().name}: {e.details()}") from None
        return list(resp.pod_resources)
