"""Bare /dev nodes a resource names by glob (edgefd.bus.devnodes), read under an explicit host
root: every match of every glob once, sorted, as the host's path; no char number for what is
not a character device; nothing outside /dev; no globs, nothing read."""

from __future__ import annotations

from pathlib import Path

from edgefd.bus.devnodes import glob_nodes
from edgefd.bus.key import DevNode
from edgefd.core.hostroot import HostRoot


def test_every_match_once_sorted_as_the_hosts_path(tmp_path: Path) -> None:
    dri = tmp_path / "dev/dri"
    dri.mkdir(parents=True)
    for name in ("renderD129", "card0", "renderD128"):
        (dri / name).write_text("")  # a fixture tree's plain files: no char number
    host = HostRoot.of(tmp_path)
    assert glob_nodes(host, ["/dev/dri/renderD*", "/dev/dri/*"]) == (
        DevNode("/dev/dri/card0"),
        DevNode("/dev/dri/renderD128"),
        DevNode("/dev/dri/renderD129"),
    )
    assert glob_nodes(host, ["/dev/hailo*"]) == ()
    assert glob_nodes(host, []) == ()


def test_nothing_outside_dev(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/hailo0").write_text("")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/shadow").write_text("")
    host = HostRoot.of(tmp_path)
    assert glob_nodes(host, ["/dev/../etc/*", "/etc/*", "/dev/hailo*"]) == (DevNode("/dev/hailo0"),)
