"""What a sample node's ResourceSlice must say, derived from its description
(tests/fixtures/nodes/*.yaml) and the accelerator catalogue, independently of the code under
test: the expectation is written from the hardware, not from what the plugin computes."""

from __future__ import annotations

import re
from typing import Any

from edgefd.bus.catalogue import load_catalogue
from tests.fixturegen import load_description

STD = "resource.kubernetes.io"


def _usb_ids() -> dict[tuple[str, str], tuple[Any, str]]:
    out = {}
    for acc in load_catalogue().accelerators:
        for u in acc.usb:
            out[(u.vendor, u.product)] = (acc, u.state)
    return out


def _pci_acc(vendor: str, device: str) -> Any:
    for acc in load_catalogue().accelerators:
        for p in acc.pci:
            if p.vendor == vendor and p.device in (None, device):
                return acc
    return None


def _bcd(bcd: str) -> str:
    return f"{int(bcd[:2])}.{int(bcd[2])}.{int(bcd[3])}"


def _pcie_root(by_addr: dict[str, dict[str, Any]], addr: str) -> str:
    dev = by_addr[addr]
    while dev.get("parent"):
        dev = by_addr[dev["parent"]]
    if dev.get("host_bridge"):
        return next(p for p in dev["host_bridge"].split("/") if re.match(r"^pci[0-9a-f]{4}:", p))
    domain, bus = dev["address"].split(":")[:2]
    return f"pci{domain}:{bus}"


def expected_devices(node: str) -> dict[str, dict[str, dict[str, Any]]]:
    """DRA device name (`<model>-<place as a DNS label>`) -> attributes (API form) for every
    accelerator of the sample node."""
    desc = load_description(node)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    usb_ids = _usb_ids()
    usb = desc.get("usb") or {}
    for d in usb.get("devices", ()) if isinstance(usb, dict) else ():
        key = (str(d["vendor"]).lower(), str(d["product"]).lower())
        if key not in usb_ids:
            continue
        acc, state = usb_ids[key]
        port = str(d["port"])
        attrs: dict[str, dict[str, Any]] = {
            "kind": {"string": acc.kind},
            "model": {"string": acc.id},
            "bus": {"string": "usb"},
            "vendorID": {"string": key[0]},
            "productID": {"string": key[1]},
            "port": {"string": port},
            "usbBus": {"int": int(port.split("-")[0])},
            "deviceVersion": {"version": _bcd(str(d.get("bcd_device", "0100")))},
        }
        if state:
            attrs["state"] = {"string": state}
        if d.get("serial"):
            attrs["serial"] = {"string": str(d["serial"])}
        drivers = sorted({i["driver"] for i in d.get("interfaces", ()) if i.get("driver")})
        if drivers:
            attrs["driver"] = {"string": ",".join(drivers)}
        out[f"{acc.id}-" + port.replace(".", "-")] = attrs
    pci = desc.get("pci") or []
    by_addr = {p["address"]: p for p in pci}
    for p in pci:
        acc = _pci_acc(str(p["vendor"]).lower(), str(p["device"]).lower())
        if acc is None:
            continue
        addr = p["address"]
        attrs = {
            "kind": {"string": acc.kind},
            "model": {"string": acc.id},
            "bus": {"string": "pci"},
            "vendorID": {"string": str(p["vendor"]).lower()},
            "productID": {"string": str(p["device"]).lower()},
            "pciAddress": {"string": addr},
            f"{STD}/pciBusID": {"string": addr},
            f"{STD}/pcieRoot": {"string": _pcie_root(by_addr, addr)},
        }
        if int(p.get("numa_node", -1)) >= 0:
            attrs["numaNode"] = {"int": int(p["numa_node"])}
            attrs[f"{STD}/numaNode"] = {"int": int(p["numa_node"])}
        if p.get("driver"):
            attrs["driver"] = {"string": p["driver"]}
        out[f"{acc.id}-" + addr.replace(":", "-").replace(".", "-")] = attrs
    return out
