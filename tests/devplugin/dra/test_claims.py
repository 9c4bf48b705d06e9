"""Preparing and unpreparing claims (claims.py), without gRPC: the CDI spec a claim's devices
give a container (a USB device's node at /dev/edgefd/<name> with the read-only bus mount, a
PCI device's own node), idempotent Prepare that asks the API server once (also after a
restart, from the checkpoint), what is refused (a device not here or not usable now, another
node's pool, a replaced or unallocated claim; other drivers' results are not ours), the spec
following a device that moves, Unprepare, a device still prepared for another claim refused
until that claim is unprepared (kubernetes#141471), and the start-up sweep of orphaned claim
specs (every release's names), which never blocks on a file that is not a small regular one
and never opens one that is not a regular file. A claim's device whose host node has a group
that opens it read-write gives the container that group (CDI 0.7.0 additionalGids)."""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from edgefd.core.hostroot import HostRoot
from edgefd.devplugin import cdi
from edgefd.devplugin.dra.checkpoint import Checkpoint, PreparedClaim
from edgefd.devplugin.dra.claims import PrepareError, Preparer, StillPrepared, spec_uid
from edgefd.devplugin.links import LinkLayout
from tests.devplugin.devices import CORAL, NODE, PCIE, apex, coral, host_node, table
from tests.devplugin.dra.fakeapi import Claims
from tests.devplugin.dra.obstacles import fifo_symlink_huge, finishes


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
        "cdiVersion": "0.5.0",
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


def test_a_claims_device_gives_its_nodes_group(tmp_path: Path) -> None:
    claims = Claims()
    host_node(tmp_path / "host", "/dev/bus/usb/002/003", 0o660, 46)
    links = LinkLayout(str(tmp_path / "links"), host=HostRoot.of(tmp_path / "host"))
    p = Preparer(NODE, str(tmp_path / "cdi"), links, Checkpoint(tmp_path / "plugin", NODE), claims)
    p.update(table((coral(), CORAL), (apex(), PCIE)))
    ref = claims.add("c1", ["coral-usb-2-1", "coral-pcie-0000-02-00-0"])
    p.prepare(ref)
    spec = read(tmp_path / "cdi" / f"edgefd.io-claim_{ref.uid}.json")
    assert spec["cdiVersion"] == "0.7.0"
    gids = {d["name"]: d["containerEdits"].get("additionalGids") for d in spec["devices"]}
    assert gids == {f"{ref.uid}-coral-usb-2-1": [46], f"{ref.uid}-coral-pcie-0000-02-00-0": None}


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


def test_a_device_still_prepared_for_another_claim_is_refused_until_unprepared(setup) -> None:
    """The kubelet prepares the next pod's claim before it unprepares a force-deleted pod's
    (kubernetes#141471): the second claim waits, retryably, naming the first; nothing of it
    is written; once the first is unprepared it prepares."""
    p, claims, cdi_dir = setup
    a = claims.add("a", ["coral-usb-2-1"])
    b = claims.add("b", ["coral-pcie-0000-02-00-0", "coral-usb-2-1"])
    p.prepare(a)
    with pytest.raises(
        StillPrepared, match=f"coral-usb-2-1 is still prepared for claim default/a .UID {a.uid}"
    ):
        p.prepare(b)
    assert isinstance(StillPrepared("x"), PrepareError)  # the claim's entry, retried
    assert set(p.prepared_claims()) == {a.uid}
    assert not cdi.claim_spec_path(cdi_dir, b.uid).exists()
    assert p.prepare(a)  # the holder itself: still idempotent
    p.unprepare(a)
    assert [d.device for d in p.prepare(b)] == ["coral-pcie-0000-02-00-0", "coral-usb-2-1"]
    assert set(p.prepared_claims()) == {b.uid}


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


@pytest.mark.parametrize("what", ["fifo", "symlink", "huge"])
def test_sweep_never_blocks_on_a_claim_named_file(tmp_path: Path, what: str) -> None:
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    names = [f"edgefd.io-claim_{uuid.uuid4()}.json", f"edgefd.io-{uuid.uuid4()}.json"]
    for n in names:
        fifo_symlink_huge(cdi_dir / n, what)
    p = Preparer(NODE, str(cdi_dir), LinkLayout(None), Checkpoint(tmp_path / "cp", NODE), None)
    assert finishes(p.sweep) == []
    assert sorted(os.listdir(cdi_dir)) == sorted(names)  # not ours to remove: not read


@pytest.mark.parametrize("old_name", [True, False])
def test_sweep_never_opens_what_is_not_a_regular_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, old_name: bool
) -> None:
    """A FIFO, a directory or a device node under a claim spec's name (either release's, the
    claim prepared or not): never opened (a FIFO's blocked writer stays blocked; a device's
    open may act), never removed, one warning each; the sweep returns."""
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    cp = Checkpoint(tmp_path / "cp", NODE)
    known = str(uuid.uuid4())
    cp.put(PreparedClaim(known, "default", "c", ()))
    prefix = "edgefd.io-" if old_name else "edgefd.io-claim_"
    fifo = cdi_dir / f"{prefix}{known if old_name else uuid.uuid4()}.json"
    os.mkfifo(fifo)
    directory = cdi_dir / f"{prefix}{uuid.uuid4()}.json"
    directory.mkdir()
    device = cdi_dir / f"{prefix}{uuid.uuid4()}.json"
    os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    opened = threading.Event()

    def writer() -> None:  # blocks in open() until a reader opens the FIFO
        os.close(os.open(fifo, os.O_WRONLY))
        opened.set()

    threading.Thread(target=writer, daemon=True).start()
    p = Preparer(NODE, str(cdi_dir), LinkLayout(None), cp, None)
    try:
        with caplog.at_level(logging.WARNING):
            assert finishes(p.sweep) == []
        assert not opened.wait(0.3), "the sweep opened the FIFO"
    finally:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets the writer go
    assert {fifo, directory, device} == set(cdi_dir.iterdir())
    said = caplog.text
    for path, what in ((fifo, "a FIFO"), (directory, "a directory"), (device, "a device node")):
        assert f"{path}: {what}, not a regular file, under a claim spec's name" in said


def test_claim_spec_names_of_every_release() -> None:
    uid = str(uuid.uuid4())
    assert spec_uid(f"edgefd.io-claim_{uid}.json") == (uid, True)
    assert spec_uid(f"edgefd.io-{uid}.json") == (uid, False)
    for other in ("edgefd.io-coral-usb.json", f"edgefd.io-claim_{uid}.json.tmp", f"x-{uid}.json"):
        assert spec_uid(other) is None


def test_prepare_refuses_a_fifo_at_its_spec_path_without_blocking(tmp_path: Path) -> None:
    claims = Claims()
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    p = Preparer(NODE, str(cdi_dir), LinkLayout(None), Checkpoint(tmp_path / "cp", NODE), claims)
    p.update(table((coral(), CORAL)))
    ref = claims.add("c", ["coral-usb-2-1"])
    os.mkfifo(cdi.claim_spec_path(cdi_dir, ref.uid))

    def prepare() -> str:
        try:
            p.prepare(ref)
        except PrepareError as e:
            return f"PrepareError {e}"
        except Exception as e:
            return f"{type(e).__name__}: {e}"
        return "prepared"

    assert "not a regular file" in finishes(prepare)
