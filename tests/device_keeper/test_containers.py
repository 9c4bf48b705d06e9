"""From a holder to its running container through the CRI: the client against an in-process
gRPC server built from the same stubs (a unit test; the real containerd is the e2e node's
check 6k), the runtime's `info` (containerd's and CRI-O's shapes), the systemd cgroup driver
told apart, and where a container's device rules live (v1 and/or v2)."""

from __future__ import annotations

import json

import pytest

from edgefd.device_keeper.api import cri_pb2 as cri
from edgefd.device_keeper.api import cri_pb2_grpc as cri_rpc
from edgefd.device_keeper.containers import Container, Runtime, parse_info
from edgefd.device_keeper.holders import Holder


def _info(pid, path):
    return {"info": json.dumps({"pid": pid, "runtimeSpec": {"linux": {"cgroupsPath": path}}})}


class FakeRuntime(cri_rpc.RuntimeServiceServicer):
    def __init__(self):
        self.requests = []

    def ListContainers(self, request, context):
        self.requests.append(request)
        labels = {
            "io.kubernetes.pod.namespace": "ns",
            "io.kubernetes.pod.name": "detector",
            "io.kubernetes.container.name": "app",
        }
        return cri.ListContainersResponse(
            containers=[
                cri.Container(id="abc123def4567", labels=labels, state=cri.CONTAINER_RUNNING),
                cri.Container(id="other", labels={**labels, "io.kubernetes.pod.name": "x"}),
            ]
        )

    def ContainerStatus(self, request, context):
        return cri.ContainerStatusResponse(info=_info(4242, "/kubepods/besteffort/pod1/abc"))


def test_runtime_finds_the_running_container_by_the_kubelet_labels(serve):
    fake = FakeRuntime()
    sock = serve(cri_rpc.add_RuntimeServiceServicer_to_server, fake)
    holder = Holder("ns", "detector", "app", "device-plugin")
    found = Runtime(sock).containers(holder)
    assert found == [Container(holder, "abc123def4567", 4242, "/kubepods/besteffort/pod1/abc")]
    flt = fake.requests[0].filter
    assert flt.state.state == cri.CONTAINER_RUNNING
    assert dict(flt.label_selector)["io.kubernetes.pod.name"] == "detector"


@pytest.mark.parametrize(
    "info",
    [
        {},
        {"info": json.dumps({"pid": 0, "runtimeSpec": {"linux": {"cgroupsPath": "/a"}}})},
        {"info": json.dumps({"pid": 7})},
    ],
)
def test_info_without_pid_or_cgroup_path_is_refused(info):
    with pytest.raises(ValueError):
        parse_info(info)


def test_crio_and_containerd_info_shapes():
    # both put pid and runtimeSpec at the top of the "info" JSON
    assert parse_info(_info(9, "/kubepods/pod1/crio-x")) == (9, "/kubepods/pod1/crio-x")


def test_systemd_driver_and_cgroup_dirs(tmp_path):
    h = Holder("ns", "p", "c", "dra")
    assert Container(h, "x", 1, "kubepods-besteffort-pod1.slice:cri-containerd:x").systemd
    c = Container(h, "x", 1, "/kubepods/besteffort/pod1/x")
    assert not c.systemd
    (tmp_path / "devices/kubepods/besteffort/pod1/x").mkdir(parents=True)
    (tmp_path / "devices/kubepods/besteffort/pod1/x/devices.list").write_text("a *:* rwm\n")
    (tmp_path / "unified/kubepods/besteffort/pod1/x").mkdir(parents=True)
    (tmp_path / "unified/cgroup.controllers").write_text("")
    assert c.cgroup_dirs(str(tmp_path)) == [
        str(tmp_path / "devices/kubepods/besteffort/pod1/x"),
        str(tmp_path / "unified/kubepods/besteffort/pod1/x"),
    ]
