"""One scan as a bus scanner sees it (derive.py, pure): the capability labels count the
inventory's catalogue accelerators over every bus the scanner is given (a Coral on USB and one
on PCIe are `edgetpu.count=2`), looked up by the inventory's model, never matched again; the
other bus's matches are kept apart from the scanner's own; and every label is checked before
it can be written (a refused one is named in the warnings, after the configuration's and the
bus's own)."""

from __future__ import annotations

from typing import Any

from edgefd.bus.catalogue import load_catalogue
from edgefd.bus.enumerate import BusReader, ScanResult
from edgefd.bus.key import DeviceKey
from edgefd.core.labels import Derivation
from edgefd.inventory.device import Device, Facts
from edgefd.scan.config import SourceConfig
from edgefd.scan.derive import BusSpec, capability_labels, evaluate
from edgefd.usb_scan.labels import RULES

GOOD = "feature.node.kubernetes.io/usb-fe_1a6e_089a.present"
BAD = "feature.node.kubernetes.io/usb-fe_1a6e_089a_not a label.present"
USB = BusReader("usb", lambda host: ScanResult(()))
PCI = BusReader("pci", lambda host: ScanResult(()))
SPEC: BusSpec[Any] = BusSpec(
    rules=RULES,
    producer="test-scan",
    reader=USB,
    derive=lambda devices, config: Derivation({GOOD: "true", BAD: "true"}),
    inventory=lambda device, match: {},
)
SCANS = {"usb": ScanResult(("a record",), ("usb: a warning",)), "pci": ScanResult(())}
DEVICES = [
    Device("coral-usb-2-1", DeviceKey("usb", "2-1"), "coral-usb", "edgetpu", state="boot"),
    Device("coral-pcie-0000-02-00-0", DeviceKey("pci", "0000:02:00.0"), "coral-pcie", "edgetpu"),
    Device("hailo8-0000-04-00-0", DeviceKey("pci", "0000:04:00.0"), "hailo8", "hailo"),
    Device("t4-0000-01-00-0", DeviceKey("pci", "0000:01:00.0"), "t4", "t4"),  # no catalogue model
    Device("cam-1-1-3", DeviceKey("usb", "1-1.3"), "coral-usb", "cam"),  # not the model's kind
]
CONFIG = SourceConfig(RULES.default_whitelist, RULES.default_fields)


def test_capabilities_count_every_bus_given_and_keep_the_other_bus_apart() -> None:
    ev = evaluate(SPEC, SCANS, DEVICES, CONFIG, load_catalogue(), (PCI,), ["config: a warning"])
    assert ev.capabilities == {
        "edgefd.io/edgetpu.present": "true",
        "edgefd.io/edgetpu.count": "2",
        "edgefd.io/hailo.present": "true",
        "edgefd.io/hailo.count": "1",
    }
    assert [(m.device, m.state) for m in ev.own_matches.values()] == [("2-1", "boot")]
    assert sorted(m.device for m in ev.other_matches) == ["0000:02:00.0", "0000:04:00.0"]
    assert ev.devices == ("a record",)


def test_only_the_buses_given_count_and_no_catalogue_counts_nothing() -> None:
    usb_only = evaluate(SPEC, SCANS, DEVICES, CONFIG, load_catalogue())
    assert usb_only.capabilities == {
        "edgefd.io/edgetpu.present": "true",
        "edgefd.io/edgetpu.count": "1",
    }
    assert evaluate(SPEC, SCANS, DEVICES, CONFIG, None, (PCI,)).capabilities == {}
    assert capability_labels([]) == {}


def test_a_label_that_is_not_valid_is_refused_and_said() -> None:
    ev = evaluate(SPEC, SCANS, DEVICES, CONFIG, None, (), ["config: a warning"])
    assert ev.labels == {GOOD: "true"}
    assert [r.key for r in ev.rejected] == [BAD]
    assert ev.warnings[:2] == ["config: a warning", "usb: a warning"]
    [refused] = ev.warnings[2:]
    assert refused.startswith(f"label refused: {BAD}: ")


def _versioned(*versions: str | None) -> list[Device]:
    """DEVICES with the Coral PCIe's and the Hailo's driver module versions set."""
    out = list(DEVICES)
    for i, v in zip((1, 2), versions, strict=True):
        out[i] = out[i]._replace(facts=Facts(driver="x", module_version=v))
    return out


def test_a_kinds_driver_version_is_its_devices_one_module_version() -> None:
    ev = evaluate(SPEC, SCANS, _versioned("1.2", "4.20.0"), CONFIG, load_catalogue(), (PCI,))
    assert ev.labels["edgefd.io/edgetpu.driver-version"] == "1.2"  # as the kernel prints it
    assert ev.labels["edgefd.io/hailo.driver-version"] == "4.20.0"
    # the Coral USB (no kernel driver) does not count against the PCIe one's version
    assert not any("driver-version" in w for w in ev.warnings)
    # a device with no version says nothing; nor does the bus the scanner is not given
    none = evaluate(SPEC, SCANS, _versioned(None, "4.20.0"), CONFIG, load_catalogue())
    assert not any(k.endswith(".driver-version") for k in none.labels)


def test_two_versions_of_one_kind_leave_the_label_out_and_say_why() -> None:
    devices = [*_versioned("1.2", "4.20.0"), DEVICES[2]._replace(
        name="hailo8-0000-05-00-0", key=DeviceKey("pci", "0000:05:00.0"),
        facts=Facts(driver="x", module_version="4.19.0"))]  # fmt: skip
    ev = evaluate(SPEC, SCANS, devices, CONFIG, load_catalogue(), (PCI,))
    assert "edgefd.io/hailo.driver-version" not in ev.labels
    assert ev.labels["edgefd.io/edgetpu.driver-version"] == "1.2"
    assert [w for w in ev.warnings if "driver-version" in w] == [
        "edgefd.io/hailo.driver-version left out: the hailo devices' drivers are not one "
        "version: 4.19.0 (hailo8-0000-05-00-0); 4.20.0 (hailo8-0000-04-00-0)"
    ]


def test_a_version_that_is_no_label_value_is_refused_and_said() -> None:
    ev = evaluate(SPEC, SCANS, _versioned("1.2+git", None), CONFIG, load_catalogue(), (PCI,))
    assert "edgefd.io/edgetpu.driver-version" not in ev.labels
    assert any(w.startswith("label refused: edgefd.io/edgetpu.driver-version") for w in ev.warnings)


def test_host_labels_are_checked_like_the_others() -> None:
    host = {"edgefd.io/kernel.page-size": "16384", "edgefd.io/kernel.bad": "no good!"}
    ev = evaluate(SPEC, SCANS, DEVICES, CONFIG, None, host_labels=host)
    assert ev.labels["edgefd.io/kernel.page-size"] == "16384"
    assert "edgefd.io/kernel.bad" not in ev.labels
