"""NodePrepareResources / NodeUnprepareResources edges with the real API server behind them
and the kubelet's call path in front (the plugin's DRA socket, the kubelet's own stubs): a
claim whose status an administrator wrote with one device listed twice (two requests for
one device) is one CDI device; with `--api both` sharing one CDI directory, an Unprepare
for the UID `coral-usb` never deletes the device plugin's `edgefd.io-coral-usb.json`; and
a Coral still prepared for a force-deleted pod's claim is refused, retryably, to the next
claim until the first is unprepared (kubernetes#141471); a hundred claims it does not know
are answered in a few seconds (claim reads on a rate of
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


def allocated_twice(api: Api, node: str, name: str, requests: tuple[str, ...] = ("a", "b")):
    """A claim with requests all allocated the same Coral (two, as an administrator may write
    it: the API server takes it; or one, as the scheduler does)."""
    api.req(
        "POST",
        CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [_request(r) for r in requests]}},
        },
    )
    obj = api.req("GET", f"{CLAIMS}/{name}")
    results = [
        {"request": r, "driver": "edgefd.io", "pool": node, "device": "coral-usb-2-1"}
        for r in requests
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


def test_a_coral_still_prepared_for_another_claim_waits_for_its_unprepare(
    api: Api, node: str, plugins: list, tmp_path: Path
) -> None:
    """The kubelet's order after a force-delete (kubernetes#141471): B's prepare before A's
    unprepare gets B's own error naming A (retried by the kubelet); after A's unprepare, B's
    retry prepares the Coral."""
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    p = start(plugins, api, host, node, work=Path(tempfile.mkdtemp(prefix="dra-")))
    suffix = uuid.uuid4().hex[:6]
    a, b = (allocated_twice(api, node, f"{n}-{suffix}", ("tpu",)) for n in ("a", "b"))

    def claims(obj: dict) -> list[dra.Claim]:
        meta = obj["metadata"]
        return [dra.Claim(namespace=NAMESPACE, uid=meta["uid"], name=meta["name"])]

    ch, s = stub(p)
    with ch:
        prep = s.NodePrepareResources
        ua, ub = a["metadata"]["uid"], b["metadata"]["uid"]
        assert not prep(dra.NodePrepareResourcesRequest(claims=claims(a)), 10).claims[ua].error
        refused = prep(dra.NodePrepareResourcesRequest(claims=claims(b)), 10).claims[ub]
        assert f"still prepared for claim {NAMESPACE}/a-{suffix} (UID {ua})" in refused.error
        assert not (p.cdi_dir / f"edgefd.io-claim_{ub}.json").exists()
        s.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=claims(a)), 10)
        [dev] = prep(dra.NodePrepareResourcesRequest(claims=claims(b)), 10).claims[ub].devices
    assert dev.device_name == "coral-usb-2-1"
    assert (p.cdi_dir / f"edgefd.io-claim_{ub}.json").exists()
