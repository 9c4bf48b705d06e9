"""What a snapshot's Diff says, from the inventory's scans of a fixture host: a Coral that
re-enumerates is one device whose change names its fields, keeps its last node while away and
both numbers when back (`describe()` says it in one line), and a re-plug between two scans is
a move; a rescan that finds nothing new changes nothing."""

from __future__ import annotations

from pathlib import Path

from edgefd.bus.key import DevNode
from tests.fixturegen import HostBuilder

from .inventories import CORAL_RUNTIME, inventory


def test_the_diff_says_same_device_new_node_and_keeps_both_numbers(host: Path) -> None:
    inv, hb = inventory(host), HostBuilder(host)
    first = inv.refresh()
    assert first is not None
    old = first.device("coral-usb-2-1").nodes[0]  # type: ignore[union-attr]
    hb.remove_usb("2-1")
    gone = inv.refresh()
    assert gone is not None
    [change] = gone.diff.changes
    assert change.kind == "changed" and change.fields == ("present", "reason")
    assert change.after is not None and change.after.reason == "re-enumerating at port 2-1"
    assert change.after.nodes == (old,)  # the last node it had, with its number
    hb.add_usb(CORAL_RUNTIME)
    back = inv.refresh()
    assert back is not None
    [change] = back.diff.changes
    assert set(change.fields) == {"present", "reason", "state", "ids", "nodes"}
    assert change.before.nodes == (old,)  # type: ignore[union-attr]
    assert change.after.nodes == (DevNode("/dev/bus/usb/002/009", "189:136"),)  # type: ignore[union-attr]
    # the word every tool logs for it (issue 32 item 2): re-enumerated, not "back at"
    assert change.describe() == (
        "coral-usb-2-1: re-enumerated (boot -> runtime) at port 2-1; node "
        f"{old.path} ({old.dev}) -> /dev/bus/usb/002/009 (189:136); ids changed"
    )
    assert change.event == change.log_fields()["event"] == "re-enumerated"
    # replugged between two scans: present before and after, a new node
    hb.remove_usb("2-1")
    hb.add_usb({**CORAL_RUNTIME, "devnum": 12})
    again = inv.refresh()
    assert again is not None
    [change] = again.diff.changes
    assert change.moved and change.fields == ("nodes",)
    # the same word as when the absence was seen (what a loaded node's scan sees of a re-plug)
    assert change.event == "re-enumerated"
    assert change.describe().startswith("coral-usb-2-1: re-enumerated at port 2-1; node ")
    assert inv.refresh().diff.changes == ()  # type: ignore[union-attr]


def test_a_device_too_hot_changes_its_reason_and_condition_said_once(tmp_path: Path) -> None:
    from edgefd.devplugin.resources import default_config
    from tests.fixturegen import build_host

    root = build_host("x86-coral-pcie", tmp_path / "host", devicetree=False)
    inv = inventory(root, selectors=default_config().selectors, temperature={})
    inv.scan()
    (root / "sys/class/apex/apex_0/temp").write_text("90000\n")
    [change] = inv.scan().diff.changes
    assert change.fields == ("reason", "condition")
    assert change.describe() == "coral-pcie-0000-02-00-0: 90.0 °C, above the limit 84.8 °C"
    assert change.log_fields()["condition"] == "overheating"
