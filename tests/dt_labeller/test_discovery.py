"""Choosing the tree source under a host root (in-process, to fake root-only files)."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from edgefd.core.errors import BadInput, HostUnreadable
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
    # an x86 machine: /sys/firmware is there (every kernel has it), with no devicetree in it
    (tmp_path / "sys" / "firmware" / "acpi").mkdir(parents=True)
    assert discovery.discover(HostRoot.of(tmp_path)) is None


def test_no_sysfs_is_unreadable_not_empty(tmp_path: Path) -> None:
    with pytest.raises(HostUnreadable, match=r"firmware \(No such file or directory\): is sysfs"):
        discovery.discover(HostRoot.of(tmp_path))


def test_missing_host_root_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(HostUnreadable, match=r"host root .*/nonexistent does not exist"):
        discovery.discover(HostRoot.of(tmp_path / "nonexistent"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(HostUnreadable, match="is not a directory"):
        discovery.discover(HostRoot.of(tmp_path / "file"))


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


def test_symlink_loop_in_tree_location_is_unreadable(tmp_path: Path) -> None:
    (tmp_path / "sys" / "firmware").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "device-tree").symlink_to("device-tree")
    with pytest.raises(HostUnreadable, match=r"/proc/device-tree: cannot read .*symbolic links"):
        discovery.discover(HostRoot.of(tmp_path))


def test_tree_location_that_is_a_file_is_unreadable(tmp_path: Path) -> None:
    (tmp_path / "sys" / "firmware" / "devicetree").mkdir(parents=True)
    (tmp_path / "sys" / "firmware" / "devicetree" / "base").write_text("x")
    with pytest.raises(HostUnreadable, match="devicetree/base: not a directory"):
        discovery.discover(HostRoot.of(tmp_path))


def _fdt_of_kind(root: Path, kind: str, blob: bytes) -> Path:
    fw = root / "sys" / "firmware"
    fw.mkdir(parents=True, exist_ok=True)
    fdt = fw / "fdt"
    if kind == "fifo":
        os.mkfifo(fdt)
    elif kind == "directory":
        fdt.mkdir()
    elif kind == "loop":
        fdt.symlink_to("fdt")
    else:
        fdt.write_bytes(blob)
    return fdt


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("fifo", "a FIFO, not a devicetree blob file"),
        ("directory", "a directory, not a devicetree blob file"),
        ("loop", "Too many levels of symbolic links"),
    ],
)
def test_fdt_that_cannot_be_read_is_an_error_without_a_directory_form(
    blob: bytes, tmp_path: Path, kind: str, why: str
) -> None:
    _fdt_of_kind(tmp_path, kind, blob)
    t0 = time.monotonic()
    with pytest.raises(HostUnreadable) as e:
        discovery.discover(HostRoot.of(tmp_path))
    assert time.monotonic() - t0 < 2.0  # a FIFO is never waited on
    assert str(e.value) == f"/sys/firmware/fdt: cannot read ({why})"


@pytest.mark.parametrize("kind", ["fifo", "directory", "loop"])
def test_fdt_that_cannot_be_read_falls_back_to_a_readable_directory_form(
    blob: bytes, tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    _fdt_of_kind(tmp_path, kind, blob)
    expand_dtb(blob, tmp_path / "sys" / "firmware" / "devicetree" / "base")
    t = discovery.discover(HostRoot.of(tmp_path))
    assert t is not None and t.form == "directory"
    assert "/sys/firmware/fdt: cannot read" in caplog.text
    assert "reading /sys/firmware/devicetree/base instead" in caplog.text


def test_root_only_blob_without_a_directory_form_is_an_error(
    blob: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fdt_of_kind(tmp_path, "file", blob)

    def denied(path: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(discovery, "read_blob_file", denied)
    with pytest.raises(HostUnreadable, match="fdt: cannot read \\(permission denied\\)"):
        discovery.discover(HostRoot.of(tmp_path))


def test_io_error_on_the_blob_and_unlistable_directory_name_both(
    blob: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fdt_of_kind(tmp_path, "file", blob)
    base = tmp_path / "sys" / "firmware" / "devicetree" / "base"
    expand_dtb(blob, base)

    def eio(path: Path) -> bytes:
        raise OSError(errno.EIO, "Input/output error", str(path))

    real_scandir = os.scandir

    def fake_scandir(path):  # type: ignore[no-untyped-def]
        if str(path) == str(base):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(discovery, "read_blob_file", eio)
    monkeypatch.setattr(os, "scandir", fake_scandir)
    with pytest.raises(HostUnreadable) as e:
        discovery.discover(HostRoot.of(tmp_path))
    assert str(e.value) == (
        "/sys/firmware/fdt: cannot read (Input/output error); "
        "/sys/firmware/devicetree/base: cannot list (Permission denied)"
    )


def test_corrupt_blob_with_no_fallback(tmp_path: Path) -> None:
    (tmp_path / "sys" / "firmware").mkdir(parents=True)
    (tmp_path / "sys" / "firmware" / "fdt").write_bytes(b"\0" * 64)
    with pytest.raises(BadInput, match=r"^/sys/firmware/fdt: not a usable devicetree blob: bad"):
        discovery.discover(HostRoot.of(tmp_path))
