"""NodePrepareResources / NodeUnprepareResources edges with the real API server behind them
and the kubelet's call path in front (the plugin's DRA socket, the kubelet's own stubs): a
claim whose status an administrator wrote with one device listed twice (two requests for
one device) is one CDI device; with `--api both` sharing one CDI directory, an Unprepare
for the UID `coral-usb` never deletes the device plugin's `edgefd.io-coral-usb.json`; and
a hundred claims it does not know are answered in a few seconds (claim reads on a rate of
their own, not the publisher's 5 a second)."""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from pathlib import Path

import grpc
import pytest

from edgefd.devplugin.dra.api import dra_pb2 as dra
from edgefd.devplugin.dra.api import dra_pb2_grpc as dra_grpc
from tests.devplugin.dra.peer import NAMESPACE, Api, DraPlugin, start
from tests.fixturegen import build_host
from tests.helpers import wait_until

pytestmark = pytest.mark.realpeer

CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"


def _request(name: str) -> dict:
    return {"name": name, "exactly": {"deviceClassName": "edgetpu.edgefd.io"}}


def allocated_twice(api: Api, node: str, name: str) -> dict:
    """A claim with two requests, both allocated the same Coral (as an administrator may
    write it: the API server takes it)."""
    api.req(
        "POST",
        CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [_request("a"), _request("b")]}},
        },
    )
    obj = api.req("GET", f"{CLAIMS}/{name}")
    results = [
        {"request": r, "driver": "edgefd.io", "pool": node, "device": "coral-usb-2-1"}
        for r in ("a", "b")
    ]
    obj["status"] = {"allocation": {"devices": {"results": results}}}
    return api.req("PUT", f"{CLAIMS}/{name}/status", obj)


def stub(p: DraPlugin) -> tuple[grpc.Channel, dra_grpc.DRAPluginStub]:
    sock = p.kubelet_dir / "plugins" / "edgefd.io" / "dra.sock"
    ch = grpc.insecure_channel(f"unix:{sock}")
    return ch, dra_grpc.DRAPluginStub(ch)


def test_a_device_listed_twice_in_a_claims_status_is_prepared_once(
    api: Api, node: str, plugins: list, tmp_path: Path
) -> None:
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    p = start(plugins, api, host, node, work=Path(tempfile.mkdtemp(prefix="dra-")))
    name = f"twice-{uuid.uuid4().hex[:6]}"
    obj = allocated_twice(api, node, name)
    assert len(obj["status"]["allocation"]["devices"]["results"]) == 2
    uid = obj["metadata"]["uid"]
    ch, s = stub(p)
    with ch:
        ref = dra.Claim(namespace=NAMESPACE, uid=uid, name=name)
        got = s.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[ref]), 10).claims[uid]
    assert not got.error, got.error
    [dev] = got.devices
    assert (list(dev.request_names), dev.device_name) == (["a", "b"], "coral-usb-2-1")
    assert list(dev.cdi_device_ids) == [f"edgefd.io/claim={uid}-coral-usb-2-1"]
    spec = json.loads((p.cdi_dir / f"edgefd.io-claim_{uid}.json").read_text())
    assert [d["name"] for d in spec["devices"]] == [f"{uid}-coral-usb-2-1"]


def test_unprepare_of_a_uid_like_coral_usb_never_deletes_the_device_plugins_spec(
    api: Api, node: str, plugins: list, tmp_path: Path
) -> None:
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    work = Path(tempfile.mkdtemp(prefix="dra-"))
    cdi = work / "cdi"
    devices = work / "dp"
    devices.mkdir(parents=True)
    p = DraPlugin(
        host,
        node,
        api.kubeconfig,  # type: ignore[attr-defined]
        "--api=both",
        f"--cdi-spec-dir={cdi}",
        f"--plugin-dir={devices}",
        work=work,
    )
    p.args.remove("--api")
    p.args.remove("dra")
    plugins.append(p)
    p.start()
    plugin_spec = cdi / "edgefd.io-coral-usb.json"
    wait_until(plugin_spec.exists, 20, 0.05, "the device plugin's CDI spec")
    ch, s = stub(p)
    with ch:
        for uid in ("coral-usb", "coral_usb", "../cdi/edgefd.io-coral-usb"):
            ref = dra.Claim(namespace=NAMESPACE, uid=uid, name="c")
            un = s.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=[ref]), 10)
            assert "is not a Kubernetes UID" in un.claims[uid].error
    assert plugin_spec.exists()
    assert json.loads(plugin_spec.read_text())["kind"] == "edgefd.io/coral-usb"


def test_a_hundred_unknown_claims_are_answered_within_seconds(
    api: Api, node: str, plugins: list, tmp_path: Path
) -> None:
    """Each claim the checkpoint does not know is read from the API server; on the
    publisher's 5 requests a second a hundred took 18 s (500 took 98 s)."""
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    p = start(plugins, api, host, node, work=Path(tempfile.mkdtemp(prefix="dra-")))
    refs = [
        dra.Claim(namespace=NAMESPACE, uid=str(uuid.uuid4()), name=f"gone-{i}") for i in range(100)
    ]
    ch, s = stub(p)
    with ch:
        t0 = time.monotonic()
        resp = s.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=refs), 60)
        took = time.monotonic() - t0
    assert len(resp.claims) == 100
    assert all("not found" in c.error for c in resp.claims.values()), resp.claims[refs[0].uid]
    assert took < 6.0, f"100 unknown claims took {took:.1f} s"
