"""PCI label rules: node-feature-discovery's `pci-<fields>.present` and `.sriov.capable`.

Pure functions over PciDevice records. NFD's rules, kept exactly: a device needs all of class,
vendor, device, subsystem_vendor and subsystem_device or it is skipped; the class is cut to 4
hex digits (class + subclass) before whitelist matching and labelling; fields are joined with
`_` in the order class, vendor, device, subsystem_vendor, subsystem_device; a whitelisted device
with an `sriov_totalvfs` file also gets `<label>.sriov.capable=true`.

Where edgefd differs, it is in reporting only: every skipped device is named with the
attribute it lacks (NFD logs one error line and moves on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgefd.bus.catalogue import AccelMatch
from edgefd.bus.pci import READER, PciDevice
from edgefd.core.labels import Derivation
from edgefd.scan.config import BusRules, SourceConfig, join_fields, whitelist_match
from edgefd.scan.derive import NFD_PREFIX, BusSpec, DeviceReport
from edgefd.scan.kernel import host_labels

RULES = BusRules(
    bus="pci",
    all_fields=("class", "vendor", "device", "subsystem_vendor", "subsystem_device"),
    default_fields=("class", "vendor"),
    fallback_fields=("class", "vendor"),
    default_whitelist=("03", "0b40", "12"),
)

CLASS_NAMES = {
    "00": "unclassified",
    "01": "storage",
    "02": "network",
    "03": "display",
    "04": "multimedia",
    "06": "bridge",
    "08": "system peripheral",
    "0b": "processor",
    "0b40": "co-processor",
    "0c": "serial bus",
    "12": "processing accelerator",
}


def class_name(cls: str) -> str:
    name = CLASS_NAMES.get(cls) or CLASS_NAMES.get(cls[:2])
    return f"{cls} ({name})" if name else cls


def short_class(class_code: str) -> str:
    """NFD's label class: the first 4 hex digits (class + subclass, no prog-if)."""
    return class_code[:4] if len(class_code) > 4 else class_code


def label_base(dev: PciDevice, fields: Sequence[str]) -> str:
    values = {
        "class": short_class(dev.class_code or ""),
        "vendor": dev.vendor,
        "device": dev.device,
        "subsystem_vendor": dev.subsystem_vendor,
        "subsystem_device": dev.subsystem_device,
    }
    return "pci-" + join_fields(values, fields)


def derive(devices: Sequence[PciDevice], config: SourceConfig) -> Derivation[DeviceReport]:
    labels: dict[str, str] = {}
    reports = []
    for dev in devices:
        lines = []
        missing = dev.missing
        if missing:
            lines.append(f"skipped: {', '.join(missing)} missing or unreadable (NFD skips it too)")
        else:
            cls = short_class(dev.class_code or "")
            w = whitelist_match(cls, config.class_whitelist)
            if w is None:
                lines.append(f"class {class_name(cls)} is not whitelisted -> no label")
            else:
                base = NFD_PREFIX + label_base(dev, config.label_fields)
                labels[base + ".present"] = "true"
                lines.append(
                    f"class {class_name(cls)} matches whitelist {w!r} -> {base}.present=true"
                )
                if dev.has_sriov:
                    labels[base + ".sriov.capable"] = "true"
                    vfs = dev.sriov_totalvfs
                    lines.append(
                        f"sriov_totalvfs present ({vfs if vfs is not None else 'unreadable'}) "
                        f"-> {base}.sriov.capable=true"
                    )
        sub = (
            f" sub {dev.subsystem_vendor}:{dev.subsystem_device}"
            if dev.subsystem_vendor and dev.subsystem_device
            else ""
        )
        title = f"{dev.id} class {dev.class_code or '?'}{sub}  {dev.sysfs_path}"
        if dev.driver:
            title += f"  driver {dev.driver}"
        reports.append(DeviceReport(f"pci {dev.address}", title, tuple(lines)))
    return Derivation(labels, tuple(reports))


def inventory_item(dev: PciDevice, match: AccelMatch | None) -> dict[str, Any]:
    return {
        "bus": "pci",
        "address": dev.address,
        "sysfs_path": dev.sysfs_path,
        "class": dev.class_code,
        "vendor": dev.vendor,
        "device": dev.device,
        "subsystem_vendor": dev.subsystem_vendor,
        "subsystem_device": dev.subsystem_device,
        "sriov_totalvfs": dev.sriov_totalvfs,
        "numa_node": dev.numa_node,
        "driver": dev.driver,
        "driver_version": dev.driver_version,  # its module's `version`, as the kernel says it
        "iommu_group": dev.iommu_group,
        "devnodes": list(dev.devnodes),
        "missing": list(dev.missing),
        "accelerator": _accelerator_json(match),
    }


def _accelerator_json(match: AccelMatch | None) -> dict[str, Any] | None:
    from edgefd.scan.report import accelerator_json  # only --output json needs it

    return accelerator_json(match)


SPEC: BusSpec[PciDevice] = BusSpec(
    rules=RULES,
    producer="pci-scan",
    reader=READER,
    derive=derive,
    inventory=inventory_item,
    host_labels=host_labels,  # the kernel's page size: why pci-scan's, see edgefd.scan.kernel
)
