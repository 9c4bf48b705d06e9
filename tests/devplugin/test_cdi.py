"""CDI specs (cdi.py), without gRPC. The device plugin's own specs (--cdi-spec-dir): one file
per kind with its devices (an absent one at its link), rewritten only on a change and removed
with its kind, agreeing with the Allocate answer that names them; one kind's file that cannot
be written (a symlink or a FIFO in its place, the name of a DRA claim's spec) costs that kind
only, with one warning, and Allocate then answers its devices with device specs, never a CDI
name without a spec. A DRA claim's spec and the device plugin's can never share a file name.
What a claim's spec says is dra/test_claims.py's; the kubelet's side of the device plugin's
CDI mode is in test_realpeer.py. A non-root container joins the group of its device's node
(additionalGids, CDI 0.7.0) when that group can open it read-write and is not root's."""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from edgefd.core.hostroot import HostRoot
from edgefd.devplugin import cdi
from edgefd.devplugin.links import LinkLayout
from edgefd.devplugin.resources import MountSpec
from edgefd.devplugin.v1beta1.allocate import container_response
from tests.devplugin.devices import CORAL, PCIE, apex, coral, host_node


def obstruct(path: Path, what: str, elsewhere: Path) -> None:
    if what == "fifo":
        os.mkfifo(path)
    else:
        elsewhere.write_text("keep\n")
        path.symlink_to(elsewhere)


@pytest.mark.parametrize("what", ["symlink", "fifo"])
def test_one_kind_in_the_way_costs_that_kind_only(tmp_path: Path, what: str, caplog) -> None:
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    usb = cdi_dir / "edgefd.io-coral-usb.json"
    obstruct(usb, what, tmp_path / "elsewhere")
    layout = LinkLayout(None, cdi_spec_dir=str(cdi_dir))
    specs = cdi.ResourceSpecs(str(cdi_dir), "edgefd.io", layout)
    resources = [(CORAL, (coral(),)), (PCIE, (apex(),))]
    done: list = []
    with caplog.at_level(logging.WARNING):
        t = threading.Thread(target=lambda: done.extend(specs.sync(resources) for _ in range(3)))
        t.start()
        t.join(10)
        assert not t.is_alive(), "blocked on the FIFO"
    assert done[0] == [cdi_dir / "edgefd.io-coral-pcie.json"]
    [warning] = [r.getMessage() for r in caplog.records]
    assert str(usb) in warning and "device specs instead" in warning
    assert usb.is_symlink() if what == "symlink" else stat.S_ISFIFO(os.lstat(usb).st_mode)
    if what == "symlink":
        assert (tmp_path / "elsewhere").read_text() == "keep\n"
    assert specs.written("edgefd.io/coral-pcie=coral-pcie-0000-02-00-0")
    assert not specs.written("edgefd.io/coral-usb=coral-usb-2-1")
    # Allocate: device specs for the kind without a spec, CDI names for the other
    r = container_response(CORAL, [coral()], layout, None, specs.written)
    assert not r.cdi_devices and [d.host_path for d in r.devices] == ["/dev/bus/usb/002/003"]
    assert [m.container_path for m in r.mounts] == ["/dev/bus/usb"]
    r = container_response(PCIE, [apex()], layout, None, specs.written)
    assert [c.name for c in r.cdi_devices] == ["edgefd.io/coral-pcie=coral-pcie-0000-02-00-0"]
    assert not r.devices
    # out of the way: written at the next scan, and said so
    usb.unlink()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert specs.sync(resources) == [usb]
    assert "written again" in caplog.text
    assert specs.written("edgefd.io/coral-usb=coral-usb-2-1")


def test_a_kind_named_like_a_claim_spec_is_not_written(tmp_path: Path, caplog) -> None:
    cdi_dir = tmp_path / "cdi"
    uid = str(uuid.uuid4())
    res = replace(CORAL, name=f"edgefd.io/claim_{uid}")
    specs = cdi.ResourceSpecs(str(cdi_dir), "edgefd.io", LinkLayout(None, str(cdi_dir)))
    assert specs.sync([(res, (coral(),))]) == []
    assert not cdi_dir.exists() or not list(cdi_dir.iterdir())
    assert "DRA claim" in caplog.text
    assert not specs.written(f"edgefd.io/claim_{uid}=coral-usb-2-1")


def test_claim_specs_and_device_plugin_specs_cannot_share_a_name(tmp_path: Path) -> None:
    uid = str(uuid.uuid4())
    claim = cdi.claim_spec_path(tmp_path, uid)
    assert claim.name == f"edgefd.io-claim_{uid}.json" and cdi.is_claim_spec(claim)
    # the device plugin's files are `<vendor>-<class>.json`: a class `claim_<UID>` is refused
    assert not cdi.is_claim_spec(cdi.spec_path(tmp_path, "edgefd.io/coral-usb", "coral-usb"))
    assert cdi.is_claim_spec(cdi.spec_path(tmp_path, f"edgefd.io/claim_{uid}", f"claim_{uid}"))


def test_device_plugin_specs_and_the_allocate_answer_agree(tmp_path: Path) -> None:
    res = replace(CORAL, env=(("LIBEDGETPU", "1"),), mounts=(MountSpec("/opt/m", "/models"),))
    layout = LinkLayout(str(tmp_path / "links"), cdi_spec_dir=str(tmp_path / "cdi"))
    specs = cdi.ResourceSpecs(str(tmp_path / "cdi"), "edgefd.io", layout)
    gone = coral(port="1-1.2", present=False, reason="unplugged")
    written = specs.sync([(res, (coral(), gone)), (PCIE, ())])
    assert written == [tmp_path / "cdi" / "edgefd.io-coral-usb.json"]  # no empty spec
    spec = json.loads(written[0].read_text())
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


def gid_specs(tmp_path: Path, *resources) -> dict[str, dict]:
    """The device plugin's specs for `resources`, with the host's /dev under tmp_path/host."""
    cdi_dir = tmp_path / "cdi"
    layout = LinkLayout(None, str(cdi_dir), HostRoot.of(tmp_path / "host"))
    cdi.ResourceSpecs(str(cdi_dir), "edgefd.io", layout).sync(resources)
    return {p.name: json.loads(p.read_text()) for p in cdi_dir.iterdir()}


def test_the_nodes_group_joins_the_container_at_cdi_0_7_0(tmp_path: Path) -> None:
    """A non-root container needs the host node's group for /dev/bus/usb (the host's nodes):
    the spec carries it, and declares 0.7.0, the version that has additionalGids; a spec
    without one declares 0.5.0 (the lowest its content needs, read by older runtimes too)."""
    host_node(tmp_path / "host", "/dev/bus/usb/002/003", 0o664, 46)
    specs = gid_specs(tmp_path, (CORAL, (coral(),)), (PCIE, (apex(),)))
    usb, pcie = specs["edgefd.io-coral-usb.json"], specs["edgefd.io-coral-pcie.json"]
    assert usb["cdiVersion"] == "0.7.0"
    [dev] = usb["devices"]
    assert dev["containerEdits"]["additionalGids"] == [46]
    assert "additionalGids" not in usb.get("containerEdits", {})  # per device, not per spec
    assert pcie["cdiVersion"] == "0.5.0"  # /dev/apex_0 is not on this host
    assert "additionalGids" not in pcie["devices"][0]["containerEdits"]


@pytest.mark.parametrize(
    ("mode", "gid", "given"),
    [
        (0o660, 46, True),
        (0o664, 46, True),
        (0o640, 46, False),  # the group may read only: joining it opens nothing read-write
        (0o620, 46, False),
        (0o606, 46, False),
        (0o666, 0, False),  # root's group is never given
    ],
)
def test_a_group_is_given_only_when_it_opens_the_node_read_write(
    tmp_path: Path, mode: int, gid: int, given: bool
) -> None:
    host_node(tmp_path / "host", "/dev/bus/usb/002/003", mode, gid)
    [spec] = gid_specs(tmp_path, (CORAL, (coral(),))).values()
    edits = spec["devices"][0]["containerEdits"]
    assert edits.get("additionalGids") == ([gid] if given else None)
    assert spec["cdiVersion"] == ("0.7.0" if given else "0.5.0")


def test_no_group_for_an_absent_device_or_what_is_not_a_device_node(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host_node(host, "/dev/bus/usb/002/003")
    regular = host / "dev/bus/usb/001/004"
    regular.parent.mkdir()
    regular.write_text("")
    os.chown(regular, 0, 46)
    os.chmod(regular, 0o664)
    gone = coral(present=False, reason="unplugged")
    file = coral(node="/dev/bus/usb/001/004", port="1-1")
    [spec] = gid_specs(tmp_path, (CORAL, (gone, file))).values()
    assert spec["cdiVersion"] == "0.5.0"
    assert all("additionalGids" not in d["containerEdits"] for d in spec["devices"])


def test_a_class_with_a_dot_declares_0_6_0(tmp_path: Path) -> None:
    """A configured resource's short name may hold a dot, which a class may have from CDI 0.6.0
    on; without a dot (and without a group) 0.5.0, which containerd 1.7.0-1.7.11 read too."""
    dotted = replace(CORAL, name="edgefd.io/coral.usb")
    [spec] = gid_specs(tmp_path, (dotted, (coral(),))).values()
    assert (spec["kind"], spec["cdiVersion"]) == ("edgefd.io/coral.usb", "0.6.0")
