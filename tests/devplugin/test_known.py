"""An earlier release's per-resource `.known.json` files become the inventory's state file,
once, under the new names, and are removed."""

from __future__ import annotations

import json
from pathlib import Path

from edgefd.bus.catalogue import load_catalogue
from edgefd.devplugin.known import migrate_known, take_over
from tests.inventory.inventories import Clock, inventory

NOW = 1_800_000_000.0


def test_known_json_files_are_taken_over(tmp_path: Path) -> None:
    links = tmp_path / "links"
    (links / "edgefd.io_coral-usb").mkdir(parents=True)
    (links / "edgefd.io_ncs2").mkdir()
    (links / "edgefd.io_coral-usb" / ".known.json").write_text(
        json.dumps(
            {
                "resource": "edgefd.io/coral-usb",
                "devices": [
                    {
                        "id": "usb-2-1",
                        "bus": "usb",
                        "location": "2-1",
                        "ids": "18d1:9302",
                        "state": "runtime",
                        "devnodes": ["/dev/bus/usb/002/005"],
                        "last_seen": NOW - 5,
                    },
                    {"id": "../x", "bus": "usb", "location": "../x", "last_seen": NOW},
                ],
            }
        )
    )
    (links / "edgefd.io_ncs2" / ".known.json").write_text(
        json.dumps(
            {
                "devices": [
                    {
                        "id": "usb-sn-03e72485",
                        "bus": "usb",
                        "location": "1-1.1",
                        "ids": "03e7:f63b",
                        "last_seen": NOW - 9,
                    }
                ]
            }
        )
    )
    devices, files = migrate_known(links, load_catalogue(), NOW)
    got = {d.name: (d.model, d.kind, d.devnodes, d.resources, d.by_serial) for d in devices}
    assert got == {
        "coral-usb-2-1": (
            "coral-usb",
            "edgetpu",
            ("/dev/bus/usb/002/005",),
            ("edgefd.io/coral-usb",),
            False,
        ),
        "ncs2-sn-03e72485": ("ncs2", "myriadx", (), ("edgefd.io/ncs2",), True),
    }
    assert sorted(f.parent.name for f in files) == ["edgefd.io_coral-usb", "edgefd.io_ncs2"]


def test_known_json_is_taken_over_once_and_removed(host: Path, tmp_path: Path) -> None:
    """An upgrade: the device plugin's old per-resource memory becomes the state file, under
    the new names, and is read only once."""
    import json

    links = tmp_path / "links"
    (links / "edgefd.io_ncs2").mkdir(parents=True)
    old = links / "edgefd.io_ncs2" / ".known.json"
    gone = {"id": "usb-1-4", "bus": "usb", "location": "1-4", "ids": "03e7:f63b"}
    old.write_text(json.dumps({"devices": [{**gone, "last_seen": 1_799_999_000.0}]}))
    clock = Clock()
    take_over(str(links), links / "devices.json", load_catalogue(), clock())
    inv = inventory(host, state_file=links / "devices.json", clock=clock)
    snap = inv.refresh()
    assert snap is not None
    remembered = snap.device("ncs2-1-4")
    assert remembered is not None and not remembered.present
    assert remembered.resources == ("edgefd.io/ncs2",)
    assert not old.exists() and (links / "devices.json").exists()
    take_over(str(links), links / "devices.json", load_catalogue(), clock())
    again = inventory(host, state_file=links / "devices.json", clock=clock)
    assert again.refresh().device("ncs2-1-4") is not None  # type: ignore[union-attr]
