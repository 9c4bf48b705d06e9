"""Device metadata in the container (metadata.py, KEP-5304), through the preparer as the kubelet
plugin drives it: the document a Coral USB (with its serial) and a Coral PCIe (none; its
driver's version) get, written out here from the KEP's format rather than from the code; the
KEP's in-container paths (a claim the pod names, a template's claim, a prioritized list's
subrequest); the claim's CDI spec binding the file read-only; a rewrite with the generation
raised when the device re-enumerates and none while nothing changes, also after a restart;
the old file left whole for a container that has it bound, and kept bound when a rewrite
fails; removal on Unprepare and by the start-up sweep; a request name that cannot be a path
refused, and a claim prepared by an earlier release left without."""

from __future__ import annotations

import errno
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from edgefd.core.errors import EdgefdError
from edgefd.devplugin.dra import metadata
from edgefd.devplugin.dra.checkpoint import Checkpoint, PreparedClaim
from edgefd.devplugin.dra.claims import ClaimRef, PrepareError, Preparer
from edgefd.devplugin.dra.metadata import MetadataFiles
from edgefd.devplugin.links import LinkLayout
from edgefd.inventory.device import Facts
from tests.devplugin.devices import CORAL, NODE, PCIE, apex, coral, table
from tests.devplugin.dra.fakeapi import Claims

ROOT = "/var/run/kubernetes.io/dra-device-attributes"
USB = coral(state="runtime", facts=Facts(serial="1a2b3c4d"))
PCI = apex(facts=Facts(driver="apex", driver_version="1.2.0", module_version="1.2"))


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Preparer, Claims, Path]:
    claims = Claims()
    cp = Checkpoint(tmp_path / "plugin", NODE)
    files = MetadataFiles(tmp_path / "plugin" / "metadata")
    p = Preparer(NODE, str(tmp_path / "cdi"), LinkLayout(None), cp, claims, files)
    p.update(table((USB, CORAL), (PCI, PCIE)))
    return p, claims, tmp_path


def add(claims: Claims, name: str, devices: list[str], request: str = "tpu", pod_claim: str = ""):
    ref = claims.add(name, devices)
    obj = claims.objects[("default", name)]
    for r in obj["status"]["allocation"]["devices"]["results"]:
        r["request"] = request
    if pod_claim:
        obj["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": pod_claim}
    return ref


def host_file(tmp_path: Path, ref: ClaimRef, request: str = "tpu") -> Path:
    return tmp_path / "plugin" / "metadata" / ref.uid / request / "edgefd.io-metadata.json"


def spec(tmp_path: Path, ref: ClaimRef) -> dict[str, Any]:
    return json.loads((tmp_path / "cdi" / f"edgefd.io-claim_{ref.uid}.json").read_text())


def read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_a_coral_usb_with_its_serial(setup) -> None:
    p, claims, tmp_path = setup
    ref = add(claims, "tpu-claim", ["coral-usb-2-1"])
    p.prepare(ref)
    assert read(host_file(tmp_path, ref)) == {
        "apiVersion": "metadata.resource.k8s.io/v1alpha1",
        "kind": "DeviceMetadata",
        "metadata": {"name": "tpu-claim", "namespace": "default", "uid": ref.uid, "generation": 1},
        "requests": [
            {
                "name": "tpu",
                "devices": [
                    {
                        "driver": "edgefd.io",
                        "pool": NODE,
                        "name": "coral-usb-2-1",
                        "attributes": {
                            "bus": {"string": "usb"},
                            "busPath": {"string": "/dev/bus/usb/002/003"},
                            "devicePath": {"string": "/dev/edgefd/coral-usb-2-1"},
                            "kind": {"string": "edgetpu"},
                            "model": {"string": "coral-usb"},
                            "port": {"string": "2-1"},
                            "productID": {"string": "9302"},
                            "serial": {"string": "1a2b3c4d"},
                            "state": {"string": "runtime"},
                            "usbBus": {"int": 2},
                            "vendorID": {"string": "18d1"},
                        },
                    }
                ],
            }
        ],
    }


def test_a_coral_pcie_without_a_serial_from_a_template(setup) -> None:
    p, claims, tmp_path = setup
    ref = add(claims, "pod-1-tpu-x7k2q", ["coral-pcie-0000-02-00-0"], "dev", pod_claim="tpu")
    p.prepare(ref)
    doc = read(host_file(tmp_path, ref, "dev"))
    assert doc["podClaimName"] == "tpu"
    [req] = doc["requests"]
    assert req["name"] == "dev"
    [dev] = req["devices"]
    assert (dev["driver"], dev["pool"], dev["name"]) == ("edgefd.io", NODE, PCI.name)
    assert dev["attributes"] == {
        "bus": {"string": "pci"},
        "devicePath": {"string": "/dev/apex_0"},
        "driver": {"string": "apex"},
        "driverModuleVersion": {"string": "1.2"},
        "driverVersion": {"version": "1.2.0"},
        "kind": {"string": "edgetpu"},
        "model": {"string": "coral-pcie"},
        "pciAddress": {"string": "0000:02:00.0"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:02:00.0"},
    }


def mounts(tmp_path: Path, ref: ClaimRef) -> dict[str, list[dict[str, Any]]]:
    return {
        d["name"]: d["containerEdits"].get("mounts", []) for d in spec(tmp_path, ref)["devices"]
    }


def test_the_claims_cdi_spec_binds_the_files_directory_read_only(setup) -> None:
    """The request's directory, so that a rewrite (a rename in it) reaches a running
    container; a bind of the file would hold the inode it was given."""
    p, claims, tmp_path = setup
    ref = add(claims, "tpu-claim", ["coral-usb-2-1"])
    p.prepare(ref)
    bind = {
        "hostPath": str(host_file(tmp_path, ref).parent),
        "containerPath": f"{ROOT}/resourceclaims/tpu-claim/tpu",
        "type": "bind",
        "options": ["bind", "ro", "nosuid"],
    }
    usb = {
        "hostPath": "/dev/bus/usb",
        "containerPath": "/dev/bus/usb",
        "type": "bind",
        "options": ["bind", "ro", "nosuid"],
    }
    assert mounts(tmp_path, ref) == {f"{ref.uid}-coral-usb-2-1": [usb, bind]}
    assert spec(tmp_path, ref)["cdiVersion"] == "0.5.0"  # a mount's `type` is 0.4.0's


def test_two_devices_of_a_request_share_its_file(setup) -> None:
    p, claims, tmp_path = setup
    ref = add(claims, "both", ["coral-usb-2-1", "coral-pcie-0000-02-00-0"], "dev/any", "tpus")
    p.prepare(ref)
    doc = read(host_file(tmp_path, ref, "dev"))  # the path's request: the subrequest dropped
    assert doc["requests"][0]["name"] == "dev/any"
    assert [d["name"] for d in doc["requests"][0]["devices"]] == ["coral-usb-2-1", PCI.name]
    inside = f"{ROOT}/resourceclaimtemplates/tpus/dev"
    for binds in mounts(tmp_path, ref).values():
        assert [m["containerPath"] for m in binds if m["containerPath"] != "/dev/bus/usb"] == [
            inside
        ]


def test_a_reenumeration_rewrites_the_file_and_raises_the_generation(setup) -> None:
    p, claims, tmp_path = setup
    ref = add(claims, "c", ["coral-usb-2-1", "coral-pcie-0000-02-00-0"])
    p.prepare(ref)
    path = host_file(tmp_path, ref)
    first = path.stat()
    p.update(table((USB, CORAL), (PCI, PCIE)))  # nothing moved: not rewritten
    assert path.stat().st_ino == first.st_ino and path.stat().st_mtime_ns == first.st_mtime_ns
    # the Coral comes back at its port with a new devnum, the PCIe function with another node
    moved_usb = USB._replace(nodes=(USB.nodes[0]._replace(path="/dev/bus/usb/002/007"),))
    moved_pci = PCI._replace(nodes=(PCI.nodes[0]._replace(path="/dev/apex_1"),))
    p.update(table((moved_usb, CORAL), (moved_pci, PCIE)))
    doc = read(path)
    assert doc["metadata"]["generation"] == 2
    usb, pci = doc["requests"][0]["devices"]
    assert usb["attributes"]["busPath"] == {"string": "/dev/bus/usb/002/007"}
    assert usb["attributes"]["devicePath"] == {"string": "/dev/edgefd/coral-usb-2-1"}
    assert pci["attributes"]["devicePath"] == {"string": "/dev/apex_1"}
    # unplugged: no bus path to give while it is away; back: given again
    p.update(table((moved_usb._replace(present=False, reason="unplugged"), CORAL), (PCI, PCIE)))
    assert "busPath" not in read(path)["requests"][0]["devices"][0]["attributes"]
    assert read(path)["metadata"]["generation"] == 3


def test_a_running_containers_file_stays_whole(setup) -> None:
    """A bind mount holds the file it was given: the rewrite is a new file renamed into place,
    so a reader of the old one (a running container) reads its document, complete."""
    p, claims, tmp_path = setup
    ref = add(claims, "c", ["coral-pcie-0000-02-00-0"])
    p.prepare(ref)
    path = host_file(tmp_path, ref)
    with path.open() as held:
        moved = PCI._replace(nodes=(PCI.nodes[0]._replace(path="/dev/apex_1"),))
        p.update(table((moved, PCIE)))
        old = json.loads(held.read())
    assert old["metadata"]["generation"] == 1
    assert old["requests"][0]["devices"][0]["attributes"]["devicePath"]["string"] == "/dev/apex_0"
    assert read(path)["metadata"]["generation"] == 2
    assert sorted(os.listdir(path.parent)) == [path.name]  # no temp file left beside it
    assert oct(path.stat().st_mode & 0o777) == "0o644"  # a non-root workload reads it


def test_the_generation_goes_on_after_a_restart(setup) -> None:
    p, claims, tmp_path = setup
    ref = add(claims, "c", ["coral-pcie-0000-02-00-0"])
    p.prepare(ref)
    cp = Checkpoint(tmp_path / "plugin", NODE)
    assert cp.load()[ref.uid].metadata_dir == "resourceclaims/c"
    files = MetadataFiles(tmp_path / "plugin" / "metadata")
    p2 = Preparer(NODE, str(tmp_path / "cdi"), LinkLayout(None), cp, claims, files)
    p2.update(table((PCI, PCIE)))
    assert read(host_file(tmp_path, ref))["metadata"]["generation"] == 1  # same content
    p2.update(table((PCI._replace(nodes=(PCI.nodes[0]._replace(path="/dev/apex_3"),)), PCIE)))
    assert read(host_file(tmp_path, ref))["metadata"]["generation"] == 2


def test_unprepare_removes_the_claims_metadata(setup) -> None:
    p, claims, tmp_path = setup
    ref = add(claims, "c", ["coral-usb-2-1"])
    other = add(claims, "d", ["coral-pcie-0000-02-00-0"])
    p.prepare(ref)
    p.prepare(other)
    p.unprepare(ref)
    assert not (tmp_path / "plugin" / "metadata" / ref.uid).exists()
    assert host_file(tmp_path, other).exists()
    p.unprepare(ref)  # idempotent


def test_the_sweep_removes_metadata_of_claims_not_prepared(setup) -> None:
    p, claims, tmp_path = setup
    kept = add(claims, "c", ["coral-usb-2-1"])
    p.prepare(kept)
    root = tmp_path / "plugin" / "metadata"
    orphan = root / str(uuid.uuid4()) / "tpu"
    orphan.mkdir(parents=True)
    (orphan / "edgefd.io-metadata.json").write_text("{}")
    not_a_claim = root / "lost+found"
    not_a_claim.mkdir()
    assert p.sweep() == [orphan.parent]
    assert sorted(os.listdir(root)) == sorted([kept.uid, "lost+found"])


def test_a_request_name_that_is_no_dns_label_is_refused(setup) -> None:
    p, claims, tmp_path = setup
    ref = add(claims, "c", ["coral-usb-2-1"], request="../../etc")
    with pytest.raises(PrepareError, match="not a DNS label"):
        p.prepare(ref)
    assert p.prepared == 0 and not (tmp_path / "plugin" / "metadata").exists()


def test_a_claim_prepared_before_metadata_stays_without(setup) -> None:
    """Its containers were made without the file; its spec is not given a mount that would
    name a path its pod never learned of."""
    p, claims, tmp_path = setup
    ref = add(claims, "c", ["coral-usb-2-1"])
    p.prepare(ref)
    record = p.checkpoint.get(ref.uid)
    assert record is not None
    p.unprepare(ref)
    legacy = PreparedClaim(record.uid, record.namespace, record.name, record.devices)
    p.checkpoint.put(legacy)
    p.update(table((USB, CORAL)))
    assert not (tmp_path / "plugin" / "metadata" / ref.uid).exists()
    assert [m["containerPath"] for m in mounts(tmp_path, ref)[f"{ref.uid}-coral-usb-2-1"]] == [
        "/dev/bus/usb"
    ]


def test_a_file_that_cannot_be_rewritten_leaves_the_spec_following_the_device(
    setup, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A metadata write that fails after Prepare (a full disk) costs the file's update only:
    it stays as it was, still bound, and the spec still moves. Before Prepare, the claim is
    refused instead (retried): there would be no file to bind."""
    p, claims, tmp_path = setup
    ref = add(claims, "c", ["coral-pcie-0000-02-00-0"])
    p.prepare(ref)
    path = host_file(tmp_path, ref)

    def full(*_args: object, **_kw: object) -> bool:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(metadata, "write_atomic", full)
    moved = PCI._replace(nodes=(PCI.nodes[0]._replace(path="/dev/apex_1"),))
    p.update(table((USB, CORAL), (moved, PCIE)))
    assert read(path)["metadata"]["generation"] == 1
    assert f"cannot write {path}: No space left on device" in caplog.text
    [dev] = spec(tmp_path, ref)["devices"]
    assert dev["containerEdits"]["deviceNodes"][0]["hostPath"] == "/dev/apex_1"
    assert [m["hostPath"] for m in dev["containerEdits"]["mounts"]] == [str(path.parent)]
    new = add(claims, "d", ["coral-usb-2-1"])
    with pytest.raises(EdgefdError, match="No space left on device"):  # the claim's error
        p.prepare(new)
    assert not (tmp_path / "cdi" / f"edgefd.io-claim_{new.uid}.json").exists()
