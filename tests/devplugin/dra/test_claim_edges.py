"""The edges of NodePrepareResources / NodeUnprepareResources, through the plugin's DRA socket
with the kubelet's own stubs (as test_kubeletplugin.py): a claim status listing one device
twice, a UID that is not a Kubernetes UID (which must never name the device plugin's spec in
a shared CDI directory), and state files that are not regular files (a FIFO must never block)."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edgefd.devplugin import cdi
from edgefd.devplugin.dra.api import dra_pb2 as dra
from edgefd.devplugin.dra.api import dra_pb2_grpc as dra_grpc
from edgefd.devplugin.dra.checkpoint import Checkpoint
from edgefd.devplugin.dra.claims import ClaimRef, PrepareError, Preparer
from edgefd.devplugin.links import LinkLayout
from tests.devplugin.dra.test_cdi import CORAL, NODE, Claims, coral, table
from tests.devplugin.dra.test_kubeletplugin import channel, kubelet_dir, served

__all__ = ["kubelet_dir", "served"]  # fixtures used here

NOT_UIDS = [
    "coral-usb",
    "../../etc/passwd",
    "",
    str(uuid.uuid4()).upper(),
    str(uuid.uuid4()) + "\n",
    str(uuid.uuid4()) + "/x",
]


def finishes(fn: Callable[[], Any], seconds: float = 5.0) -> Any:
    """fn() on a thread; fails if it has not returned within `seconds` (a blocked open)."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "blocked"
    return out[0] if out else None


def twice(claims: Claims, name: str, requests: list[str]) -> ClaimRef:
    ref = claims.add(name, ["coral-usb-2-1"])
    results = [
        {"request": r, "driver": "edgefd.io", "pool": NODE, "device": "coral-usb-2-1"}
        for r in requests
    ]
    claims.objects[("default", name)]["status"]["allocation"]["devices"]["results"] = results
    return ref


@pytest.mark.parametrize("requests", [["tpu", "tpu"], ["a", "b"]])
def test_a_device_listed_twice_is_prepared_once(served, kubelet_dir: Path, requests) -> None:
    kp, claims, _ = served
    ref = twice(claims, "dup", requests)
    with channel(kp.service_socket) as ch:
        stub = dra_grpc.DRAPluginStub(ch)
        claim = dra.Claim(namespace=ref.namespace, uid=ref.uid, name=ref.name)
        resp = stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[claim]), timeout=5)
    got = resp.claims[ref.uid]
    assert not got.error, got.error
    [dev] = got.devices
    assert list(dev.request_names) == list(dict.fromkeys(requests))
    assert list(dev.cdi_device_ids) == [f"edgefd.io/claim={ref.uid}-coral-usb-2-1"]
    spec = json.loads((kubelet_dir / "cdi" / f"edgefd.io-claim_{ref.uid}.json").read_text())
    assert [d["name"] for d in spec["devices"]] == [f"{ref.uid}-coral-usb-2-1"]
    assert spec["containerEdits"]["env"] == ["EDGEFD_CORAL_USB_DEVICES=coral-usb-2-1"]


@pytest.mark.parametrize("uid", NOT_UIDS)
def test_a_uid_that_is_not_a_kubernetes_uid_is_refused_and_touches_nothing(
    served, kubelet_dir: Path, uid: str
) -> None:
    kp, claims, _ = served
    cdi_dir = kubelet_dir / "cdi"
    cdi_dir.mkdir(exist_ok=True)
    plugin_spec = cdi_dir / "edgefd.io-coral-usb.json"  # the device plugin's, --api both
    plugin_spec.write_text(json.dumps(cdi.spec("edgefd.io/coral-usb", [{"name": "x"}])))
    with channel(kp.service_socket) as ch:
        stub = dra_grpc.DRAPluginStub(ch)
        claim = dra.Claim(namespace="default", uid=uid, name="c")
        un = stub.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=[claim]), 5)
        pre = stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[claim]), 5)
    for resp in (un, pre):
        assert "is not a Kubernetes UID" in resp.claims[uid].error
    assert not pre.claims[uid].devices
    assert plugin_spec.exists()
    assert sorted(p.name for p in cdi_dir.iterdir()) == ["edgefd.io-coral-usb.json"]
    assert claims.gets == 0  # refused before asking the API server


def test_claim_specs_and_device_plugin_specs_cannot_share_a_name(tmp_path: Path) -> None:
    uid = str(uuid.uuid4())
    claim = cdi.claim_spec_path(tmp_path, uid)
    assert claim.name == f"edgefd.io-claim_{uid}.json" and cdi.is_claim_spec(claim)
    # the device plugin's files are `<vendor>-<class>.json`: a class `claim_<UID>` is refused
    assert not cdi.is_claim_spec(cdi.spec_path(tmp_path, "edgefd.io/coral-usb", "coral-usb"))
    assert cdi.is_claim_spec(cdi.spec_path(tmp_path, f"edgefd.io/claim_{uid}", f"claim_{uid}"))


# -- state that is not a regular file


def fifo_symlink_huge(path: Path, what: str) -> None:
    if what == "fifo":
        os.mkfifo(path)
    elif what == "symlink":
        path.symlink_to("/dev/zero")
    elif what == "huge":
        with open(path, "wb") as fh:
            fh.truncate(64 << 20)


@pytest.mark.parametrize("what", ["fifo", "symlink", "huge"])
def test_a_checkpoint_that_is_not_a_small_regular_file_is_moved_aside_without_blocking(
    tmp_path: Path, what: str, caplog
) -> None:
    d = tmp_path / "plugin"
    d.mkdir()
    fifo_symlink_huge(d / "checkpoint.json", what)
    assert finishes(Checkpoint(d, NODE).load) == {}
    assert "unreadable" in caplog.text
    assert os.path.lexists(d / "checkpoint.json.corrupt")


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


@pytest.mark.parametrize("what", ["fifo", "symlink"])
def test_a_checkpoint_path_obstructed_after_start_is_replaced_not_written_through(
    tmp_path: Path, what: str
) -> None:
    """The checkpoint is the plugin's own file: what is put in its place later (a FIFO, a
    link to a file elsewhere) is replaced by the next write, never written through, and the
    claim is prepared."""
    claims = Claims()
    cp = Checkpoint(tmp_path / "plugin", NODE)
    cp.load()
    p = Preparer(NODE, str(tmp_path / "cdi"), LinkLayout(None), cp, claims)
    p.update(table((coral(), CORAL)))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("keep\n")
    (tmp_path / "plugin").mkdir()
    if what == "fifo":
        os.mkfifo(cp.path)
    else:
        cp.path.symlink_to(elsewhere)
    ref = claims.add("c", ["coral-usb-2-1"])
    finishes(lambda: p.prepare(ref))
    assert cp.path.is_file() and not cp.path.is_symlink()
    assert list(Checkpoint(tmp_path / "plugin", NODE).load()) == [ref.uid]
    assert elsewhere.read_text() == "keep\n"
