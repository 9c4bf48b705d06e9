"""Same place, another model (issue 22, item 2), against the real API server and scheduler:
a claim prepared for the NCS2 at a port keeps naming the NCS2 when a Coral is plugged into
that port after it (its CDI spec is not pointed at the Coral, the slice device does not change
kind), and a device of another model plugged in where one was is in the slice at once.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from edgefd.devplugin.dra.api import dra_pb2 as dra
from edgefd.devplugin.dra.api import dra_pb2_grpc as dra_grpc
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

CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
CORAL = {"vendor": "18d1", "product": "9302"}
NCS2 = {"vendor": "03e7", "product": "2485"}


def device(api: Api, node: str, name: str) -> dict[str, Any] | None:
    return api.devices(node).get(name)


def kind(d: dict[str, Any] | None) -> str | None:
    return d and d["attributes"]["kind"]["string"]


def swap(api: Api, node: str, host: Path, port: str, usb: dict, name: str) -> dict[str, Any]:
    """Unplug what is at `port`, plug `usb` in there; the slice device `name` it becomes,
    there within the hot-plug second."""
    hb = HostBuilder(host)
    hb.remove_usb(port)
    hb.add_usb({"port": port, **usb})
    return wait_until(lambda: device(api, node, name), HOTPLUG_S + 1, 0.05, name)


def test_a_coral_where_the_prepared_ncs2_was_is_another_device(
    api: Api, node: str, plugins: list, tmp_path: Path
) -> None:
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    p = start(plugins, api, host, node)
    tag = uuid.uuid4().hex[:6]
    claim(api, f"ncs2-{tag}", None, "myriadx.edgefd.io")
    pod(api, f"ncs2-{tag}", f"ncs2-{tag}", node)
    results = wait_until(lambda: allocation(api, f"ncs2-{tag}"), 30, 0.1, "the allocation")
    assert [r["device"] for r in results] == ["ncs2-1-1-1"]
    uid = api.req("GET", f"{CLAIMS}/ncs2-{tag}")["metadata"]["uid"]
    sock = str(p.kubelet_dir / "plugins" / "edgefd.io" / "dra.sock")
    ref = dra.Claim(namespace=NAMESPACE, uid=uid, name=f"ncs2-{tag}")
    with grpc.insecure_channel("unix:" + sock) as ch:
        stub = dra_grpc.DRAPluginStub(ch)
        resp = stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[ref]), timeout=10)
        assert not resp.claims[uid].error, resp.claims[uid].error
    spec_file = p.cdi_dir / f"edgefd.io-claim_{uid}.json"
    prepared = spec_file.read_text()
    [edit] = json.loads(prepared)["devices"][0]["containerEdits"]["deviceNodes"]
    assert edit["path"] == "/dev/edgefd/ncs2-1-1-1"

    # the NCS2 leaves port 1-1.1 and a Coral is plugged in there
    coral = swap(api, node, host, "1-1.1", {"devnum": 20, **CORAL}, "coral-usb-1-1-1")
    assert kind(coral) == "edgetpu" and not coral.get("taints")
    ncs2 = device(api, node, "ncs2-1-1-1")
    assert kind(ncs2) == "myriadx", ncs2  # never switched kind while allocated
    assert [t["value"] for t in ncs2.get("taints", ())] == ["unplugged"]
    # the prepared claim still names the NCS2, absent (its link, removed meanwhile: see
    # devplugin/cdi.py), never the Coral's node /dev/bus/usb/001/020
    [edit] = json.loads(spec_file.read_text())["devices"][0]["containerEdits"]["deviceNodes"]
    assert edit["path"] == "/dev/edgefd/ncs2-1-1-1"
    assert "/dev/bus/usb/001/020" not in spec_file.read_text()
    assert edit["hostPath"] != "/dev/bus/usb/001/020"
    assert not os.path.realpath(edit["hostPath"]).endswith("/dev/bus/usb/001/020")
    assert "coral" not in edit["hostPath"]


def test_an_ncs2_where_a_coral_was_is_in_the_slice_at_once(
    api: Api, node: str, plugins: list, tmp_path: Path
) -> None:
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    start(plugins, api, host, node)
    assert kind(device(api, node, "coral-usb-2-1")) == "edgetpu"
    ncs2 = swap(api, node, host, "2-1", {"devnum": 21, **NCS2}, "ncs2-2-1")
    assert kind(ncs2) == "myriadx" and not ncs2.get("taints")
    coral = device(api, node, "coral-usb-2-1")
    assert kind(coral) == "edgetpu" and coral.get("taints")
