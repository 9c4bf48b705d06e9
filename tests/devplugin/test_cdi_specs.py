"""The device plugin's CDI specs (--cdi-spec-dir) when one kind's file cannot be written: a
symlink or a FIFO in its place (or the name of a DRA claim's spec) costs that kind only, with
one warning, and Allocate answers its devices with device specs, never a CDI name without a
spec. The kubelet's side of this is in tests/devplugin/dra/test_cdi_devplugin.py."""

from __future__ import annotations

import logging
import os
import stat
import threading
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from edgefd.devplugin import cdi
from edgefd.devplugin.links import LinkLayout
from edgefd.devplugin.v1beta1.allocate import container_response
from tests.devplugin.dra.test_cdi import CORAL, PCIE, apex, coral


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


def test_without_a_spec_registry_allocate_never_names_cdi_devices(tmp_path: Path) -> None:
    layout = LinkLayout(None, cdi_spec_dir=str(tmp_path))
    r = container_response(CORAL, [coral()], layout, "edgefd.io", None)
    assert not r.cdi_devices and r.devices
