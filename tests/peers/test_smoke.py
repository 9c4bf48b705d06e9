"""Smoke tests of the real-peer harness (tests/peers/): a real kube-apiserver
and the kubelet's own device-manager code, with a tiny device plugin written here.

The device plugin's messages come from a v1beta1 proto subset written below and
compiled at test time with grpc_tools.protoc. Its proto package is not
``v1beta1`` (so it never clashes with the product's generated modules in the
same process); the gRPC method paths, which are all that reach the wire, are
the real ``/v1beta1.Registration/...`` and ``/v1beta1.DevicePlugin/...``.
"""

from __future__ import annotations

import importlib
import os
import queue
import sys
import threading
import time
import uuid
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

from tests.peers.apiserver import KubeAPIServer
from tests.peers.kubelet import KubeletDevices
from tests.peers.pki import decode_jwt

pytestmark = pytest.mark.realpeer

DP_PROTO = """
syntax = "proto3";
package edgefd_harness_dp;

message Empty {}
message DevicePluginOptions {
  bool pre_start_required = 1;
  bool get_preferred_allocation_available = 2;
}
message RegisterRequest {
  string version = 1;
  string endpoint = 2;
  string resource_name = 3;
  DevicePluginOptions options = 4;
}
message NUMANode { int64 ID = 1; }
message TopologyInfo { repeated NUMANode nodes = 1; }
message Device {
  string ID = 1;
  string health = 2;
  TopologyInfo topology = 3;
}
message ListAndWatchResponse { repeated Device devices = 1; }
message ContainerPreferredAllocationRequest {
  repeated string available_deviceIDs = 1;
  repeated string must_include_deviceIDs = 2;
  int32 allocation_size = 3;
}
message PreferredAllocationRequest {
  repeated ContainerPreferredAllocationRequest container_requests = 1;
}
message ContainerPreferredAllocationResponse { repeated string deviceIDs = 1; }
message PreferredAllocationResponse {
  repeated ContainerPreferredAllocationResponse container_responses = 1;
}
message ContainerAllocateRequest { repeated string devices_ids = 1; }
message AllocateRequest { repeated ContainerAllocateRequest container_requests = 1; }
message Mount {
  string container_path = 1;
  string host_path = 2;
  bool read_only = 3;
}
message DeviceSpec {
  string container_path = 1;
  string host_path = 2;
  string permissions = 3;
}
message CDIDevice { string name = 1; }
message ContainerAllocateResponse {
  map<string, string> envs = 1;
  repeated Mount mounts = 2;
  repeated DeviceSpec devices = 3;
  map<string, string> annotations = 4;
  repeated CDIDevice cdi_devices = 5;
}
message AllocateResponse { repeated ContainerAllocateResponse container_responses = 1; }
message PreStartContainerRequest { repeated string devices_ids = 1; }
message PreStartContainerResponse {}
"""

RESOURCE = "edgefd.test/widget"


# --------------------------------------------------------------------------- apiserver


def test_apiserver_answers(kube_apiserver: KubeAPIServer) -> None:
    from kubernetes import client

    assert kube_apiserver.ready()
    with kube_apiserver.admin_api() as api:
        assert client.VersionApi(api).get_code().major == "1"
        groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    versions = {v.version for v in groups["admissionregistration.k8s.io"].versions}
    assert "v1" in versions


def test_node_can_be_created_and_labelled(kube_apiserver: KubeAPIServer, node_name: str) -> None:
    from kubernetes import client

    kube_apiserver.create_node(node_name, labels={"edgefd.test/initial": "yes"})
    with kube_apiserver.admin_api() as api:
        core = client.CoreV1Api(api)
        core.patch_node(node_name, {"metadata": {"labels": {"feature.node.kubernetes.io/x": "1"}}})
        labels = core.read_node(node_name).metadata.labels
    assert labels["edgefd.test/initial"] == "yes"
    assert labels["feature.node.kubernetes.io/x"] == "1"


def test_rbac_refuses_a_service_account_without_bindings(
    kube_apiserver: KubeAPIServer, node_name: str
) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    kube_apiserver.create_node(node_name)
    token = kube_apiserver.mint_token("smoke-rbac", "nobody")
    with kube_apiserver.api_for_token(token) as api:
        core = client.CoreV1Api(api)
        with pytest.raises(ApiException) as e:
            core.patch_node(node_name, {"metadata": {"labels": {"a.test/b": "c"}}})
        assert e.value.status == 403
        with pytest.raises(ApiException) as e:
            core.list_node()
        assert e.value.status == 403
        # authenticated, though: the identity is the service account.
        review = client.AuthenticationV1Api(api).create_self_subject_review(
            client.V1SelfSubjectReview()
        )
    assert review.status.user_info.username == "system:serviceaccount:smoke-rbac:nobody"


def test_pod_bound_token_carries_the_node(kube_apiserver: KubeAPIServer, node_name: str) -> None:
    from kubernetes import client

    token = kube_apiserver.mint_pod_token("smoke-pod", "agent", "agent-pod", node_name)
    claims = decode_jwt(token)["kubernetes.io"]
    assert claims["node"]["name"] == node_name
    assert claims["pod"]["name"] == "agent-pod"
    node_uid = kube_apiserver.get_node(node_name).metadata.uid
    assert claims["node"]["uid"] == node_uid
    with kube_apiserver.api_for_token(token) as api:
        review = client.AuthenticationV1Api(api).create_self_subject_review(
            client.V1SelfSubjectReview()
        )
    extra = review.status.user_info.extra or {}
    assert extra.get("authentication.kubernetes.io/node-name") == [node_name]


def test_apiserver_restarts_on_the_same_port(kube_apiserver: KubeAPIServer, node_name: str) -> None:
    kube_apiserver.create_node(node_name)
    url = kube_apiserver.url
    kube_apiserver.stop_apiserver()
    assert not kube_apiserver.ready()
    kube_apiserver.start_apiserver()
    assert kube_apiserver.url == url and kube_apiserver.ready()
    assert kube_apiserver.get_node(node_name).metadata.name == node_name  # etcd kept it


# --------------------------------------------------------------------------- device plugin


@pytest.fixture(scope="module")
def dp(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The proto subset compiled with grpc_tools.protoc; returns the _pb2 module."""
    import grpc_tools  # a test dependency (setup.cfg [test]); never skip on its absence
    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("dp_proto")
    name = f"edgefd_harness_dp_{uuid.uuid4().hex[:6]}"
    (out / f"{name}.proto").write_text(DP_PROTO)
    include = Path(grpc_tools.__file__).parent / "_proto"
    rc = protoc.main(
        ["protoc", f"-I{out}", f"-I{include}", f"--python_out={out}", str(out / f"{name}.proto")]
    )
    assert rc == 0, "protoc failed"
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module(f"{name}_pb2")
    finally:
        sys.path.remove(str(out))


class MiniPlugin:
    """A minimal device plugin over grpcio, for exercising the harness."""

    def __init__(self, pb: Any, plugin_dir: str, devices: dict[str, str], name: str = "mini"):
        self.pb = pb
        self.plugin_dir = plugin_dir
        self.endpoint = f"{name}-{uuid.uuid4().hex[:6]}.sock"
        self.socket = os.path.join(plugin_dir, self.endpoint)
        self.devices = dict(devices)
        self.updates: queue.Queue = queue.Queue()
        self.calls: list[tuple[str, Any]] = []
        self._stop = threading.Event()
        self.server: Any = None

    # -- DevicePlugin service
    def _options(self, req: Any, ctx: Any) -> Any:
        self.calls.append(("GetDevicePluginOptions", None))
        return self.pb.DevicePluginOptions(get_preferred_allocation_available=True)

    def _device_list(self) -> Any:
        return self.pb.ListAndWatchResponse(
            devices=[self.pb.Device(ID=i, health=h) for i, h in sorted(self.devices.items())]
        )

    def _list_and_watch(self, req: Any, ctx: Any) -> Any:
        self.calls.append(("ListAndWatch", None))
        yield self._device_list()
        while ctx.is_active() and not self._stop.is_set():
            try:
                self.updates.get(timeout=0.1)
            except queue.Empty:
                continue
            yield self._device_list()

    def _preferred(self, req: Any, ctx: Any) -> Any:
        cr = req.container_requests[0]
        self.calls.append(("GetPreferredAllocation", list(cr.available_deviceIDs)))
        # Prefer the highest IDs, so a test can tell the kubelet asked.
        must = list(cr.must_include_deviceIDs)
        rest = sorted((d for d in cr.available_deviceIDs if d not in must), reverse=True)
        pick = (must + rest)[: cr.allocation_size]
        return self.pb.PreferredAllocationResponse(
            container_responses=[self.pb.ContainerPreferredAllocationResponse(deviceIDs=pick)]
        )

    def _allocate(self, req: Any, ctx: Any) -> Any:
        out = []
        for cr in req.container_requests:
            ids = sorted(cr.devices_ids)
            self.calls.append(("Allocate", ids))
            out.append(
                self.pb.ContainerAllocateResponse(
                    envs={"WIDGETS": ",".join(ids)},
                    devices=[
                        self.pb.DeviceSpec(
                            container_path=f"/dev/{i}", host_path=f"/dev/{i}", permissions="rw"
                        )
                        for i in ids
                    ],
                    mounts=[
                        self.pb.Mount(container_path="/opt/w", host_path="/opt/w", read_only=True)
                    ],
                    annotations={"edgefd.test/ids": ",".join(ids)},
                    cdi_devices=[self.pb.CDIDevice(name=f"edgefd.test/widget={i}") for i in ids],
                )
            )
        return self.pb.AllocateResponse(container_responses=out)

    def _prestart(self, req: Any, ctx: Any) -> Any:
        return self.pb.PreStartContainerResponse()

    def serve(self) -> MiniPlugin:
        import grpc

        pb = self.pb

        def unary(fn: Any, req: Any, resp: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString
            )

        handler = grpc.method_handlers_generic_handler(
            "v1beta1.DevicePlugin",
            {
                "GetDevicePluginOptions": unary(self._options, pb.Empty, pb.DevicePluginOptions),
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    self._list_and_watch,
                    request_deserializer=pb.Empty.FromString,
                    response_serializer=pb.ListAndWatchResponse.SerializeToString,
                ),
                "GetPreferredAllocation": unary(
                    self._preferred, pb.PreferredAllocationRequest, pb.PreferredAllocationResponse
                ),
                "Allocate": unary(self._allocate, pb.AllocateRequest, pb.AllocateResponse),
                "PreStartContainer": unary(
                    self._prestart, pb.PreStartContainerRequest, pb.PreStartContainerResponse
                ),
            },
        )
        self._stop.clear()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port(f"unix://{self.socket}")
        self.server.start()
        return self

    def register(self, resource: str = RESOURCE, version: str = "v1beta1") -> None:
        import grpc

        pb = self.pb
        kubelet = os.path.join(self.plugin_dir, "kubelet.sock")
        with grpc.insecure_channel(f"unix://{kubelet}") as ch:
            register = ch.unary_unary(
                "/v1beta1.Registration/Register",
                request_serializer=pb.RegisterRequest.SerializeToString,
                response_deserializer=pb.Empty.FromString,
            )
            register(
                pb.RegisterRequest(
                    version=version,
                    endpoint=self.endpoint,
                    resource_name=resource,
                    options=pb.DevicePluginOptions(get_preferred_allocation_available=True),
                ),
                timeout=15,
            )

    def set_devices(self, devices: dict[str, str]) -> None:
        self.devices = dict(devices)
        self.updates.put(True)

    def stop(self) -> None:
        self._stop.set()
        if self.server is not None:
            self.server.stop(grace=None)
            self.server = None


@pytest.fixture
def mini_plugin(dp: Any, kubelet_devices: KubeletDevices) -> Any:
    plugins: list[MiniPlugin] = []

    def make(devices: dict[str, str], name: str = "mini") -> MiniPlugin:
        p = MiniPlugin(dp, kubelet_devices.plugin_dir, devices, name).serve()
        plugins.append(p)
        return p

    yield make
    for p in plugins:
        p.stop()


DEVICES = {"w0": "Healthy", "w1": "Healthy", "w2": "Healthy", "w3": "Unhealthy"}


def test_plugin_registers_and_devices_become_capacity(
    kubelet_devices: KubeletDevices, mini_plugin: Any
) -> None:
    kd = kubelet_devices
    p = mini_plugin(DEVICES)
    p.register()
    reg = kd.wait_for("registered", resource=RESOURCE)
    assert reg["endpoint"] == p.endpoint
    assert reg["options"]["get_preferred_allocation_available"] is True
    devs = kd.wait_for("devices", resource=RESOURCE)
    assert devs["healthy"] == ["w0", "w1", "w2"] and devs["unhealthy"] == ["w3"]
    cap = kd.wait_for("capacity", resource=RESOURCE)
    assert (cap["capacity"], cap["allocatable"]) == (4, 3)
    assert kd.capacity()["allocatable"] == {RESOURCE: 3}

    # Every ListAndWatch message replaces the whole list.
    mark = kd.mark()
    p.set_devices({"w0": "Healthy", "w1": "Unhealthy"})
    cap = kd.wait_for("capacity", since=mark, resource=RESOURCE)
    assert (cap["capacity"], cap["allocatable"]) == (2, 1)


def test_registration_is_validated_by_the_kubelet_code(
    kubelet_devices: KubeletDevices, mini_plugin: Any
) -> None:
    import grpc

    p = mini_plugin(DEVICES)
    with pytest.raises(grpc.RpcError) as e:
        p.register(resource="widget")  # no domain: not an extended resource name
    assert "invalid" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        p.register(version="v1alpha1")
    assert "not supported" in e.value.details()
    # The kubelet's own log line surfaces as an "error" event.
    err = kubelet_devices.wait_for(
        lambda e: e["event"] == "error" and "registration request" in e.get("msg", "")
    )
    assert "widget" in err["error"] or "v1alpha1" in err["error"]
    assert not kubelet_devices.events_named("registered")


def test_allocate_reaches_the_plugin_and_comes_back(
    kubelet_devices: KubeletDevices, mini_plugin: Any
) -> None:
    kd = kubelet_devices
    p = mini_plugin(DEVICES)
    p.register()
    kd.wait_for("capacity", resource=RESOURCE)

    r = kd.allocate(RESOURCE, count=2)
    assert r["ok"], r
    # The kubelet asked for a preference (the plugin offers it) and honoured it.
    assert ("GetPreferredAllocation", ["w0", "w1", "w2"]) in [
        (n, sorted(a)) for n, a in p.calls if n == "GetPreferredAllocation"
    ]
    assert r["device_ids"] == ["w1", "w2"]
    assert ("Allocate", ["w1", "w2"]) in p.calls
    assert r["envs"] == {"WIDGETS": "w1,w2"}
    assert r["annotations"] == {"edgefd.test/ids": "w1,w2"}
    assert [d["host_path"] for d in r["devices"]] == ["/dev/w1", "/dev/w2"]
    assert r["mounts"][0]["read_only"] is True
    assert [c["name"] for c in r["cdi_devices"]] == [
        "edgefd.test/widget=w1",
        "edgefd.test/widget=w2",
    ]

    # Held devices are not handed out twice; only w0 is left.
    r2 = kd.allocate(RESOURCE, count=2)
    assert not r2["ok"]
    r3 = kd.allocate(RESOURCE, count=1)
    assert r3["ok"] and r3["device_ids"] == ["w0"]

    # Explicit IDs go straight to the plugin on the kubelet's connection.
    r4 = kd.allocate(RESOURCE, devices=["w3"])
    assert r4["ok"] and r4["direct"] and r4["envs"] == {"WIDGETS": "w3"}

    pref = kd.preferred(RESOURCE, size=1, available=["w0", "w2"])
    assert pref["ok"] and pref["device_ids"] == ["w2"]


def test_restart_deletes_plugin_sockets_and_recreates_kubelet_sock(
    kubelet_devices: KubeletDevices, mini_plugin: Any
) -> None:
    kd = kubelet_devices
    p = mini_plugin(DEVICES)
    p.register()
    kd.wait_for("capacity", resource=RESOURCE)
    assert os.path.exists(p.socket)
    first_ready = kd.events_named("ready")[-1]

    mark = kd.mark()
    ready = kd.restart()
    assert ready["restarts"] == 1 and ready["ts"] > first_ready["ts"]
    assert abs(ready["ts"] - time.monotonic()) < 30  # the clock of time.monotonic()
    kd.wait_for("disconnected", since=mark, resource=RESOURCE)
    assert not os.path.exists(p.socket), "the kubelet start must delete plugin sockets"
    assert os.path.exists(kd.kubelet_socket)

    # The plugin must come back by itself: serve again, register again.
    p.stop()
    p.serve()
    p.register()
    kd.wait_for("registered", since=mark, resource=RESOURCE)
    cap = kd.wait_for("capacity", since=mark, resource=RESOURCE, allocatable=3)
    assert cap["capacity"] == 4
    assert kd.allocate(RESOURCE, count=1)["ok"]


def test_stop_removes_kubelet_sock(kubelet_devices: KubeletDevices) -> None:
    kd = kubelet_devices
    assert os.path.exists(kd.kubelet_socket)
    kd.stop()
    deadline = time.monotonic() + 5
    while os.path.exists(kd.kubelet_socket) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(kd.kubelet_socket)


# --------------------------------------------------------------------------- nfd-worker


def test_nfd_worker_labels_a_fixture_host_root(nfd_worker: Any, tmp_path: Path) -> None:
    def put(rel: str, text: str) -> None:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")

    # A Coral USB Accelerator before firmware load (class 00, interface fe) ...
    usb = "sys/bus/usb/devices/2-1"
    put(f"{usb}/idVendor", "1a6e")
    put(f"{usb}/idProduct", "089a")
    put(f"{usb}/bDeviceClass", "00")
    put(f"{usb}/2-1:1.0/bInterfaceClass", "fe")
    # ... and a PCI display controller.
    pci = "sys/bus/pci/devices/0000:01:00.0"
    for attr, value in {
        "class": "0x030200",
        "vendor": "0x10de",
        "device": "0x1eb8",
        "subsystem_vendor": "0x10de",
        "subsystem_device": "0x12a2",
    }.items():
        put(f"{pci}/{attr}", value)

    labels = nfd_worker.run(tmp_path)
    assert labels == {
        "feature.node.kubernetes.io/usb-fe_1a6e_089a.present": "true",
        "feature.node.kubernetes.io/pci-0302_10de.present": "true",
    }
