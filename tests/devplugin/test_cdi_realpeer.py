"""edgefd's CDI specs as the runtime's own CDI library reads and applies them: the library
containerd vendors (tests/harness/cdi, built here with Go), not our reading of its rules. A
device plugin spec and a DRA claim's spec whose node has a group that opens it read-write are
valid CDI 0.7.0, put the container's process in that group and make the node the container
user's; the same spec saying 0.6.0 is refused (the version rule that makes 0.7.0 necessary); a
spec without a group is a valid 0.5.0."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from edgefd.bus.key import DevNode
from edgefd.devplugin import cdi
from edgefd.devplugin.dra.checkpoint import Checkpoint
from edgefd.devplugin.dra.claims import Preparer
from edgefd.devplugin.links import LinkLayout
from tests.devplugin.devices import CORAL, NODE, PCIE, apex, coral, host_node, table
from tests.devplugin.dra.fakeapi import Claims
from tests.peers.processes import REPO_ROOT

pytestmark = pytest.mark.realpeer

MODULE = REPO_ROOT / "tests" / "harness" / "cdi"
USER = 65532


@pytest.fixture(scope="module")
def cdi_apply(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CDI library's reader and editor, built once per session (Go's build cache keeps it)."""
    go = shutil.which("go")
    if go is None:
        msg = "go not found: needed to build tests/harness/cdi (the runtime's CDI library)"
        if os.environ.get("CI"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    out = tmp_path_factory.mktemp("cdi") / "cdi-apply"
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"}
    subprocess.run(
        [go, "build", "-trimpath", "-o", str(out), "./cmd/cdi-apply"],
        cwd=MODULE, env=env, check=True, timeout=600,
    )  # fmt: skip
    return out


def apply(tool: Path, spec: Path) -> dict[str, Any]:
    r = subprocess.run(
        [str(tool), str(spec), str(USER), str(USER)], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_device_plugin_spec_with_a_group(tmp_path: Path, cdi_apply: Path) -> None:
    node = host_node(Path("/"), str(tmp_path / "dev/bus/usb/002/003"), 0o664, 46)
    layout = LinkLayout(None, str(tmp_path / "cdi"))
    specs = cdi.ResourceSpecs(str(tmp_path / "cdi"), "edgefd.io", layout)
    [written] = specs.sync([(CORAL, (coral(node=str(node)),)), (PCIE, ())])
    got = apply(cdi_apply, written)
    assert got["cdiVersion"] == "0.7.0"
    assert got["additionalGids"] == [46]
    assert got["devices"] == [
        {"path": "/dev/edgefd/coral-usb-2-1", "type": "c", "major": 189, "minor": 130,
         "uid": USER, "gid": USER}
    ]  # fmt: skip
    # the version rule: the same content declared 0.6.0 is refused by the library
    doc = json.loads(written.read_text())
    doc["cdiVersion"] = "0.6.0"
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    r = subprocess.run([str(cdi_apply), str(old), "1", "1"], capture_output=True, text=True)
    assert r.returncode == 1 and "at least v0.7.0" in r.stderr, r.stderr


def test_a_claim_spec_with_and_without_a_group(tmp_path: Path, cdi_apply: Path) -> None:
    usb = host_node(Path("/"), str(tmp_path / "dev/bus/usb/002/003"), 0o660, 46)
    pci = host_node(Path("/"), str(tmp_path / "dev/apex_0"), 0o660, 0)  # root's group: none
    claims = Claims()
    p = Preparer(NODE, str(tmp_path / "cdi"), LinkLayout(None), Checkpoint(tmp_path / "cp", NODE),
                 claims)  # fmt: skip
    p.update(table((coral(node=str(usb)), CORAL), (apex(nodes=(DevNode(str(pci)),)), PCIE)))
    with_group = claims.add("usb", ["coral-usb-2-1"])
    without = claims.add("pci", ["coral-pcie-0000-02-00-0"])
    p.prepare(with_group)
    p.prepare(without)
    got = apply(cdi_apply, tmp_path / "cdi" / f"edgefd.io-claim_{with_group.uid}.json")
    assert (got["cdiVersion"], got["additionalGids"]) == ("0.7.0", [46])
    assert "EDGEFD_CORAL_USB_DEVICES=coral-usb-2-1" in got["env"]
    got = apply(cdi_apply, tmp_path / "cdi" / f"edgefd.io-claim_{without.uid}.json")
    assert (got["cdiVersion"], got["additionalGids"]) == ("0.5.0", None)
    [dev] = got["devices"]
    assert (dev["path"].endswith("apex_0"), dev["uid"], dev["gid"]) == (True, USER, USER)


def test_the_lowest_version_without_a_group_is_read(tmp_path: Path, cdi_apply: Path) -> None:
    """0.5.0 for a plain class, 0.6.0 for a class with a dot: each what the library asks for."""
    node = host_node(Path("/"), str(tmp_path / "dev/bus/usb/002/003"), 0o644, 46)  # g: r only
    layout = LinkLayout(None, str(tmp_path / "cdi"))
    specs = cdi.ResourceSpecs(str(tmp_path / "cdi"), "edgefd.io", layout)
    dotted = replace(CORAL, name="edgefd.io/coral.usb")
    written = specs.sync([(CORAL, (coral(node=str(node)),)), (dotted, (coral(node=str(node)),))])
    got = {p.name: apply(cdi_apply, p) for p in written}
    assert {n: (g["cdiVersion"], g["additionalGids"]) for n, g in got.items()} == {
        "edgefd.io-coral-usb.json": ("0.5.0", None),
        "edgefd.io-coral.usb.json": ("0.6.0", None),
    }
