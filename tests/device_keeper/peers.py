"""The keeper's two peers for tests of the command: the kubelet's pod-resources service and
the runtime's CRI, as in-process gRPC servers from the same stubs (the real ones: the e2e
node's check 6k)."""

from __future__ import annotations

import json


def peers(serve, tmp_path, made, resource="edgefd.io/coral-usb"):
    """The kubelet (every pod of `made` holding the Coral) and the runtime (each pod's
    stand-in container, given 189:4 at the device's path) as in-process gRPC servers from the
    same stubs: (kubelet dir, CRI socket)."""
    import os

    from edgefd.device_keeper.api import cri_pb2 as cri
    from edgefd.device_keeper.api import cri_pb2_grpc as cri_rpc
    from edgefd.device_keeper.api import podresources_pb2 as pr
    from edgefd.device_keeper.api import podresources_pb2_grpc as pr_rpc

    from .pods import NAME, PATH, plugin, pod

    class Kubelet(pr_rpc.PodResourcesListerServicer):
        def List(self, request, context):
            pods = [pod("ns", p, [plugin("app", resource, NAME)]) for p in made]
            return pr.ListPodResourcesResponse(pod_resources=pods)

    class Runtime(cri_rpc.RuntimeServiceServicer):
        def ListContainers(self, request, context):
            labels = dict(request.filter.label_selector)
            c = cri.Container(id=labels["io.kubernetes.pod.name"], labels=labels, state=0)
            return cri.ListContainersResponse(containers=[c])

        def ContainerStatus(self, request, context):
            cg, proc = made[request.container_id]
            devices = [{"path": PATH, "type": "c", "major": 189, "minor": 4}]
            spec = {"linux": {"cgroupsPath": f"/{cg.name}", "devices": devices}}
            doc = {"pid": proc.pid, "runtimeSpec": spec}
            return cri.ContainerStatusResponse(info={"info": json.dumps(doc)})

    kubelet_dir = tmp_path / "kubelet"
    (kubelet_dir / "pod-resources").mkdir(parents=True)
    sock = serve(pr_rpc.add_PodResourcesListerServicer_to_server, Kubelet())
    os.symlink(sock, kubelet_dir / "pod-resources" / "kubelet.sock")
    cri_sock = serve(cri_rpc.add_RuntimeServiceServicer_to_server, Runtime())
    return kubelet_dir, cri_sock
