"""Choosing the tree source under a host root (in-process, to fake root-only files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefd.core.errors import BadInput
from edgefd.core.hostroot import HostRoot
from edgefd.dt_labeller import discovery
from tests.fixturegen.devicetree import compile_dts, expand_dtb

DTS = '/dts-v1/;\n/ { compatible = "acme,board"; cpus { cpu@0 { compatible = "arm,a53"; }; }; };\n'


@pytest.fixture(scope="module")
def blob() -> bytes:
    return compile_dts(DTS)


def test_root_only_blob_falls_back_to_directory_form(
    blob: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "sys" / "firmware").mkdir(parents=True)
    (tmp_path / "sys" / "firmware" / "fdt").write_bytes(blob)
    expand_dtb(blob, tmp_path / "sys" / "firmware" / "devicetree" / "base")

    def denied(path: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(discovery, "read_blob_file", denied)
    with caplog.at_level("INFO"):
        t = discovery.discover(HostRoot.of(tmp_path))
    assert t is not None and t.form == "directory"
    assert t.source == "/sys/firmware/devicetree/base"
    assert "root-only" in caplog.text


def test_nothing_found_returns_none(tmp_path: Path) -> None:
    assert discovery.discover(HostRoot.of(tmp_path)) is None


def test_proc_symlink_pointing_outside_is_rerooted(blob: bytes, tmp_path: Path) -> None:
    # /proc/device-tree -> /sys/firmware/devicetree/base must resolve inside the root even
    # though the real host's /sys has no such directory here
    expand_dtb(blob, tmp_path / "sys" / "firmware" / "devicetree" / "base")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "device-tree").symlink_to("/sys/firmware/devicetree/base")
    import shutil

    shutil.move(tmp_path / "sys" / "firmware" / "devicetree", tmp_path / "dt-real")
    (tmp_path / "sys" / "firmware" / "devicetree").symlink_to("../../dt-real")
    t = discovery.discover(HostRoot.of(tmp_path))
    assert t is not None and [n.path for n in t.nodes] == ["/", "/cpus", "/cpus/cpu@0"]


def test_symlink_loop_in_tree_location_is_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "device-tree").symlink_to("device-tree")
    assert discovery.discover(HostRoot.of(tmp_path)) is None


def test_corrupt_blob_with_no_fallback(tmp_path: Path) -> None:
    (tmp_path / "sys" / "firmware").mkdir(parents=True)
    (tmp_path / "sys" / "firmware" / "fdt").write_bytes(b"\0" * 64)
    with pytest.raises(BadInput, match="bad magic"):
        discovery.discover(HostRoot.of(tmp_path))
