"""`devplugin --api dra` against the real kube-apiserver and kube-scheduler (tests/peers).

* The sample nodes' ResourceSlices, read back from the API server, say what their hardware is,
  attribute for attribute (tests/devplugin/dra/hardware.py derives it from the descriptions).
* The real scheduler allocates a claim for `edgetpu.edgefd.io` with a CEL selector on `port` to
  that port's Coral, leaves an impossible claim unallocated, and does not give out an
  unplugged (tainted) device until it is back; the allocated claim is then prepared through
  the plugin's DRA socket, as the kubelet does it, into a CDI spec naming that Coral.
* Hot-plug reaches the slice within a second (generation +1); an idle plugin, a restarted one
  and a crashed one write nothing; a slice deleted by someone else (a starting kubelet) is back
  within a second; a clean shutdown deletes the slices only if no claim is prepared.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from edgefd.devplugin.dra.api import dra_pb2 as dra
from edgefd.devplugin.dra.api import dra_pb2_grpc as dra_grpc
from tests.devplugin.dra.hardware import expected_devices
from tests.devplugin.dra.peer import (
    HOTPLUG_S,
    NAMESPACE,
    Api,
    allocation,
    claim,
    pod,
    start,
)
from tests.fixturegen import HostBuilder, build_host
from tests.helpers import wait_until

pytestmark = pytest.mark.realpeer

IDLE_S = 3.0
UNSCHEDULABLE_GRACE_S = 5.0
SECOND_CORAL = {"port": "2-2", "vendor": "18d1", "product": "9302", "devnum": 9}


def generation(api: Api, node: str) -> int:
    [s] = api.slices(node)
    return s["spec"]["pool"]["generation"]


# -- what the slices say


@pytest.mark.parametrize("sample", ["rpi4-coral", "rpi4-coral-runtime", "x86-server"])
def test_slices_match_the_hardware(
    api: Api, node: str, plugins: list, tmp_path: Path, sample: str
) -> None:
    host = build_host(sample, tmp_path / "host", devicetree=False)
    start(plugins, api, host, node)
    [s] = api.slices(node)
    assert s["metadata"]["name"] == f"{node}-edgefd.io-0"
    spec = s["spec"]
    assert (spec["driver"], spec["nodeName"]) == ("edgefd.io", node)
    assert spec["pool"] == {"name": node, "generation": 1, "resourceSliceCount": 1}
    got = {d["name"]: d["attributes"] for d in spec["devices"]}
    assert got == expected_devices(sample)
    assert not any("taints" in d for d in spec["devices"])


@pytest.mark.parametrize(
    "serial", ["é".encode() * 40, b"\xff" * 30], ids=["multi-byte", "undecodable"]
)
def test_one_devices_serial_never_takes_the_others_out(
    api: Api, node: str, plugins: list, tmp_path: Path, serial: bytes
) -> None:
    # under 64 characters, over the API's 64 bytes (undecodable bytes become U+FFFD, 3 each)
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    (host / "sys/bus/usb/devices/1-1.1/serial").write_bytes(serial + b"\n")
    p = start(plugins, api, host, node)
    got = {d["name"]: d["attributes"] for d in api.slices(node)[0]["spec"]["devices"]}
    want = expected_devices("rpi4-coral")
    assert set(got) == set(want) == {"ncs2-1-1-1", "coral-usb-2-1"}
    assert got["coral-usb-2-1"] == want["coral-usb-2-1"]
    assert got["ncs2-1-1-1"] == {k: v for k, v in want["ncs2-1-1-1"].items() if k != "serial"}
    assert "ncs2-1-1-1: attribute serial is" in p.stderr()


# -- the real scheduler


def pod_status(api: Api, name: str) -> dict[str, Any]:
    return api.req("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")


def port_is(port: str) -> str:
    return f'device.attributes["edgefd.io"].port == "{port}"'


def test_the_scheduler_allocates_by_port_and_the_plugin_prepares_it(
    api: Api, node: str, plugins: list, tmp_path: Path
) -> None:
    host = build_host("rpi4-coral-runtime", tmp_path / "host", devicetree=False)
    HostBuilder(host).add_usb(SECOND_CORAL)
    p = start(plugins, api, host, node)
    wait_until(lambda: {"coral-usb-2-1", "coral-usb-2-2"} <= set(api.devices(node)), 5)
    tag = uuid.uuid4().hex[:6]
    # the second Coral by its port, although coral-usb-2-1 sorts first
    claim(api, f"port-{tag}", port_is("2-2"))
    pod(api, f"port-{tag}", f"port-{tag}", node)
    claim(api, f"none-{tag}", port_is("9-9"))
    pod(api, f"none-{tag}", f"none-{tag}", node)
    results = wait_until(lambda: allocation(api, f"port-{tag}"), 30, 0.1, "the allocation")
    assert [(r["driver"], r["pool"], r["device"], r["request"]) for r in results] == [
        ("edgefd.io", node, "coral-usb-2-2", "tpu")
    ]
    wait_until(lambda: pod_status(api, f"port-{tag}")["spec"].get("nodeName") == node, 10)
    # the impossible claim stays unallocated and its pod unschedulable
    time.sleep(UNSCHEDULABLE_GRACE_S)
    assert allocation(api, f"none-{tag}") is None
    st = pod_status(api, f"none-{tag}")
    assert not st["spec"].get("nodeName")
    cond = [c for c in st["status"].get("conditions", ()) if c["type"] == "PodScheduled"]
    assert cond and cond[0]["status"] == "False" and cond[0]["reason"] == "Unschedulable"

    # the kubelet's part: prepare the allocated claim through the plugin's socket
    obj = api.req(
        "GET", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/port-{tag}"
    )
    uid = obj["metadata"]["uid"]
    sock = str(p.kubelet_dir / "plugins" / "edgefd.io" / "dra.sock")
    with grpc.insecure_channel("unix:" + sock) as ch:
        stub = dra_grpc.DRAPluginStub(ch)
        ref = dra.Claim(namespace=NAMESPACE, uid=uid, name=f"port-{tag}")
        resp = stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[ref]), timeout=10)
        got = resp.claims[uid]
        assert not got.error, got.error
        [dev] = got.devices
        assert (dev.pool_name, dev.device_name) == (node, "coral-usb-2-2")
        assert list(dev.cdi_device_ids) == [f"edgefd.io/claim={uid}-coral-usb-2-2"]
        spec = json.loads((p.cdi_dir / f"edgefd.io-claim_{uid}.json").read_text())
        [node_edit] = spec["devices"][0]["containerEdits"]["deviceNodes"]
        assert node_edit == {
            "path": "/dev/edgefd/coral-usb-2-2",
            "hostPath": "/dev/bus/usb/002/009",
            "permissions": "rw",
        }
        # a clean shutdown with a prepared claim leaves the slice to the scheduler
        assert p.stop() == 0
        assert api.devices(node)
        p2 = start(plugins, api, host, node, work=p.work)
        wait_until(lambda: (p2.kubelet_dir / "plugins" / "edgefd.io" / "dra.sock").exists(), 10)
    with grpc.insecure_channel("unix:" + sock) as ch:
        stub = dra_grpc.DRAPluginStub(ch)
        again = stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[ref]), timeout=10)
        assert list(again.claims[uid].devices[0].cdi_device_ids) == list(dev.cdi_device_ids)
        un = stub.NodeUnprepareResources(
            dra.NodeUnprepareResourcesRequest(claims=[ref]), timeout=10
        )
        assert not un.claims[uid].error
    assert not (p.cdi_dir / f"edgefd.io-claim_{uid}.json").exists()
    assert p2.writes() == 0  # restarted over an unchanged slice: nothing written


def test_an_unplugged_device_is_tainted_and_not_given_out_until_it_returns(
    api: Api, node: str, plugins: list, tmp_path: Path
) -> None:
    host = build_host("rpi4-coral-runtime", tmp_path / "host", devicetree=False)
    start(plugins, api, host, node)
    gen = generation(api, node)
    hb = HostBuilder(host)
    hb.remove_usb("2-1")

    def tainted() -> bool:
        d = api.devices(node).get("coral-usb-2-1")
        return bool(d and d.get("taints"))

    wait_until(tainted, HOTPLUG_S + 1)
    [taint] = api.devices(node)["coral-usb-2-1"]["taints"]
    assert (taint["key"], taint["value"], taint["effect"]) == (
        "edgefd.io/unhealthy",
        "unplugged",
        "NoSchedule",
    )
    assert generation(api, node) == gen + 1
    tag = uuid.uuid4().hex[:6]
    claim(api, f"back-{tag}", port_is("2-1"))
    pod(api, f"back-{tag}", f"back-{tag}", node)
    time.sleep(UNSCHEDULABLE_GRACE_S)
    assert allocation(api, f"back-{tag}") is None
    # back at its port with a new devnum: same device, untainted, and the claim gets it
    hb.add_usb({"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 12})
    wait_until(lambda: not tainted(), HOTPLUG_S + 1)
    results = wait_until(lambda: allocation(api, f"back-{tag}"), 30, 0.1, "the allocation")
    assert [r["device"] for r in results] == ["coral-usb-2-1"]


# -- timing and writes


def test_hotplug_within_a_second_and_no_write_while_idle(
    api: Api, node: str, plugins: list, tmp_path: Path, record_property: Any
) -> None:
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    p = start(plugins, api, host, node)
    wait_until(lambda: p.writes() >= 1, 5)
    [before] = api.slices(node)
    writes = p.writes()
    time.sleep(IDLE_S)  # six backstop rescans (--rescan-interval 0.5s) happen meanwhile
    [after] = api.slices(node)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert p.writes() == writes

    gen = before["spec"]["pool"]["generation"]
    t0 = time.monotonic()
    HostBuilder(host).add_usb(SECOND_CORAL)
    wait_until(lambda: "coral-usb-2-2" in api.devices(node), 5, 0.01)
    plug = time.monotonic() - t0
    assert generation(api, node) == gen + 1
    t0 = time.monotonic()
    HostBuilder(host).remove_usb("2-2")
    wait_until(lambda: api.devices(node)["coral-usb-2-2"].get("taints"), 5, 0.01)
    unplug = time.monotonic() - t0
    assert generation(api, node) == gen + 2
    record_property("dra_plug_to_slice_s", round(plug, 3))
    record_property("dra_unplug_to_slice_s", round(unplug, 3))
    assert plug < HOTPLUG_S and unplug < HOTPLUG_S, (plug, unplug)


def test_a_deleted_slice_is_back_within_a_second_and_a_crash_writes_nothing(
    api: Api, node: str, plugins: list, tmp_path: Path
) -> None:
    host = build_host("x86-server", tmp_path / "host", devicetree=False)
    p = start(plugins, api, host, node)
    gen = generation(api, node)
    [s] = api.slices(node)
    t0 = time.monotonic()
    api.req("DELETE", f"/apis/resource.k8s.io/v1/resourceslices/{s['metadata']['name']}")
    wait_until(lambda: api.slices(node), 5, 0.01)
    assert time.monotonic() - t0 < HOTPLUG_S
    assert generation(api, node) == gen + 1  # never reused: consumers trust the highest
    # a crash leaves the slice; the next plugin finds it as it would write it
    p.stop(signal.SIGKILL)
    [kept] = api.slices(node)
    p2 = start(plugins, api, host, node, work=p.work)
    wait_until(lambda: p2.metrics().get("edgefd_devplugin_dra_pool_generation") == gen + 1, 10)
    assert p2.writes() == 0
    [same] = api.slices(node)
    assert same["metadata"]["resourceVersion"] == kept["metadata"]["resourceVersion"]


def test_clean_shutdown_without_prepared_claims_deletes_the_slice(
    api: Api, node: str, plugins: list, tmp_path: Path
) -> None:
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    p = start(plugins, api, host, node)
    assert p.stop() == 0
    assert api.slices(node) == []
    assert not list((p.kubelet_dir / "plugins_registry").iterdir())  # sockets removed too
