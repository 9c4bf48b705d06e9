"""The committed gRPC stubs and their one generator (generate.py): every set regenerates byte
for byte (less the generator's version lines) from its .proto, and the stubs speak the
kubelet's wire names and field numbers (the device plugin's v1beta1 and DRA's).

The DRA and plugin-registration stubs come from the kubelet's own api.proto files in the
k8s.io/kubelet Go module that scripts/build-harness downloads; without it the regeneration
test skips (fails under CI), like every test that needs the harness.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import pytest

from edgefd.devplugin.api import deviceplugin_pb2 as pb
from edgefd.devplugin.api import generate
from edgefd.devplugin.dra.api import dra_pb2, pluginregistration_pb2

ROOT = Path(__file__).resolve().parents[3]


def _normalise(text: str) -> list[str]:
    # the gencode version line is the only one that legitimately changes with the generator
    return [
        ln
        for ln in text.splitlines()
        if not ln.startswith("# Protobuf Python Version:") and "GRPC_GENERATED_VERSION" not in ln
    ]


def _source_or_skip(stubs: generate.StubSet) -> None:
    try:
        stubs.source()
    except generate.SourceMissing as e:
        if os.environ.get("CI"):
            pytest.fail(str(e), pytrace=False)
        pytest.skip(str(e))


def _every_set() -> tuple[generate.StubSet, ...]:
    """Every set the one generator knows: the device plugin's, DRA's and the keeper's."""
    return generate.STUB_SETS


@pytest.mark.parametrize("stubs", _every_set(), ids=lambda s: s.name)
def test_generated_stubs_are_reproducible(stubs: generate.StubSet, tmp_path: Path) -> None:
    _source_or_skip(stubs)
    generate.generate_set(stubs, tmp_path)
    for name in stubs.outputs:
        committed = (stubs.out_dir / name).read_text()
        fresh = (tmp_path / name).read_text()
        diff = list(
            difflib.unified_diff(_normalise(committed), _normalise(fresh), name, "regenerated")
        )
        assert not diff, "\n".join(diff[:40])


def test_every_committed_stub_belongs_to_a_set() -> None:
    """A stub module nobody regenerates would rot unnoticed."""
    known = {(s.out_dir / n).resolve() for s in _every_set() for n in s.outputs}
    found = {p.resolve() for p in (ROOT / "tools").rglob("*_pb2*.py")}
    assert found == known


def test_kubelet_version_is_the_harness_pin() -> None:
    """The stubs follow the kubelet the tests run: the version in tests/harness/go.mod."""
    gomod = (ROOT / "tests" / "harness" / "go.mod").read_text()
    pins = set(re.findall(r"^\s*k8s\.io/kubelet\s+(v\S+)", gomod, re.M))
    pins |= set(re.findall(r"k8s\.io/kubelet\s*=>\s*k8s\.io/kubelet\s+(v\S+)", gomod))
    assert pins == {generate.KUBELET_VERSION}


def test_missing_kubelet_module_is_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("EDGEFD_KUBELET_MODULE", str(tmp_path / "nowhere"))
    with pytest.raises(generate.SourceMissing, match="scripts/build-harness"):
        generate.by_name("dra").source()
    assert generate.main(["--only", "dra", str(tmp_path / "out")]) == 3


def test_dra_wire_names() -> None:
    """What the kubelet dials: full method names are made of the kubelet's proto packages."""
    svc = dra_pb2.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert svc.full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert [m.name for m in svc.methods] == ["NodePrepareResources", "NodeUnprepareResources"]
    reg = pluginregistration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert reg.full_name == "pluginregistration.Registration"
    assert [m.name for m in reg.methods] == ["GetInfo", "NotifyRegistrationStatus"]


def test_dra_wire_bytes() -> None:
    """Hand-encoded bytes, as the kubelet's Go code would write them, decode as expected."""
    # NodePrepareResourcesRequest{claims{namespace:"n", uid:"u", name:"c"}}
    raw = b"\x0a\x09\x0a\x01n\x12\x01u\x1a\x01c"
    req = dra_pb2.NodePrepareResourcesRequest.FromString(raw)
    assert (req.claims[0].namespace, req.claims[0].uid, req.claims[0].name) == ("n", "u", "c")
    # Device{request_names:"r", pool_name:"p", device_name:"d", cdi_device_ids:"k=x"}
    dev = dra_pb2.Device(
        request_names=["r"], pool_name="p", device_name="d", cdi_device_ids=["k=x"]
    )
    assert dev.SerializeToString() == b"\x0a\x01r\x12\x01p\x1a\x01d\x22\x03k=x"
    # PluginInfo{type:"DRAPlugin", name:"e", endpoint:"/s", supported_versions:"v1.DRAPlugin"}
    info = pluginregistration_pb2.PluginInfo(
        type="DRAPlugin", name="e", endpoint="/s", supported_versions=["v1.DRAPlugin"]
    )
    assert info.SerializeToString() == (b"\x0a\x09DRAPlugin\x12\x01e\x1a\x02/s\x22\x0cv1.DRAPlugin")
    status = pluginregistration_pb2.RegistrationStatus.FromString(b"\x08\x01\x12\x02no")
    assert status.plugin_registered and status.error == "no"


# --------------------------------------------------------------------------- v1beta1


def _fields(msg: type) -> dict[str, tuple[int, str]]:
    return {f.name: (f.number, f.json_name) for f in msg.DESCRIPTOR.fields}


def test_proto_field_numbers_match_the_kubelet_api() -> None:
    """The numbers and names the kubelet puts on the wire (REFERENCE §7)."""
    expect = {
        pb.DevicePluginOptions: {"pre_start_required": 1, "get_preferred_allocation_available": 2},
        pb.RegisterRequest: {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4},
        pb.ListAndWatchResponse: {"devices": 1},
        pb.Device: {"ID": 1, "health": 2, "topology": 3},
        pb.TopologyInfo: {"nodes": 1},
        pb.NUMANode: {"ID": 1},
        pb.ContainerPreferredAllocationRequest: {
            "available_deviceIDs": 1,
            "must_include_deviceIDs": 2,
            "allocation_size": 3,
        },
        pb.PreferredAllocationRequest: {"container_requests": 1},
        pb.PreferredAllocationResponse: {"container_responses": 1},
        pb.ContainerPreferredAllocationResponse: {"deviceIDs": 1},
        pb.AllocateRequest: {"container_requests": 1},
        pb.ContainerAllocateRequest: {"devices_ids": 1},
        pb.AllocateResponse: {"container_responses": 1},
        pb.ContainerAllocateResponse: {
            "envs": 1,
            "mounts": 2,
            "devices": 3,
            "annotations": 4,
            "cdi_devices": 5,
        },
        pb.Mount: {"container_path": 1, "host_path": 2, "read_only": 3},
        pb.DeviceSpec: {"container_path": 1, "host_path": 2, "permissions": 3},
        pb.CDIDevice: {"name": 1},
        pb.PreStartContainerRequest: {"devices_ids": 1},
    }
    for msg, fields in expect.items():
        assert {k: v[0] for k, v in _fields(msg).items()} == fields, msg.__name__
    assert pb.DESCRIPTOR.package == "v1beta1"
    svc = pb.DESCRIPTOR.services_by_name["DevicePlugin"]
    assert [m.name for m in svc.methods] == [
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    ]
    law = svc.methods_by_name["ListAndWatch"]
    assert law.server_streaming and not law.client_streaming
    assert not svc.methods_by_name["Allocate"].server_streaming
    assert [m.name for m in pb.DESCRIPTOR.services_by_name["Registration"].methods] == ["Register"]


def test_proto_wire_bytes() -> None:
    """Hand-encoded bytes, as the kubelet's Go code would write them, decode as expected."""
    # Device{ID:"a", health:"Healthy", topology{nodes{ID:1}}}
    raw = b"\x0a\x01a\x12\x07Healthy\x1a\x04\x0a\x02\x08\x01"
    d = pb.Device.FromString(raw)
    assert (d.ID, d.health, d.topology.nodes[0].ID) == ("a", "Healthy", 1)
    assert d.SerializeToString() == raw
    # ContainerAllocateResponse{cdi_devices{name:"v/c=x"}, devices{host_path:"/h"}}
    r = pb.ContainerAllocateResponse(
        devices=[pb.DeviceSpec(host_path="/h")], cdi_devices=[pb.CDIDevice(name="v/c=x")]
    )
    assert r.SerializeToString() == b"\x1a\x04\x12\x02/h" + b"\x2a\x07\x0a\x05v/c=x"
    rt = pb.AllocateResponse(container_responses=[r])
    assert pb.AllocateResponse.FromString(rt.SerializeToString()) == rt
