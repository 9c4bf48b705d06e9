"""What a reload changed, in the configuration's own words: `edgefd.io/coral-usb: replicas 1 → 2`.

A reload that only says "changed" leaves the operator to diff two ConfigMap versions to learn
whether the edit they made is the one that took; one line per resource, naming each field as
the YAML names it, old value then new, answers that from the log alone."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from edgefd.bus.catalogue import PciId, UsbId
from edgefd.inventory.temperature import TemperatureLimit

from .resources import Config, MountSpec, Resource

ARROW = "→"


def duration_text(seconds: float) -> str:
    """86400 as `24h`, 90 as `90s`: as a configuration file would write it."""
    if seconds == 0:
        return "0"
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _shown(value: Any) -> str:
    if isinstance(value, UsbId):
        return f"{value.vendor}:{value.product}" + (f" ({value.state})" if value.state else "")
    if isinstance(value, PciId):
        parts = [value.vendor, value.device or "*"]
        return ":".join(parts) + (f" class {value.class_prefix}" if value.class_prefix else "")
    if isinstance(value, TemperatureLimit):
        return str(value)
    if isinstance(value, MountSpec):
        mode = "ro" if value.read_only else "rw"
        return f"{value.host_path}:{value.container_path}:{mode}"
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return f"{value[0]}={value[1]}"  # one env pair
    if isinstance(value, tuple):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def resource_changes(old: Resource, new: Resource) -> list[str]:
    """`replicas 1 → 2` for each field that differs, in the order the YAML documents them."""
    out = []
    for f in fields(Resource):
        a, b = getattr(old, f.name), getattr(new, f.name)
        if a != b:
            out.append(f"{f.name} {_shown(a)} {ARROW} {_shown(b)}")
    return out


def config_changes(old: Config, new: Config) -> list[str]:
    """One line per change: the configuration's own settings, then each resource removed,
    changed (every field that differs) or added. [] when the two configure the same."""
    lines = []
    if old.forget_after != new.forget_after:
        a, b = duration_text(old.forget_after), duration_text(new.forget_after)
        lines.append(f"forget_after {a} {ARROW} {b}")
    before, after = old.by_name(), new.by_name()
    lines += [f"{name}: removed" for name in before if name not in after]
    for name, res in after.items():
        if name not in before:
            lines.append(f"{name}: added")
        elif before[name] != res:
            lines.append(f"{name}: " + ", ".join(resource_changes(before[name], res)))
    return lines
