"""The accelerator catalogue: which USB/PCI IDs are which accelerator, as data.

The scanners (capability labels) and the device plugin (extended resources) must agree exactly
on what counts as "a Coral", including a USB device that re-enumerates with different IDs once
its firmware is loaded. So the knowledge lives in one YAML file (`accelerators.yaml`, shipped as
package data) and this module is the only reader. Adding a device is a data change, reviewed
with the public source that confirms its IDs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cli import BadInput
from .labels import check_name, check_prefix
from .yamlfile import parse_yaml, read_text

DEFAULT_PATH = Path(__file__).with_name("accelerators.yaml")

USB_STATES = ("boot", "runtime", "")
_ID_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_HEX4 = re.compile(r"^[0-9a-f]{4}$")
_HEX_PREFIX = re.compile(r"^[0-9a-f]{2,6}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class UsbId:
    """One USB vendor:product pair, and which life stage of the device it identifies."""

    vendor: str
    product: str
    state: str = ""  # "boot" | "runtime" | "" ; lower-case hex IDs


@dataclass(frozen=True)
class PciId:
    """A PCI match: vendor, optionally device and/or a class-code prefix (None = any)."""

    vendor: str
    device: str | None = None
    class_prefix: str | None = None

    def matches(self, vendor: str, device: str, class_code: str) -> bool:
        return (
            vendor == self.vendor
            and (self.device is None or device == self.device)
            and (self.class_prefix is None or class_code.startswith(self.class_prefix))
        )


@dataclass(frozen=True)
class Accelerator:
    """One kind of accelerator hardware, however many IDs it shows up under."""

    id: str
    kind: str
    name: str
    usb: tuple[UsbId, ...] = ()
    pci: tuple[PciId, ...] = ()
    dev_globs: tuple[str, ...] = ()
    resource: str | None = None
    env: tuple[tuple[str, str], ...] = ()  # extra container env, as sorted (name, value) pairs


@dataclass(frozen=True)
class Catalogue:
    accelerators: tuple[Accelerator, ...]

    def match_usb(self, vendor: str, product: str) -> tuple[Accelerator, UsbId] | None:
        """The accelerator (and the ID/state it matched) for a USB vendor:product, or None."""
        v, p = vendor.lower(), product.lower()
        for acc in self.accelerators:
            for uid in acc.usb:
                if uid.vendor == v and uid.product == p:
                    return acc, uid
        return None

    def match_pci(self, vendor: str, device: str, class_code: str) -> Accelerator | None:
        """The accelerator for a PCI function, or None. `class_code` may be 4 or 6 digits."""
        v, d, c = vendor.lower(), device.lower(), class_code.lower()
        for acc in self.accelerators:
            if any(pid.matches(v, d, c) for pid in acc.pci):
                return acc
        return None

    def by_id(self, acc_id: str) -> Accelerator | None:
        return next((a for a in self.accelerators if a.id == acc_id), None)

    def kinds(self) -> tuple[str, ...]:
        """Every capability kind, sorted, once each."""
        return tuple(sorted({a.kind for a in self.accelerators}))


def _fail(where: str, message: str) -> BadInput:
    return BadInput(f"accelerator catalogue {where}: {message}")


def _str(obj: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
    value = obj.get(key)
    if value is None:
        if required:
            raise _fail(where, f"field {key!r} is required")
        return None
    if not isinstance(value, str):
        raise _fail(where, f"field {key!r} must be a string, not {type(value).__name__}")
    return value


def _hex4(obj: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
    value = _str(obj, key, where, required=required)
    if value is None:
        return None
    v = value.lower().removeprefix("0x")
    if not _HEX4.match(v):
        raise _fail(where, f"field {key!r} = {value!r} is not 4 hex digits")
    return v


def _list(obj: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = obj.get(key, [])
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fail(where, f"field {key!r} must be a list")
    return value


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(where, "must be a mapping")
    return value


def _check_unknown(obj: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise _fail(where, f"unknown field(s) {', '.join(map(repr, unknown))}")


def _parse_accelerator(raw: Any, index: int) -> Accelerator:
    where = f"accelerators[{index}]"
    obj = _mapping(raw, where)
    _check_unknown(obj, {"id", "kind", "name", "usb", "pci", "dev_globs", "resource", "env"}, where)
    acc_id = _str(obj, "id", where) or ""
    where = f"accelerators[{index}] ({acc_id})"
    if not _ID_RE.match(acc_id):
        raise _fail(where, f"field 'id' = {acc_id!r} must be lower-case letters, digits and '-'")
    kind = _str(obj, "kind", where) or ""
    # the kind becomes part of label names: edgefd.io/<kind>.present
    if not _ID_RE.match(kind) or check_name(f"{kind}.present"):
        raise _fail(where, f"field 'kind' = {kind!r} must be lower-case letters, digits and '-'")
    name = _str(obj, "name", where) or ""

    usb: list[UsbId] = []
    for j, u in enumerate(_list(obj, "usb", where)):
        w = f"{where}.usb[{j}]"
        m = _mapping(u, w)
        _check_unknown(m, {"vendor", "product", "state"}, w)
        state = _str(m, "state", w, required=False) or ""
        if state not in USB_STATES:
            raise _fail(w, f"field 'state' = {state!r} must be boot, runtime or empty")
        usb.append(UsbId(_hex4(m, "vendor", w) or "", _hex4(m, "product", w) or "", state))

    pci: list[PciId] = []
    for j, p in enumerate(_list(obj, "pci", where)):
        w = f"{where}.pci[{j}]"
        m = _mapping(p, w)
        _check_unknown(m, {"vendor", "device", "class_prefix"}, w)
        prefix = _str(m, "class_prefix", w, required=False)
        if prefix is not None:
            prefix = prefix.lower().removeprefix("0x")
            if not _HEX_PREFIX.match(prefix):
                raise _fail(w, f"field 'class_prefix' = {prefix!r} must be 2-6 hex digits")
        pci.append(
            PciId(_hex4(m, "vendor", w) or "", _hex4(m, "device", w, required=False), prefix)
        )

    if not usb and not pci:
        raise _fail(where, "needs at least one 'usb' or 'pci' ID")

    globs: list[str] = []
    for j, g in enumerate(_list(obj, "dev_globs", where)):
        if not isinstance(g, str) or not g.startswith("/dev/"):
            raise _fail(f"{where}.dev_globs[{j}]", f"{g!r} must be a string under /dev/")
        globs.append(g)

    resource = _str(obj, "resource", where, required=False)
    if resource is not None:
        prefix, sep, rname = resource.partition("/")
        reason = (
            "must be <domain>/<name>"
            if not sep
            else check_prefix(prefix) or check_name(rname, "resource name")
        )
        if reason:
            raise _fail(where, f"field 'resource' = {resource!r}: {reason}")

    env_raw = obj.get("env") or {}
    env_map = _mapping(env_raw, f"{where}.env")
    env: list[tuple[str, str]] = []
    for k, v in sorted(env_map.items()):
        if not isinstance(k, str) or not _ENV_RE.match(k) or not isinstance(v, str):
            raise _fail(f"{where}.env", f"{k!r}: names must be identifiers, values strings")
        env.append((k, v))

    return Accelerator(
        id=acc_id,
        kind=kind,
        name=name,
        usb=tuple(usb),
        pci=tuple(pci),
        dev_globs=tuple(globs),
        resource=resource,
        env=tuple(env),
    )


def parse_catalogue(data: Any, source: str = "<catalogue>") -> Catalogue:
    """Validate an already-parsed catalogue document; BadInput names the offending field."""
    try:
        doc = _mapping(data, "document")
        _check_unknown(doc, {"accelerators"}, "document")
        items = _list(doc, "accelerators", "document")
        accs = tuple(_parse_accelerator(raw, i) for i, raw in enumerate(items))
    except BadInput as e:
        raise BadInput(f"{source}: {e}") from None
    seen_ids: set[str] = set()
    owner: dict[tuple[str, str], str] = {}
    for acc in accs:
        if acc.id in seen_ids:
            raise BadInput(f"{source}: accelerator catalogue: duplicate id {acc.id!r}")
        seen_ids.add(acc.id)
        for uid in acc.usb:
            key = (uid.vendor, uid.product)
            if key in owner:
                raise BadInput(
                    f"{source}: accelerator catalogue: USB ID {key[0]}:{key[1]} is listed by "
                    f"both {owner[key]!r} and {acc.id!r}"
                )
            owner[key] = acc.id
    return Catalogue(accs)


_cache: dict[str, Catalogue] = {}


def _parse_yaml(text: str, path: Path) -> Any:
    """Parse catalogue YAML; JSON-compatible YAML (the packaged file) skips PyYAML's import.

    Importing PyYAML costs more than the whole scan of a small node, and the packaged file is
    written so that, without its whole-line comments, it is JSON.
    """
    import json

    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    try:
        return json.loads(body)
    except ValueError:
        pass
    return parse_yaml(text, path)  # hand-written catalogues in block style


def load_catalogue(path: Path | None = None) -> Catalogue:
    """Load and validate a catalogue file (default: the packaged `accelerators.yaml`).

    The result is immutable, so it is cached per path for the life of the process: a watch
    loop rescanning every second should not re-parse YAML each time.
    """
    p = Path(path) if path is not None else DEFAULT_PATH
    key = str(p.resolve()) if path is not None else ""
    if key in _cache:
        return _cache[key]
    text = read_text(p, "accelerator catalogue")
    cat = parse_catalogue(_parse_yaml(text, p), str(p))
    _cache[key] = cat
    return cat
