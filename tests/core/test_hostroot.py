"""HostRoot: host paths mapped under an explicit root, symlinks resolved without escaping it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgefd.core.hostroot import HostRoot


def test_path_mapping(tmp_path: Path) -> None:
    h = HostRoot.of(tmp_path)
    assert h.path("/sys/bus/usb") == tmp_path / "sys" / "bus" / "usb"
    assert h.path("sys/bus") == tmp_path / "sys" / "bus"
    assert h.path("/") == tmp_path
    assert h.path("") == tmp_path
    assert HostRoot.of("/").path("/proc/device-tree") == Path("/proc/device-tree")


def test_path_mapping_cannot_climb_out(tmp_path: Path) -> None:
    h = HostRoot.of(tmp_path)
    assert h.path("/sys/../../../etc/passwd") == tmp_path / "etc" / "passwd"
    assert h.path("../x") == tmp_path / "x"


def test_host_path_inverse(tmp_path: Path) -> None:
    h = HostRoot.of(tmp_path)
    assert h.host_path(tmp_path / "sys" / "x") == "/sys/x"
    assert h.host_path(tmp_path) == "/"
    assert h.host_path("/elsewhere/x") == "/elsewhere/x"  # outside the root: unchanged
    assert h.host_path(tmp_path / "..hidden") == "/..hidden"


def test_resolve_follows_relative_and_absolute_links_inside_root(tmp_path: Path) -> None:
    (tmp_path / "sys" / "devices" / "usb1" / "1-1").mkdir(parents=True)
    (tmp_path / "sys" / "bus" / "usb" / "devices").mkdir(parents=True)
    os.symlink("../../../devices/usb1/1-1", tmp_path / "sys" / "bus" / "usb" / "devices" / "1-1")
    os.symlink("/sys/devices/usb1", tmp_path / "abs")
    h = HostRoot.of(tmp_path)
    assert h.resolve("/sys/bus/usb/devices/1-1") == tmp_path / "sys" / "devices" / "usb1" / "1-1"
    assert h.resolve("/abs/1-1") == tmp_path / "sys" / "devices" / "usb1" / "1-1"


def test_resolve_never_escapes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (tmp_path / "secret").write_text("x")
    os.symlink("../../../../../secret", root / "a" / "up")
    os.symlink("/etc", root / "etc-link")
    h = HostRoot.of(root)
    assert h.resolve("/a/up") == root / "secret"
    assert h.resolve("/../../secret") == root / "secret"
    assert h.resolve("/etc-link/passwd") == root / "etc" / "passwd"
    for p in ("/a/up", "/etc-link/passwd", "/a/../../x"):
        assert os.path.commonpath([h.resolve(p), root]) == str(root)


@pytest.mark.parametrize("target", ["loop", "/loop", "./loop/x"])
def test_resolve_symlink_loop_raises(tmp_path: Path, target: str) -> None:
    os.symlink(target, tmp_path / "loop")
    with pytest.raises(OSError, match="too many levels of symbolic links"):
        HostRoot.of(tmp_path).resolve("/loop")


def test_two_roots_side_by_side(tmp_path: Path) -> None:
    a, b = HostRoot.of(tmp_path / "a"), HostRoot.of(tmp_path / "b")
    assert a.path("/x") != b.path("/x")
    assert a == HostRoot.of(str(tmp_path / "a"))
