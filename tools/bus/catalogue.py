"""The accelerator catalogue: which USB/PCI IDs (and platform devicetree compatibles) are which
accelerator, as data.

The scanners (capability labels) and the device plugin (extended resources) must agree exactly
on what counts as "a Coral", including a USB device that re-enumerates with different IDs once
its firmware is loaded. So the knowledge lives in one YAML file (`accelerators.yaml`, shipped as
package data) and this module is the only reader. Adding a device is a data change, reviewed
with the public source that confirms its IDs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from edgefd.core.labels import check_name, check_prefix
from edgefd.core.record import Record
from edgefd.core.schema import Fields, parse_yaml, read_text

from .key import DeviceKey

if TYPE_CHECKING:
    from .pci import PciDevice
    from .usb import UsbDevice

DEFAULT_PATH = Path(__file__).with_name("accelerators.yaml")

USB_STATES = ("boot", "runtime", "")
_ID_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class UsbId(Record):
    """One USB vendor:product pair, and which life stage of the device it identifies."""

    vendor: str
    product: str
    state: str = ""  # "boot" | "runtime" | "" ; lower-case hex IDs


class PciId(Record):
    """A PCI match: vendor, optionally device and/or a class-code prefix (None = any)."""

    vendor: str
    device: str | None = None
    class_prefix: str | None = None

    def matches(self, vendor: str | None, device: str | None, class_code: str | None) -> bool:
        return (
            vendor == self.vendor
            and (self.device is None or device == self.device)
            and (self.class_prefix is None or (class_code or "").startswith(self.class_prefix))
        )


class Thermal(Record):
    """Where a device says its temperature: `/sys/class/<cls>/<node name>/<input>`, in
    milli-degrees Celsius (the class device named as its /dev node, as gasket's apex_N is),
    with the driver's own limit in the attribute `limit` (milli-degrees Celsius) or, when that
    cannot be read, `default_limit`. The health source that reads it is
    edgefd.inventory.temperature."""

    cls: str
    input: str
    limit: str | None
    default_limit: int


class BusRecord(Protocol):
    """Any bus reader's record (edgefd.bus.platform's too, which reads this catalogue and so
    is not imported here): where it is is all `match` needs to know of it first."""

    @property
    def key(self) -> DeviceKey: ...


class PlatformId(Record):
    """A platform (SoC) device: a devicetree `compatible` it lists, the driver that must be
    bound when one is (another driver bound means another device), and, for a driver that
    puts its device node on a platform device of its own (`rocket` registers `rknn` for all
    NPU cores), that device's name: the accelerator is keyed there, once."""

    compatible: str
    driver: str | None = None
    device: str | None = None

    def matches(self, compatible: tuple[str, ...], driver: str | None) -> bool:
        return self.compatible in compatible and (
            driver is None or self.driver is None or driver == self.driver
        )


class Accelerator(Record):
    """One kind of accelerator hardware, however many IDs it shows up under."""

    id: str
    kind: str
    name: str
    usb: tuple[UsbId, ...] = ()
    pci: tuple[PciId, ...] = ()
    dev_globs: tuple[str, ...] = ()
    resource: str | None = None
    env: tuple[tuple[str, str], ...] = ()  # extra container env, as sorted (name, value) pairs
    temperature: Thermal | None = None  # a temperature to judge its health by
    platform: tuple[PlatformId, ...] = ()


class Catalogue(Record):
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

    def match_platform(self, compatible: tuple[str, ...], driver: str | None) -> Accelerator | None:
        """The accelerator for a platform device's compatibles and bound driver, or None."""
        for acc in self.accelerators:
            if any(p.matches(compatible, driver) for p in acc.platform):
                return acc
        return None

    @property
    def platform_ids(self) -> tuple[PlatformId, ...]:
        """Every platform match rule: all a platform scan needs to know of the catalogue."""
        return tuple(p for acc in self.accelerators for p in acc.platform)

    def by_id(self, acc_id: str) -> Accelerator | None:
        return next((a for a in self.accelerators if a.id == acc_id), None)

    def match(self, record: UsbDevice | PciDevice | BusRecord) -> AccelMatch | None:
        """Which accelerator a bus record is, if any: the one answer to "is this a Coral?"
        for the capability labels, the device plugin's resources and DRA alike."""
        key = record.key
        if key.bus == "usb":
            vendor, product = getattr(record, "vendor", None), getattr(record, "product", None)
            if vendor and product:
                hit = self.match_usb(vendor, product)
                if hit is not None:
                    return AccelMatch(key, hit[0], hit[1].state)
        elif key.bus == "pci":
            vendor, device = getattr(record, "vendor", None), getattr(record, "device", None)
            if vendor and device:
                acc = self.match_pci(vendor, device, getattr(record, "class_code", None) or "")
                if acc is not None:
                    return AccelMatch(key, acc)
        elif key.bus == "platform":
            compatible = getattr(record, "compatible", None) or ()
            acc = self.match_platform(compatible, getattr(record, "driver", None))
            if acc is not None:
                return AccelMatch(key, acc)
        return None


class AccelMatch(Record):
    """One device the catalogue recognises; one physical accelerator counts once."""

    key: DeviceKey  # where it is
    accelerator: Accelerator
    state: str = ""  # USB life stage its current IDs mean: "boot" | "runtime" | ""

    @property
    def bus(self) -> str:
        return self.key.bus

    @property
    def device(self) -> str:
        """Its place on the bus: "1-1.3", "0000:01:00.0"."""
        return self.key.place


USB_ID_FIELDS = ("vendor", "product", "state")


def usb_id(u: Fields) -> UsbId:
    """One `{vendor, product, state}` entry (the catalogue's and the device plugin's shape)."""
    state = u.str("state", "") or ""
    if state not in USB_STATES:
        raise u.error(f"{state!r} must be boot, runtime or empty", "state")
    return UsbId(
        u.hex("vendor", 4, required=True) or "", u.hex("product", 4, required=True) or "", state
    )


def pci_id(p: Fields, class_key: str = "class_prefix") -> PciId:
    """One `{vendor, device, <class_key>}` entry; the class is a 2-6 digit hex prefix."""
    return PciId(
        p.hex("vendor", 4, required=True) or "", p.hex("device", 4), p.hex(class_key, (2, 6))
    )


def env_pairs(f: Fields, key: str) -> tuple[tuple[str, str], ...]:
    """A `NAME: value` mapping of container environment, as sorted pairs."""
    out: dict[str, str] = {}
    for k, v in f.mapping(key).items():
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise f.error("not a valid environment variable name", f"{key}.{k}")
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise f.error("value must be a string", f"{key}.{k}")
        out[k] = str(v)
    return tuple(sorted(out.items()))


_FIELDS = {
    "id",
    "kind",
    "name",
    "usb",
    "pci",
    "platform",
    "dev_globs",
    "resource",
    "env",
    "temperature",
}
_THERMAL_FIELDS = ("class", "input", "limit", "default_limit")
_ATTR_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # one sysfs name: no path, no '..'


def _thermal(f: Fields) -> Thermal | None:
    if f.obj.get("temperature") is None:
        return None
    t = f.child("temperature", _THERMAL_FIELDS)
    names = {}
    for key in ("class", "input", "limit"):
        v = t.str(key, required=key != "limit")
        if v is not None and not _ATTR_RE.match(v):
            raise t.error(f"{v!r} must be one sysfs name (letters, digits, '_', '.', '-')", key)
        names[key] = v
    default = t.integer("default_limit", 0, minimum=1000, maximum=200000)
    if not default:
        raise t.error("required (milli-degrees Celsius, from the driver's source)", "default_limit")
    return Thermal(names["class"] or "", names["input"] or "", names["limit"], default)


_COMPATIBLE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9,._+-]{0,127}$")
_PLATFORM_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:,+@-]{0,127}$")


def platform_id(p: Fields) -> PlatformId:
    """One `{compatible, driver?, device?}` entry."""
    out = []
    for key, pattern, required in (
        ("compatible", _COMPATIBLE_RE, True),
        ("driver", _PLATFORM_NAME_RE, False),
        ("device", _PLATFORM_NAME_RE, False),
    ):
        value = p.str(key, required=required)
        if value is not None and not pattern.match(value):
            raise p.error(f"{value!r} is not a devicetree/sysfs name", key)
        out.append(value)
    return PlatformId(out[0] or "", out[1], out[2])


def _parse_accelerator(f: Fields) -> Accelerator:
    acc_id = f.str("id", required=True) or ""
    if not _ID_RE.match(acc_id):
        raise f.error(f"{acc_id!r} must be lower-case letters, digits and '-'", "id")
    kind = f.str("kind", required=True) or ""
    # the kind becomes part of label names: edgefd.io/<kind>.present
    if not _ID_RE.match(kind) or check_name(f"{kind}.present"):
        raise f.error(f"{kind!r} must be lower-case letters, digits and '-'", "kind")
    name = f.str("name", required=True) or ""
    usb = tuple(usb_id(u) for u in f.children("usb", USB_ID_FIELDS))
    pci = tuple(pci_id(p) for p in f.children("pci", ("vendor", "device", "class_prefix")))
    platform_fields = ("compatible", "driver", "device")
    platform = tuple(platform_id(p) for p in f.children("platform", platform_fields))
    if not usb and not pci and not platform:
        raise f.error("needs at least one 'usb', 'pci' or 'platform' ID")
    globs = f.list("dev_globs")
    for j, g in enumerate(globs):
        if not isinstance(g, str) or not g.startswith("/dev/") or "\x00" in g:
            raise f.error(f"{g!r} must be a path glob under /dev/", f"dev_globs[{j}]")
    resource = f.str("resource")
    if resource is not None:
        prefix, sep, rname = resource.partition("/")
        reason = (
            "must be <domain>/<name>"
            if not sep
            else check_prefix(prefix) or check_name(rname, "resource name")
        )
        if reason:
            raise f.error(f"{resource!r}: {reason}", "resource")
    return Accelerator(
        id=acc_id,
        kind=kind,
        name=name,
        usb=usb,
        pci=pci,
        dev_globs=tuple(globs),
        resource=resource,
        env=env_pairs(f, "env"),
        temperature=_thermal(f),
        platform=platform,
    )


def parse_catalogue(data: Any, source: str = "<catalogue>") -> Catalogue:
    """Validate an already-parsed catalogue document; BadInput names the offending field."""
    doc = Fields(data, "", {"accelerators"}, source)
    accs = tuple(_parse_accelerator(f) for f in doc.children("accelerators", _FIELDS))
    seen_ids: set[str] = set()
    owner: dict[tuple[str, str], str] = {}
    for i, acc in enumerate(accs):
        if acc.id in seen_ids:
            raise doc.error(f"duplicate id {acc.id!r}", f"accelerators[{i}].id")
        seen_ids.add(acc.id)
        for uid in acc.usb:
            key = (uid.vendor, uid.product)
            if key in owner:
                raise doc.error(
                    f"USB ID {key[0]}:{key[1]} is listed by both {owner[key]!r} and {acc.id!r}",
                    f"accelerators[{i}].usb",
                )
            owner[key] = acc.id
    return Catalogue(accs)


_cache: dict[str, Catalogue] = {}


def _parse_yaml(text: str, path: Path) -> Any:
    """Parse catalogue YAML; JSON-compatible YAML (the packaged file) skips PyYAML's import.

    Importing PyYAML costs more than the whole scan of a small node, and the packaged file is
    written so that, without its whole-line comments, it is JSON. It is also, like every JSON
    document without true, false or null, a Python literal: read as one, it costs nothing to
    import (`ast` is loaded with click), where `json` would cost more than parsing it.
    """
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    if path == DEFAULT_PATH:
        import ast

        try:
            return ast.literal_eval(body)
        except (ValueError, SyntaxError):
            pass
    import json

    try:
        # a key given twice is left to the YAML reader, which refuses it naming both lines
        return json.loads(body, object_pairs_hook=_unique_keys)
    except ValueError:
        pass
    return parse_yaml(text, path)  # hand-written catalogues in block style


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


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
