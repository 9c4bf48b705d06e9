"""CDI specs and prepared claims, without gRPC: what a claim's spec gives a container, how it
follows a device that moves, the checkpoint across restarts, and the device plugin's own specs
(--cdi-spec-dir) with the Allocate answer that names them."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from edgefd.bus.key import DeviceKey, DevNode
from edgefd.devplugin import cdi
from edgefd.devplugin.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from edgefd.devplugin.dra.claims import ClaimRef, PrepareError, Preparer
from edgefd.devplugin.dra.slices import attributes
from edgefd.devplugin.dra.table import Entry
from edgefd.devplugin.links import LinkLayout
from edgefd.devplugin.v1beta1.allocate import container_response
from edgefd.inventory.device import Device
from edgefd.inventory.resources import MountSpec, default_config

CORAL = default_config().by_name()["edgefd.io/coral-usb"]
PCIE = default_config().by_name()["edgefd.io/coral-pcie"]
NODE = "edge-1"


def coral(node: str = "/dev/bus/usb/002/003", port: str = "2-1", **kw: Any) -> Device:
    d = Device(
        name="coral-usb-" + port.replace(".", "-"),
        key=DeviceKey("usb", port),
        model="coral-usb",
        kind="edgetpu",
        ids="18d1:9302",
        nodes=(DevNode(node, "189:130"),),
    )
    return d._replace(**kw)


def apex(**kw: Any) -> Device:
    key = DeviceKey("pci", "0000:02:00.0")
    d = Device(
        "coral-pcie-0000-02-00-0", key, "coral-pcie", "edgetpu", nodes=(DevNode("/dev/apex_0"),)
    )
    return d._replace(**kw)


def table(*pairs: tuple[Device, Any]) -> dict[str, Entry]:
    return {d.name: Entry(d, r, attributes(d)) for d, r in pairs}


class Claims:
    """ResourceClaims as the API server returns them (a dict per namespace/name)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.gets = 0

    def add(self, name: str, devices: list[str], pool: str = NODE, driver: str = "edgefd.io"):
        uid = str(uuid.uuid4())
        results = [{"request": "tpu", "driver": driver, "pool": pool, "device": d} for d in devices]
        self.objects[("default", name)] = {
            "metadata": {"name": name, "namespace": "default", "uid": uid},
            "status": {"allocation": {"devices": {"results": results}}},
        }
        return ClaimRef("default", uid, name)

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self.gets += 1
        return self.objects[(namespace, name)]


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Preparer, Claims, Path]:
    claims = Claims()
    cdi_dir = tmp_path / "cdi"
    links = LinkLayout(str(tmp_path / "links"))
    p = Preparer(NODE, str(cdi_dir), links, Checkpoint(tmp_path / "plugin", NODE), claims)
    p.update(table((coral(), CORAL), (apex(), PCIE)))
    return p, claims, cdi_dir


def read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_prepare_writes_the_claim_spec(setup) -> None:
    p, claims, cdi_dir = setup
    ref = claims.add("c1", ["coral-usb-2-1"])
    [dev] = p.prepare(ref)
    assert dev.cdi_ids == (f"edgefd.io/claim={ref.uid}-coral-usb-2-1",)
    assert (dev.request, dev.pool, dev.device) == ("tpu", NODE, "coral-usb-2-1")
    spec = read(cdi_dir / f"edgefd.io-claim_{ref.uid}.json")
    assert spec == {
        "cdiVersion": "0.6.0",
        "kind": "edgefd.io/claim",
        "containerEdits": {"env": ["EDGEFD_CORAL_USB_DEVICES=coral-usb-2-1"]},
        "devices": [
            {
                "name": f"{ref.uid}-coral-usb-2-1",
                "containerEdits": {
                    "deviceNodes": [
                        {
                            "path": "/dev/edgefd/coral-usb-2-1",
                            "hostPath": "/dev/bus/usb/002/003",
                            "permissions": "rw",
                        }
                    ],
                    "mounts": [
                        {
                            "hostPath": "/dev/bus/usb",
                            "containerPath": "/dev/bus/usb",
                            "type": "bind",
                            "options": ["bind", "ro", "nosuid"],
                        }
                    ],
                },
            }
        ],
    }


def test_pci_devices_keep_their_node_name(setup) -> None:
    p, claims, cdi_dir = setup
    ref = claims.add("c2", ["coral-pcie-0000-02-00-0"])
    p.prepare(ref)
    [dev] = read(cdi_dir / f"edgefd.io-claim_{ref.uid}.json")["devices"]
    assert dev["containerEdits"] == {
        "deviceNodes": [{"path": "/dev/apex_0", "hostPath": "/dev/apex_0", "permissions": "rw"}]
    }


def test_prepare_is_idempotent_and_asks_the_api_once(setup) -> None:
    p, claims, _ = setup
    ref = claims.add("c1", ["coral-usb-2-1"])
    assert p.prepare(ref) == p.prepare(ref)
    assert claims.gets == 1


@pytest.mark.parametrize(
    ("devices", "pool", "driver", "message"),
    [
        (["coral-usb-9-9"], NODE, "edgefd.io", "device coral-usb-9-9 is not on node edge-1"),
        (["coral-usb-2-1"], "other-node", "edgefd.io", "in another node's pool"),
    ],
)
def test_prepare_refuses_what_is_not_here(setup, devices, pool, driver, message) -> None:
    p, claims, cdi_dir = setup
    ref = claims.add("bad", devices, pool=pool, driver=driver)
    with pytest.raises(PrepareError, match=message):
        p.prepare(ref)
    assert not list(cdi_dir.glob("*.json")) and p.prepared == 0


def test_other_drivers_results_are_not_ours(setup) -> None:
    p, claims, cdi_dir = setup
    ref = claims.add("gpu", ["gpu-0"], driver="gpu.example.com")
    assert p.prepare(ref) == ()
    assert not list(cdi_dir.glob("*.json"))


def test_a_replaced_claim_is_refused(setup) -> None:
    p, claims, _ = setup
    ref = claims.add("c1", ["coral-usb-2-1"])
    with pytest.raises(PrepareError, match="has UID"):
        p.prepare(replace(ref, uid=str(uuid.uuid4())))


def test_an_unallocated_claim_is_refused(setup) -> None:
    p, claims, _ = setup
    ref = claims.add("c1", ["coral-usb-2-1"])
    del claims.objects[("default", "c1")]["status"]
    with pytest.raises(PrepareError, match="not allocated"):
        p.prepare(ref)


def test_an_unplugged_device_cannot_be_prepared_but_a_prepared_claim_stays(setup) -> None:
    p, claims, cdi_dir = setup
    ref = claims.add("c1", ["coral-usb-2-1"])
    p.prepare(ref)
    p.update(table((coral(present=False, reason="unplugged"), CORAL)))
    # already prepared: the same answer (a kubelet restart asks again), spec points at the link
    assert p.prepare(ref)[0].device == "coral-usb-2-1"
    [dev] = read(cdi_dir / f"edgefd.io-claim_{ref.uid}.json")["devices"]
    link = dev["containerEdits"]["deviceNodes"][0]["hostPath"]
    assert link == os.path.join(p.links.directory, "edgefd.io_coral-usb", "coral-usb-2-1", "0")
    # a new claim for it is refused until it is back
    ref2 = claims.add("c2", ["coral-usb-2-1"])
    with pytest.raises(PrepareError, match="cannot be used now: unplugged"):
        p.prepare(ref2)


def test_the_spec_follows_a_reenumeration(setup) -> None:
    p, claims, cdi_dir = setup
    ref = claims.add("c1", ["coral-usb-2-1"])
    p.prepare(ref)
    path = cdi_dir / f"edgefd.io-claim_{ref.uid}.json"
    before = path.stat().st_mtime_ns
    p.update(table((coral(), CORAL), (apex(), PCIE)))
    assert path.stat().st_mtime_ns == before  # nothing moved: not rewritten
    p.update(table((coral("/dev/bus/usb/002/007", state="runtime"), CORAL)))
    node = read(path)["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert node == {
        "path": "/dev/edgefd/coral-usb-2-1",
        "hostPath": "/dev/bus/usb/002/007",
        "permissions": "rw",
    }


def test_unprepare_removes_spec_and_record_and_is_idempotent(setup) -> None:
    p, claims, cdi_dir = setup
    ref = claims.add("c1", ["coral-usb-2-1"])
    p.prepare(ref)
    p.unprepare(ref)
    p.unprepare(ref)
    assert not list(cdi_dir.glob("*.json")) and p.prepared == 0


def test_the_checkpoint_survives_a_restart(setup, tmp_path: Path) -> None:
    p, claims, cdi_dir = setup
    ref = claims.add("c1", ["coral-usb-2-1"])
    first = p.prepare(ref)
    cp = Checkpoint(tmp_path / "plugin", NODE)
    assert list(cp.load()) == [ref.uid]
    p2 = Preparer(NODE, str(cdi_dir), p.links, cp, claims)
    p2.update(table((coral("/dev/bus/usb/002/009"), CORAL)))
    assert p2.prepare(ref) == first and claims.gets == 1
    assert "002/009" in (cdi_dir / f"edgefd.io-claim_{ref.uid}.json").read_text()


def test_a_corrupt_checkpoint_is_moved_aside(tmp_path: Path, caplog) -> None:
    d = tmp_path / "plugin"
    d.mkdir()
    (d / "checkpoint.json").write_text("{not json")
    assert Checkpoint(d, NODE).load() == {}
    assert (d / "checkpoint.json.corrupt").exists()
    assert "unreadable" in caplog.text


def test_sweep_removes_only_orphaned_claim_specs(setup) -> None:
    p, claims, cdi_dir = setup
    kept = claims.add("c1", ["coral-usb-2-1"])
    p.prepare(kept)
    orphan = cdi_dir / f"edgefd.io-claim_{uuid.uuid4()}.json"
    orphan.write_text(json.dumps(cdi.spec(cdi.CLAIM_KIND, [{"name": "x"}])))
    # an earlier release's names (`edgefd.io-<UID>.json`): gone, also the kept claim's
    legacy = cdi_dir / f"edgefd.io-{uuid.uuid4()}.json"
    legacy.write_text(json.dumps(cdi.spec(cdi.CLAIM_KIND, [{"name": "x"}])))
    legacy_kept = cdi_dir / f"edgefd.io-{kept.uid}.json"
    legacy_kept.write_text(json.dumps(cdi.spec(cdi.CLAIM_KIND, [{"name": "x"}])))
    other_kind = cdi_dir / f"edgefd.io-{uuid.uuid4()}.json"
    other_kind.write_text(json.dumps(cdi.spec("edgefd.io/coral-usb", [{"name": "x"}])))
    plugin_spec = cdi_dir / "edgefd.io-coral-usb.json"
    plugin_spec.write_text("{}")
    assert sorted(p.sweep()) == sorted([orphan, legacy, legacy_kept])
    assert other_kind.exists() and plugin_spec.exists()
    assert (cdi_dir / f"edgefd.io-claim_{kept.uid}.json").exists()


# -- the device plugin's own specs (--cdi-spec-dir)


def test_device_plugin_specs_and_the_allocate_answer_agree(tmp_path: Path) -> None:
    res = replace(CORAL, env=(("LIBEDGETPU", "1"),), mounts=(MountSpec("/opt/m", "/models"),))
    layout = LinkLayout(str(tmp_path / "links"), cdi_spec_dir=str(tmp_path / "cdi"))
    specs = cdi.ResourceSpecs(str(tmp_path / "cdi"), "edgefd.io", layout)
    gone = coral(port="1-1.2", present=False, reason="unplugged")
    written = specs.sync([(res, (coral(), gone)), (PCIE, ())])
    assert written == [tmp_path / "cdi" / "edgefd.io-coral-usb.json"]  # no empty spec
    spec = read(written[0])
    assert spec["kind"] == "edgefd.io/coral-usb"
    by_name = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert by_name["coral-usb-2-1"]["deviceNodes"][0]["hostPath"] == "/dev/bus/usb/002/003"
    assert by_name["coral-usb-1-1-2"]["deviceNodes"][0]["hostPath"].startswith(
        str(tmp_path / "links")
    )
    assert {
        "hostPath": "/opt/m",
        "containerPath": "/models",
        "type": "bind",
        "options": ["bind", "ro", "nosuid"],
    } in by_name["coral-usb-2-1"]["mounts"]
    # Allocate names the spec's devices and carries the env, nothing else
    resp = container_response(res, [coral()], layout, None, specs.written)
    assert [c.name for c in resp.cdi_devices] == ["edgefd.io/coral-usb=coral-usb-2-1"]
    assert not resp.devices and not resp.mounts
    assert dict(resp.envs) == {"LIBEDGETPU": "1", "EDGEFD_CORAL_USB_DEVICES": "coral-usb-2-1"}
    # nothing changed: nothing written; a resource gone: its file goes
    assert specs.sync([(res, (coral(), gone))]) == []
    specs.sync([])
    assert not written[0].exists()


def test_claim_checkpoint_round_trip(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path, NODE)
    claim = PreparedClaim(
        "u1",
        "ns",
        "c",
        (PreparedDevice("r", NODE, "coral-usb-2-1", "coral-usb-2-1", CORAL.name, ("k=x",)),),
    )
    cp.put(claim)
    assert Checkpoint(tmp_path, NODE).load() == {"u1": claim}
    assert cp.remove("u1") and not cp.remove("u1")
    assert Checkpoint(tmp_path, NODE).load() == {}
