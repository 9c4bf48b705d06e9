"""Who holds a device, from the kubelet's pod-resources answer; and the CRI lookup of the
running container. The clients are exercised here against in-process gRPC servers built from
the same stubs (a unit test); the real kubelet and containerd are the e2e node's check 6k."""

from __future__ import annotations

import json
from concurrent import futures

import grpc
import pytest

from edgefd.core.errors import Unreachable
from edgefd.device_keeper.api import cri_pb2 as cri
from edgefd.device_keeper.api import cri_pb2_grpc as cri_rpc
from edgefd.device_keeper.api import podresources_pb2 as pr
from edgefd.device_keeper.api import podresources_pb2_grpc as pr_rpc
from edgefd.device_keeper.containers import Container, Runtime, parse_info
from edgefd.device_keeper.holders import DeviceRef, Holder, holders
from edgefd.device_keeper.podresources import PodResources

CORAL = DeviceRef(
    "coral-usb-1-1-3",
    plugin=frozenset({("edgefd.io/coral-usb", "usb-1-1.3")}),
    dra=frozenset({("edgefd.io", "node1", "usb-1-1-3")}),
)


def _pod(ns, name, containers):
    return pr.PodResources(namespace=ns, name=name, containers=containers)


def _plugin(name, resource, *ids):
    return pr.ContainerResources(
        name=name, devices=[pr.ContainerDevices(resource_name=resource, device_ids=list(ids))]
    )


def _dra(name, driver, pool, device):
    res = pr.ClaimResource(
        driver_name=driver,
        pool_name=pool,
        device_name=device,
        cdi_devices=[pr.CDIDevice(name=f"edgefd.io/claim=uid-{device}")],
    )
    claim = pr.DynamicResource(claim_name="tpu", claim_namespace="ns", claim_resources=[res])
    return pr.ContainerResources(name=name, dynamic_resources=[claim])


SIDECAR = pr.ContainerResources(name="side")  # same pod, no device
PODS = [
    _pod("ns", "detector", [_plugin("app", "edgefd.io/coral-usb", "usb-1-1.3")]),
    _pod("ns", "shared", [_plugin("a", "edgefd.io/coral-usb", "usb-1-1.3-r1")]),
    _pod("ns", "dra", [_dra("app", "edgefd.io", "node1", "usb-1-1-3"), SIDECAR]),
    _pod("ns", "other-port", [_plugin("app", "edgefd.io/coral-usb", "usb-1-1.4")]),
    _pod("ns", "other-resource", [_plugin("app", "edgefd.io/ncs2", "usb-1-1.3")]),
    _pod("ns", "other-pool", [_dra("app", "edgefd.io", "node2", "usb-1-1-3")]),
    _pod("ns", "other-driver", [_dra("app", "gpu.example.com", "node1", "usb-1-1-3")]),
    _pod("ns", "lookalike", [_plugin("app", "edgefd.io/coral-usb", "usb-1-1.3-rx")]),
]  # fmt: skip


def test_exactly_the_holders_through_either_api():
    assert holders(PODS, CORAL) == [
        Holder("ns", "detector", "app", "device-plugin"),
        Holder("ns", "dra", "app", "dra"),
        Holder("ns", "shared", "a", "device-plugin"),
    ]


def test_nobody_holds_an_unknown_device():
    assert holders(PODS, DeviceRef("ncs2-1-2")) == []


@pytest.fixture
def serve(tmp_path):
    servers = []

    def start(add, servicer) -> str:
        sock = tmp_path / f"s{len(servers)}.sock"
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        add(servicer, server)
        server.add_insecure_port(f"unix://{sock}")
        server.start()
        servers.append(server)
        return str(sock)

    yield start
    for s in servers:
        s.stop(0)


class FakeKubelet(pr_rpc.PodResourcesListerServicer):
    def List(self, request, context):
        return pr.ListPodResourcesResponse(pod_resources=PODS)


def test_pod_resources_list(serve):
    sock = serve(pr_rpc.add_PodResourcesListerServicer_to_server, FakeKubelet())
    assert holders(PodResources(sock).list(), CORAL)[0].pod == "detector"


def test_pod_resources_unreachable(tmp_path):
    with pytest.raises(Unreachable, match="no pod-resources socket"):
        PodResources(str(tmp_path / "none.sock")).list()


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
