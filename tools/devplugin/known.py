"""The device plugin's memory of earlier releases: one `<links-dir>/<resource>/.known.json` per
resource. When there is no state file yet, those are read once, named the new way, written as
the inventory's state file (edgefd.inventory.state) and removed; the inventory only ever reads
its own file.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from edgefd.bus.catalogue import Catalogue
from edgefd.bus.key import DeviceKey
from edgefd.core.log import get_logger
from edgefd.inventory import state
from edgefd.inventory.device import Device
from edgefd.inventory.naming import device_name

log = get_logger(__name__)

KNOWN_FILE = ".known.json"
BUSES = ("usb", "pci", "dev")


def _from_known(obj: Any, resource: str, catalogue: Catalogue | None) -> dict[str, Any]:
    """An old entry in the new shape (checked like any other by device_from_json)."""
    if not isinstance(obj, dict):
        return {}
    bus, place, ids = obj.get("bus"), obj.get("location"), str(obj.get("ids", ""))
    vendor, _, product = ids.partition(":")
    acc = None
    if catalogue is not None and bus == "usb":
        acc = (catalogue.match_usb(vendor, product) or (None,))[0]
    elif catalogue is not None and bus == "pci":
        acc = catalogue.match_pci(vendor, product, "")
    short = resource.rpartition("/")[2]
    model = acc.id if acc is not None else short
    old_id = str(obj.get("id", ""))
    serial = old_id.removeprefix("usb-sn-") if old_id.startswith("usb-sn-") else None
    key = DeviceKey(str(bus), str(place))
    return {
        "name": device_name(model, key, serial) if bus in BUSES and place else None,
        "bus": bus,
        "place": place,
        "model": model,
        "kind": acc.kind if acc is not None else short,
        "state": obj.get("state", ""),
        "ids": ids,
        "nodes": [[n, None] for n in obj.get("devnodes", ()) if isinstance(n, str)],
        "numa_node": obj.get("numa_node"),
        "facts": {"serial": serial} if serial else {},
        "resources": [resource],
        "by_serial": serial is not None,
        "last_seen": obj.get("last_seen"),
    }


def migrate_known(
    links_dir: Path, catalogue: Catalogue | None, now: float
) -> tuple[list[Device], list[Path]]:
    """Devices of every `<links-dir>/<resource>/.known.json`, and those files."""
    entries: list[dict[str, Any]] = []
    files = []
    with contextlib.suppress(OSError):
        for rdir in sorted(links_dir.iterdir()):
            path = rdir / KNOWN_FILE
            doc, why = state.read_json(path)
            if doc is None and why is None:
                continue
            files.append(path)
            # the directory is the resource name with its one '/' as '_'
            resource = rdir.name.replace("_", "/", 1)
            found = doc.get("devices") if isinstance(doc, dict) else None
            for obj in found if isinstance(found, list) else ():
                entries.append(_from_known(obj, resource, catalogue))
    devices: dict[str, Device] = {}
    for d in state.checked(links_dir / KNOWN_FILE, entries, now):
        old = devices.get(d.name)
        if old is not None:  # one device in two resources: one entry, both resources
            d = old._replace(resources=old.resources + d.resources)
        devices[d.name] = d
    if devices:
        log.info("%d device(s) taken over from %d %s file(s)", len(devices), len(files), KNOWN_FILE)
    return list(devices.values()), files


def take_over(
    links_dir: str | None, state_file: Path | None, catalogue: Catalogue | None, now: float
) -> None:
    """Before the inventory starts: an earlier release's files become the state file (only
    when there is none yet), and are removed once it is written."""
    if not links_dir or state_file is None or state_file.exists() or state_file.is_symlink():
        return
    devices, files = migrate_known(Path(links_dir), catalogue, now)
    if not files:
        return
    try:
        state.save(state_file, devices)
    except OSError as e:
        log.warning("cannot write %s (%s): %s kept for the next start", state_file, e, KNOWN_FILE)
        return
    for old in files:
        old.unlink(missing_ok=True)
