"""From the inventory's devices to ResourceSlices: attributes, taints, and how a node's pool is
cut into slices. Pure (the caller passes a snapshot's devices), so the rules that decide what
the scheduler sees are testable without a host or an API server.

One pool per node, named after the node, driver `edgefd.io`, `nodeName` set. Devices are
named by their one name (edgefd.inventory.naming), so a claim allocated `coral-usb-2-1` still
names the same Coral at the same port after a re-plug, a reboot or its boot -> runtime
re-enumeration, and never another model that is plugged in there.

An unplugged device stays in the slice, under its name, with a NoSchedule taint
(`edgefd.io/unhealthy=unplugged`; a present device without a usable node gets
`=no-device-node`, one too hot `=overheating`: the health source's condition): an allocated
claim keeps naming a device the scheduler still knows, new claims are not given it, and it
comes back untainted when it returns to its port (or is usable again). It leaves the slice
when the inventory forgets it (`forget_after`). NoExecute only with `--evict-after`
(eviction.py), and never within the hold: it would evict a pod whose Coral is
re-enumerating, which is exactly what must survive.

Generation rule (the API's contract): every change of the pool's content writes every slice
of the pool with the generation raised by one; consumers use only the highest generation.
Nothing changed -> nothing written (publisher.py compares with what it last wrote).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Iterable
from typing import Any

from edgefd.inventory.device import Device
from edgefd.inventory.naming import DOMAIN, qualified

from .eviction import NEVER, Eviction

log = logging.getLogger(__name__)

DRIVER = DOMAIN  # the DRA driver, and its pool's taint key's domain
API_VERSION = "resource.k8s.io/v1"
KIND = "ResourceSlice"
TAINT_KEY = qualified("unhealthy")
STANDARD = "resource.kubernetes.io"
# the API's limit for a slice whose devices may carry taints (128 without)
MAX_DEVICES_PER_SLICE = 64
MAX_SLICE_NAME = 253
MAX_VALUE = 64  # bytes (UTF-8) of a string or version attribute value
MAX_TIME = 253402300799  # 9999-12-31T23:59:59Z: RFC 3339 has four-digit years


def _digest(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


_said_too_long: set[tuple[str, str]] = set()


def _fits(dev: Device, name: str, value: str) -> bool:
    """Whether a string or version value is within the API's limit, 64 *bytes* of UTF-8 (a
    serial of 40 'é' is 40 characters, 80 bytes). One that is not is left out of that device
    alone, said once: the API refuses a whole slice for one such value, which would take every
    device of the node out of DRA. Never cut: a cut serial would match another device's."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: not text the API can store
        size = MAX_VALUE + 1
    if size <= MAX_VALUE:
        return True
    if (dev.name, name) not in _said_too_long:
        _said_too_long.add((dev.name, name))
        log.warning(
            "%s: attribute %s is %d bytes of UTF-8, over the API's %d; left out of the slice",
            dev.name,
            name,
            size,
            MAX_VALUE,
        )
    return False


def attributes(dev: Device) -> dict[str, dict[str, Any]]:
    """The device's attributes, API form. Unqualified names are in the driver's domain
    (`device.attributes["edgefd.io"].port` in CEL); three standard `resource.kubernetes.io`
    attributes let claims align with other drivers' devices (same PCIe root, NUMA node)."""
    attrs: dict[str, dict[str, Any]] = {}
    facts, place = dev.facts, dev.key.place

    def _str(attrs: dict[str, Any], name: str, value: str | None, kind: str = "string") -> None:
        if value and _fits(dev, name, value):
            attrs[name] = {kind: value}

    def _version(attrs: dict[str, Any], name: str, value: str | None) -> None:
        _str(attrs, name, value, "version")

    _str(attrs, "kind", dev.kind)
    _str(attrs, "model", dev.model)
    _str(attrs, "bus", dev.bus)
    vendor, _, product = dev.ids.partition(":")
    _str(attrs, "vendorID", vendor if vendor != "?" else None)
    _str(attrs, "productID", product if product != "?" else None)
    _str(attrs, "state", dev.state)
    if dev.bus == "usb":
        _str(attrs, "port", place)
        bus, sep, _ = place.partition("-")
        if sep and bus.isdigit():
            attrs["usbBus"] = {"int": int(bus)}
    if dev.bus == "pci":
        _str(attrs, "pciAddress", place)
        _str(attrs, f"{STANDARD}/pciBusID", place)
        _str(attrs, f"{STANDARD}/pcieRoot", facts.pcie_root)
    if dev.bus == "platform":
        _str(attrs, "platformDevice", place)
        _str(attrs, "compatible", facts.compatible)
    if dev.bus == "dev":
        _str(attrs, "devPath", place)
    _str(attrs, "serial", facts.serial)
    if dev.numa_node is not None and dev.numa_node >= 0:
        attrs["numaNode"] = {"int": dev.numa_node}
        attrs[f"{STANDARD}/numaNode"] = {"int": dev.numa_node}
    _str(attrs, "driver", facts.driver)
    _version(attrs, "deviceVersion", facts.device_version)
    _version(attrs, "driverVersion", facts.driver_version)
    # a name keeps one type on every device: `driverVersion` is always a version, so a
    # selector's compareTo() never meets a string (a CEL runtime error fails the allocation,
    # k8s.io/dynamic-resource-allocation structured/internal/stable/allocator_stable.go); the
    # module's version as written, semver or not, is this string for exact matches
    _str(attrs, "driverModuleVersion", facts.module_version)
    return attrs


def _rfc3339(ts: float) -> str | None:
    """RFC 3339 (UTC), or None for a time that has none (not finite, before 1970, after the
    year 9999): the device state must not make a slice the API server refuses, or a scan fail
    (gmtime overflows far before 1e300)."""
    if not (isinstance(ts, int | float) and math.isfinite(ts) and 0 < ts <= MAX_TIME):
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def taints(dev: Device, eviction: Eviction = NEVER, now: float = 0.0) -> list[dict[str, Any]]:
    """NoSchedule while the device cannot be used; NoExecute once an absent device is past
    its eviction deadline. An absent device's taint carries the time it was last seen (or
    its deadline), so rewriting the slice never moves it (and never causes a write)."""
    if dev.healthy:
        return []
    if not dev.present:
        taint: dict[str, Any] = {"key": TAINT_KEY, "value": "unplugged", "effect": "NoSchedule"}
        deadline = eviction.deadline(dev)
        if deadline is not None and now >= deadline:
            taint["effect"] = "NoExecute"
            added = _rfc3339(deadline)
        else:
            added = _rfc3339(dev.last_seen)
        if added is not None:  # else the API server sets it when it is created
            taint["timeAdded"] = added
        return [taint]
    # present but unusable: the health source's word (no-device-node, overheating)
    value = dev.condition or "no-device-node"
    return [{"key": TAINT_KEY, "value": value, "effect": "NoSchedule"}]


def api_device(
    name: str,
    attrs: dict[str, dict[str, Any]],
    dev: Device,
    eviction: Eviction = NEVER,
    now: float = 0.0,
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "attributes": attrs}
    t = taints(dev, eviction, now)
    if t:
        out["taints"] = t
    return out


def slice_name(node: str, index: int) -> str:
    """`<node>-edgefd.io-<n>`: fixed names, so a restarted plugin finds its slices again."""
    name = f"{node}-{DRIVER}-{index}"
    if len(name) <= MAX_SLICE_NAME:
        return name
    tail = f"-{_digest(node)}-{DRIVER}-{index}"
    return node[: MAX_SLICE_NAME - len(tail)].rstrip("-.") + tail


def pool_slices(node: str, devices: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(name, spec without generation) of every slice of the node's pool, devices sorted by
    name. A node with no device still publishes one empty slice: "this node has none" is
    different from "the driver is not running here"."""
    devs = sorted(devices, key=lambda d: d["name"])
    chunks = [
        devs[i : i + MAX_DEVICES_PER_SLICE] for i in range(0, len(devs), MAX_DEVICES_PER_SLICE)
    ] or [[]]
    out = []
    for i, chunk in enumerate(chunks):
        spec: dict[str, Any] = {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "resourceSliceCount": len(chunks)},
        }
        if chunk:
            spec["devices"] = chunk
        out.append((slice_name(node, i), spec))
    return out


def with_generation(spec: dict[str, Any], generation: int) -> dict[str, Any]:
    pool = dict(spec["pool"], generation=generation)
    return dict(spec, pool=pool)


def without_generation(spec: dict[str, Any]) -> dict[str, Any]:
    pool = {k: v for k, v in (spec.get("pool") or {}).items() if k != "generation"}
    return dict(spec, pool=pool)


def node_owner(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The slices' ownerReferences: their Node, as the kubelet-plugin helper upstream sets
    them, so a Node that is deleted takes its slices with it (the garbage collector) even
    when no plugin is left to clean up."""
    meta = node.get("metadata") or {}
    if not meta.get("uid") or not meta.get("name"):
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
        }
    ]


def slice_object(
    name: str,
    spec: dict[str, Any],
    generation: int,
    owner: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {"app.kubernetes.io/managed-by": "edgefd-devplugin"},
    }
    if owner:
        meta["ownerReferences"] = owner
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": meta,
        "spec": with_generation(spec, generation),
    }
