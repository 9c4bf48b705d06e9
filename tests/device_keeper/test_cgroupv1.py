"""cgroup v1's devices files, on a stand-in directory of regular files (the real controller is
test_kernel.py, root only): a grant's writes, revocations first, each saying whether
devices.list already has it so; a cgroup that allows every device refused as unrestricted; and
the writes made without following a symlink planted at a file's name."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from edgefd.device_keeper import cgroupv1
from edgefd.device_keeper.cgroupv2 import Unrestricted
from edgefd.device_keeper.rules import DeviceNumber

OLD, NEW = DeviceNumber("c", 189, 4), DeviceNumber("c", 189, 5)


def v1_dir(root: Path, listed: str) -> Path:
    (root / "devices.list").write_text(listed)
    for f in ("devices.allow", "devices.deny"):
        (root / f).write_text("")
    return root


def test_revocations_come_first_and_say_whether_they_change_anything(tmp_path: Path) -> None:
    cg = v1_dir(tmp_path, "c 1:3 rwm\nc 189:4 rw\nc 189:5 r\nc *:* m\n")
    writes = cgroupv1.plan(str(cg), {NEW: "rw", DeviceNumber("c", 1, 3): "rw"}, {OLD})
    assert [(w.file, w.line, w.changes) for w in writes] == [
        ("devices.deny", "c 189:4 rwm", True),
        ("devices.allow", "c 1:3 rw", False),  # already allowed rwm
        ("devices.allow", "c 189:5 rw", True),  # r only so far
    ]
    assert str(writes[0]) == "devices.deny: c 189:4 rwm"
    again = cgroupv1.plan(str(v1_dir(tmp_path, "c 189:5 rw\n")), {NEW: "rw"}, {OLD})
    assert [w.changes for w in again] == [False, False]  # already so: harmless to repeat


def test_a_cgroup_that_allows_every_device_is_unrestricted(tmp_path: Path) -> None:
    cg = v1_dir(tmp_path, "a *:* rwm\n")
    with pytest.raises(Unrestricted, match="allows every device"):
        cgroupv1.plan(str(cg), {NEW: "rw"}, {OLD})


def test_apply_writes_each_line_to_its_file_and_follows_no_symlink(tmp_path: Path) -> None:
    (tmp_path / "cg").mkdir()
    cg = v1_dir(tmp_path / "cg", "c 189:4 rw\n")
    cgroupv1.apply(str(cg), cgroupv1.plan(str(cg), {NEW: "rw"}, {OLD}))
    assert (cg / "devices.deny").read_text() == "c 189:4 rwm"
    assert (cg / "devices.allow").read_text() == "c 189:5 rw"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("")
    (cg / "devices.allow").unlink()
    (cg / "devices.allow").symlink_to(elsewhere)
    with pytest.raises(OSError) as e:
        cgroupv1.apply(str(cg), [cgroupv1.Write("devices.allow", "c 189:5 rw")])
    assert e.value.errno == errno.ELOOP and elsewhere.read_text() == ""
