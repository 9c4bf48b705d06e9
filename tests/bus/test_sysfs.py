"""tools.common.sysfs: every way an attribute file can be wrong gives None and a reason."""

from __future__ import annotations

import os
from pathlib import Path

from tools.common import sysfs


def test_hex_normalisation(tmp_path: Path) -> None:
    f = tmp_path / "class"
    f.write_text("0x030200\n")
    assert sysfs.read_hex(f) == "030200"
    f.write_text("  1A6E \n")
    assert sysfs.read_hex(f) == "1a6e"
    w: list[str] = []
    f.write_text("0x\n")
    assert sysfs.read_hex(f, w) is None and "is not hex" in w[0]
    f.write_text("fe")
    assert sysfs.read_hex(f, w, width=4) is None and "4 hex digits" in w[-1]


def test_missing_only_reported_when_required(tmp_path: Path) -> None:
    w: list[str] = []
    assert sysfs.read_text(tmp_path / "serial", w) is None and w == []
    assert sysfs.read_text(tmp_path / "idVendor", w, required=True) is None
    assert w == [f"{tmp_path}/idVendor: missing"]


def test_not_a_file(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "fifo")  # must not block
    w: list[str] = []
    assert sysfs.read_text(tmp_path / "d", w) is None
    assert sysfs.read_text(tmp_path / "fifo", w) is None
    assert all("not a regular file" in x for x in w) and len(w) == 2


def test_loops_and_dangling_links(tmp_path: Path) -> None:
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    os.symlink("nowhere", tmp_path / "c")
    w: list[str] = []
    assert sysfs.read_text(tmp_path / "a", w) is None and "Too many levels" in w[0]
    assert sysfs.read_text(tmp_path / "c", w) is None and len(w) == 1  # dangling == missing


def test_bounded_and_garbage(tmp_path: Path) -> None:
    f = tmp_path / "big"
    f.write_bytes(b"a" * (sysfs.MAX_ATTR_BYTES + 1))
    w: list[str] = []
    assert sysfs.read_text(f, w) is None and "longer than" in w[0]
    f.write_bytes(b"ab\x00cd")
    assert sysfs.read_text(f, w) is None and "NUL" in w[-1]
    f.write_bytes(b"Caf\xe9 Ltd\n")
    assert sysfs.read_text(f, w) == "Caf\ufffd Ltd" and "not UTF-8" in w[-1]


def test_int_and_links(tmp_path: Path) -> None:
    w: list[str] = []
    (tmp_path / "numa_node").write_text("-1\n")
    assert sysfs.read_int(tmp_path / "numa_node") == -1
    (tmp_path / "busnum").write_text("one\n")
    assert sysfs.read_int(tmp_path / "busnum", w) is None and "not a decimal" in w[0]
    os.symlink("../../bus/pci/drivers/apex", tmp_path / "driver")  # dangling is fine
    assert sysfs.read_link_name(tmp_path / "driver") == "apex"
    assert sysfs.read_link_name(tmp_path / "nolink") is None
    assert sysfs.read_link_name(tmp_path / "busnum", w) is None and "not a symlink" in w[-1]


def test_uevent() -> None:
    assert sysfs.parse_uevent("DEVNAME=bus/usb/001/004\nDEVTYPE=usb_device\njunk\n") == {
        "DEVNAME": "bus/usb/001/004",
        "DEVTYPE": "usb_device",
    }
