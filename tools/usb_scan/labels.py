"""USB label rules: node-feature-discovery's `usb-<fields>.present`, as pure functions.

No I/O here: discovery hands over frozen UsbDevice records and this module decides, so every
rule can be tested on hand-made records. Where edgefd deliberately differs from NFD it is only
where NFD's output is unusable, and never with the default settings:

* interface instances are de-duplicated before labelling (a webcam with four video interfaces
  is one `0e` instance, listed with all four interface names in --explain); NFD makes four
  identical instances that collapse into one label anyway, so labels are the same;
* a missing `serial`, when `serial` is a label field, leaves the field out
  (`usb-ff_1a86_7523.present`) instead of NFD's trailing empty field (`usb-ff_1a86_7523_.present`,
  which is not even a valid label name); the default fields do not include serial;
* an unreadable interface class skips that interface (with a warning) instead of dropping the
  whole device as NFD does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgefd.bus.catalogue import AccelMatch
from edgefd.bus.usb import READER, UsbDevice
from edgefd.core.labels import Derivation
from edgefd.scan.config import BusRules, SourceConfig, join_fields, whitelist_match
from edgefd.scan.derive import NFD_PREFIX, BusSpec, DeviceReport

RULES = BusRules(
    bus="usb",
    all_fields=("class", "vendor", "device", "serial"),
    default_fields=("class", "vendor", "device"),
    fallback_fields=("class", "vendor", "device"),
    default_whitelist=("0e", "ef", "fe", "ff"),
)

# Names of the commonest USB class codes, for --explain only.
CLASS_NAMES = {
    "00": "per-interface",
    "01": "audio",
    "02": "communications",
    "03": "HID",
    "06": "still imaging",
    "07": "printer",
    "08": "mass storage",
    "09": "hub",
    "0a": "CDC data",
    "0b": "smart card",
    "0e": "video",
    "10": "audio/video",
    "dc": "diagnostic",
    "e0": "wireless controller",
    "ef": "miscellaneous",
    "fe": "application specific",
    "ff": "vendor specific",
}


def class_name(cls: str) -> str:
    return f"{cls} ({CLASS_NAMES[cls]})" if cls in CLASS_NAMES else cls


def instances(dev: UsbDevice) -> list[tuple[str, tuple[str, ...]]]:
    """(class, where it came from) per distinct class, in NFD's order.

    A device class other than `00` is the only instance; `00` means "defined per interface",
    and then each distinct interface class is one instance.
    """
    if dev.device_class is None:
        return []
    if dev.device_class != "00":
        return [(dev.device_class, ("device",))]
    seen: dict[str, list[str]] = {}
    for intf in dev.interfaces:
        seen.setdefault(intf.cls, []).append(intf.name)
    return [(cls, tuple(names)) for cls, names in seen.items()]


def label_name(dev: UsbDevice, cls: str, fields: Sequence[str]) -> str:
    """`usb-<fields joined by _>.present`, unqualified part after the NFD prefix."""
    values = {"class": cls, "vendor": dev.vendor, "device": dev.product, "serial": dev.serial}
    return f"usb-{join_fields(values, fields, omit_empty='serial')}.present"


def derive(devices: Sequence[UsbDevice], config: SourceConfig) -> Derivation[DeviceReport]:
    labels: dict[str, str] = {}
    reports = []
    for dev in devices:
        lines = []
        insts = instances(dev)
        if dev.device_class is None:
            lines.append("no readable bDeviceClass: no NFD label (see warnings)")
        elif dev.device_class == "00":
            if insts:
                lines.append("device class 00: classes are taken from the interfaces")
            else:
                lines.append("device class 00 and no readable interface: no NFD label")
        for cls, where in insts:
            src = "device class" if where == ("device",) else f"interface {', '.join(where)}"
            w = whitelist_match(cls, config.class_whitelist)
            if w is None:
                lines.append(f"{src}: class {class_name(cls)} is not whitelisted -> no label")
                continue
            unread = [
                attr
                for f, attr, v in (
                    ("vendor", "idVendor", dev.vendor),
                    ("device", "idProduct", dev.product),
                )
                if f in config.label_fields and v is None
            ]
            if unread:
                lines.append(
                    f"{src}: class {class_name(cls)} matches whitelist {w!r} but "
                    f"{' and '.join(unread)} could not be read -> no label (see warnings)"
                )
                continue
            key = NFD_PREFIX + label_name(dev, cls, config.label_fields)
            labels[key] = "true"
            lines.append(f"{src}: class {class_name(cls)} matches whitelist {w!r} -> {key}=true")
            if "serial" in config.label_fields and not dev.serial:
                lines.append("  (no serial number: the serial field is left out of the name)")
        desc = " ".join(x for x in (dev.manufacturer, dev.product_name) if x)
        title = f"{dev.id}" + (f" {desc!r}" if desc else "") + f"  {dev.sysfs_path}"
        reports.append(DeviceReport(f"usb {dev.name}", title, tuple(lines)))
    return Derivation(labels, tuple(reports))


def inventory_item(dev: UsbDevice, match: AccelMatch | None) -> dict[str, Any]:
    return {
        "bus": "usb",
        "name": dev.name,
        "port_path": dev.name,
        "sysfs_path": dev.sysfs_path,
        "busnum": dev.busnum,
        "devnum": dev.devnum,
        "devnode": dev.devnode,
        "vendor": dev.vendor,
        "product": dev.product,
        "device_class": dev.device_class,
        "serial": dev.serial,
        "manufacturer": dev.manufacturer,
        "product_name": dev.product_name,
        "speed": dev.speed,
        "driver": dev.driver,
        "numa_node": dev.numa_node,
        "interfaces": [
            {
                "name": i.name,
                "class": i.cls,
                "subclass": i.subclass,
                "protocol": i.protocol,
                "driver": i.driver,
            }
            for i in dev.interfaces
        ],
        "accelerator": _accelerator_json(match),
    }


def _accelerator_json(match: AccelMatch | None) -> dict[str, Any] | None:
    from edgefd.scan.report import accelerator_json  # only --output json needs it

    return accelerator_json(match)


SPEC: BusSpec[UsbDevice] = BusSpec(
    rules=RULES,
    producer="usb-scan",
    reader=READER,
    derive=derive,
    inventory=inventory_item,
)
