"""What a bus scan says to people and scripts (report.py), from one evaluation: the --explain
text (the settings, each device's lines with a refused label marked, the catalogue match it
counts as, the capabilities over all buses, the warnings with host paths, the labels) kept to
printable lines whatever a device calls itself; and the JSON inventory (every device through
the scanner's own shape, the capabilities by kind, the labels sorted, paths as the host sees
them)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from edgefd.bus.catalogue import load_catalogue
from edgefd.bus.enumerate import BusReader, ScanResult
from edgefd.bus.key import DeviceKey
from edgefd.core.hostroot import HostRoot
from edgefd.core.labels import Derivation
from edgefd.inventory.device import Device, Facts
from edgefd.scan.config import SourceConfig
from edgefd.scan.derive import BusSpec, DeviceReport, evaluate
from edgefd.scan.report import explain_text, inventory
from edgefd.usb_scan.labels import RULES

HOST = HostRoot.of("/tmp/fixture-host")
GOOD = "feature.node.kubernetes.io/usb-fe_1a6e_089a.present"
BAD = "feature.node.kubernetes.io/usb-fe_1a6e_089a_not a label.present"
REPORTS = (
    DeviceReport(
        "usb 2-1",
        "1a6e:089a 'Evil\nusb-scan: ERROR: forged'  /sys/devices/usb2/2-1",
        (f"interface 2-1:1.0: class fe -> {GOOD}=true", f"serial field -> {BAD}=true"),
    ),
    DeviceReport("usb 1-1", "05e3:0610  /sys/devices/usb1/1-1", ("class 09 is not whitelisted",)),
)
SPEC: BusSpec[Any] = BusSpec(
    rules=RULES,
    producer="test-scan",
    reader=BusReader("usb", lambda host: ScanResult(())),
    derive=lambda devices, config: Derivation({GOOD: "true", BAD: "true"}, REPORTS),
    inventory=lambda device, match: {"name": device.name, "accelerator": match and match.device},
)
RECORDS = tuple(SimpleNamespace(name=n, key=DeviceKey("usb", n)) for n in ("2-1", "1-1"))
SCANS = {"usb": ScanResult(RECORDS, ("/tmp/fixture-host/sys/bus/usb/devices/1-9: gone",))}
DEVICES = [
    Device("coral-usb-2-1", DeviceKey("usb", "2-1"), "coral-usb", "edgetpu", state="boot"),
    Device("coral-pcie-0000-02-00-0", DeviceKey("pci", "0000:02:00.0"), "coral-pcie", "edgetpu"),
]
CONFIG = SourceConfig(("fe", "ff"), ("class", "vendor", "device"))
PCI = BusReader("pci", lambda host: ScanResult(()))


def evaluation() -> Any:
    return evaluate(SPEC, SCANS, DEVICES, CONFIG, load_catalogue(), (PCI,))


def test_explain_says_why_for_every_device_in_printable_lines() -> None:
    text = explain_text(evaluation(), HOST)
    lines = text.splitlines()
    assert lines[:3] == [
        "test-scan: host root /tmp/fixture-host",
        "  class whitelist: fe, ff",
        "  label fields: class, vendor, device",
    ]
    assert "usb 2-1  1a6e:089a 'Evil\\nusb-scan: ERROR: forged'  /sys/devices/usb2/2-1" in lines
    assert not any(line.startswith("usb-scan: ERROR") for line in lines)
    refused = lines.index(f"  serial field -> {BAD}=true")
    assert lines[refused + 1] == "    ^ label refused (see warnings): it is not written"
    assert lines[refused + 2] == (
        "  catalogue: coral-usb (Google Coral USB Accelerator, boot state) -> counts toward "
        "edgefd.io/edgetpu.count (whatever the class whitelist)"
    )
    assert (
        "  edgefd.io/edgetpu.present=true, .count=2: usb 2-1 coral-usb (Google Coral USB "
        "Accelerator, boot state), pci 0000:02:00.0 coral-pcie (Google Coral M.2 / PCIe "
        "Accelerator)"
    ) in lines
    assert "  /sys/bus/usb/devices/1-9: gone" in lines  # as the host sees it
    assert lines[-4:] == [
        "labels (3):",
        "  edgefd.io/edgetpu.count=2",
        "  edgefd.io/edgetpu.present=true",
        f"  {GOOD}=true",
    ]


def test_the_json_inventory_has_every_device_and_the_capabilities_by_kind() -> None:
    doc = inventory(evaluation(), HOST)
    assert (doc["source"], doc["producer"], doc["host_root"]) == (
        "usb",
        "test-scan",
        "/tmp/fixture-host",
    )
    assert doc["config"] == {
        "deviceClassWhitelist": ["fe", "ff"],
        "deviceLabelFields": ["class", "vendor", "device"],
    }
    assert doc["devices"] == [
        {"name": "2-1", "accelerator": "2-1"},
        {"name": "1-1", "accelerator": None},
    ]
    assert doc["capabilities"] == {
        "edgetpu": [
            {"bus": "usb", "device": "2-1", "accelerator": "coral-usb", "state": "boot"},
            {"bus": "pci", "device": "0000:02:00.0", "accelerator": "coral-pcie", "state": ""},
        ]
    }
    assert list(doc["labels"]) == sorted(doc["labels"]) and BAD not in doc["labels"]
    assert doc["warnings"][0] == "/sys/bus/usb/devices/1-9: gone"


def test_explain_says_a_kinds_driver_version_beside_its_count() -> None:
    pcie = DEVICES[1]._replace(facts=Facts(driver="apex", module_version="1.2"))
    ev = evaluate(SPEC, SCANS, [DEVICES[0], pcie], CONFIG, load_catalogue(), (PCI,))
    lines = explain_text(ev, HOST).splitlines()
    assert any(
        line.startswith("  edgefd.io/edgetpu.present=true, .count=2, .driver-version=1.2: ")
        for line in lines
    )
    assert "  edgefd.io/edgetpu.driver-version=1.2" in lines
