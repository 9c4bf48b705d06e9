"""The stable device links (links.py): where they live (`<links-dir>/<resource>/<name>/<n>`,
none without a links directory, the inventory's state file beside them), and the keeper that
holds each resource's links equal to its devices: a usable device's link points at its current
node and follows it when the node changes, an unusable or absent one has no link (no stale
grant), a device that is gone loses its directory, and what is not a device directory of the
resource is left alone. The links in a running plugin are v1beta1/test_frontend.py's."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from edgefd.devplugin.links import STATE_FILE, LinkKeeper, LinkLayout
from tests.devplugin.devices import apex, coral

RES = "edgefd.io/coral-usb"


def test_the_layout() -> None:
    layout = LinkLayout("/links", cdi_spec_dir="/cdi")
    assert layout.resource_dir(RES) == "/links/edgefd.io_coral-usb"
    assert layout.link(RES, "coral-usb-2-1", 1) == "/links/edgefd.io_coral-usb/coral-usb-2-1/1"
    assert layout.state_file == f"/links/{STATE_FILE}" == "/links/devices.json"
    off = LinkLayout(None)
    assert (off.resource_dir(RES), off.link(RES, "x", 0), off.state_file) == (None, None, None)


def test_links_follow_the_devices(tmp_path: Path) -> None:
    layout = LinkLayout(str(tmp_path / "links"))
    keeper = LinkKeeper(layout)
    link = Path(layout.link(RES, "coral-usb-2-1", 0) or "")
    other = Path(layout.link(RES, "coral-usb-1-1", 0) or "")
    keeper.sync(RES, [coral(), coral("/dev/bus/usb/001/004", port="1-1")])
    assert os.readlink(link) == "/dev/bus/usb/002/003"
    assert os.readlink(other) == "/dev/bus/usb/001/004"
    # a new node (a re-plug, a re-enumeration): the same link, pointing at it
    keeper.sync(RES, [coral("/dev/bus/usb/002/009"), coral("/dev/bus/usb/001/004", port="1-1")])
    assert os.readlink(link) == "/dev/bus/usb/002/009"
    assert not Path(f"{link}.tmp").exists()
    # absent, or present without a usable node: no link while it cannot be used
    keeper.sync(RES, [coral(present=False, reason="unplugged"), coral(port="1-1", reason="x")])
    assert not os.path.lexists(link) and not os.path.lexists(other)
    assert link.parent.is_dir()  # still a device of the resource
    # back: linked again; the other is gone from the list: its directory goes
    keeper.sync(RES, [coral("/dev/bus/usb/002/010")])
    assert os.readlink(link) == "/dev/bus/usb/002/010"
    assert not other.parent.exists()


def test_what_is_not_a_device_directory_is_left_alone(tmp_path: Path) -> None:
    layout = LinkLayout(str(tmp_path / "links"))
    rdir = Path(layout.resource_dir(RES) or "")
    rdir.mkdir(parents=True)
    (rdir / "notes.txt").write_text("keep\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "f").write_text("keep\n")
    (rdir / "a-link").symlink_to(tmp_path / "elsewhere")
    LinkKeeper(layout).sync(RES, [])
    assert (rdir / "notes.txt").read_text() == "keep\n"
    assert (tmp_path / "elsewhere" / "f").read_text() == "keep\n"
    assert (rdir / "a-link").is_symlink()


def test_every_node_of_a_device_has_its_link_and_no_directory_means_nothing(
    tmp_path: Path,
) -> None:
    two = apex()._replace(nodes=(*apex().nodes, *coral().nodes))
    layout = LinkLayout(str(tmp_path / "links"))
    LinkKeeper(layout).sync("edgefd.io/coral-pcie", [two])
    assert [
        os.readlink(layout.link("edgefd.io/coral-pcie", two.name, n) or "") for n in (0, 1)
    ] == [
        "/dev/apex_0",
        "/dev/bus/usb/002/003",
    ]
    LinkKeeper(LinkLayout(None)).sync(RES, [coral()])  # links off: nothing to keep, no error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["links"]


def test_a_links_directory_that_cannot_be_written_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "links").write_text("a file, not a directory")
    with caplog.at_level(logging.WARNING):
        LinkKeeper(LinkLayout(str(tmp_path / "links"))).sync(RES, [coral()])
    assert f"{RES}: cannot maintain device links in" in caplog.text
