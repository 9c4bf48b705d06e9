"""The device plugin's configuration: which extended resources exist and what each one matches.

The configuration is a YAML document (in a pod: a ConfigMap mounted as a file). Without one,
the plugin serves one resource per accelerator of the catalogue that names a `resource`, so
the knowledge of "what is a Coral" has a single source. Every error names the field path it
is about (`resources[1].usb[0].vendor: not 4 hex digits`) because the operator reading a
crash-looping pod's log has nothing else to go on.

Document shape::

    forget_after: 86400          # seconds an absent device stays listed Unhealthy (0: forever)
    resources:
      - name: edgefd.io/coral-usb    # extended resource name
        accelerator: coral-usb       # optional: take usb/pci/dev_globs/env from the catalogue
        usb: [{vendor: "1a6e", product: "089a", state: boot}, ...]
        pci: [{vendor: "1ac1", device: "089a", class: "0880"}]
        dev_globs: ["/dev/apex_*"]
        id_from: port                # port | serial (USB devices only)
        replicas: 1                  # >1: each device is advertised that many times
        usb_bus_mount: true          # mount host /dev/bus/usb (see allocate.py)
        env: {NAME: value}
        mounts: [{host_path: /opt/x, container_path: /opt/x, read_only: true}]
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tools.common.catalogue import Catalogue, load_catalogue
from tools.common.cli import BadInput
from tools.common.labels import check_key
from tools.common.yamlfile import read_yaml

ID_FROM = ("port", "serial")
USB_STATES = ("boot", "runtime", "")
MAX_REPLICAS = 1000
DEFAULT_FORGET_AFTER = 86400.0

_HEX4 = re.compile(r"^[0-9a-f]{4}$")
_HEX_PREFIX = re.compile(r"^[0-9a-f]{2,6}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_DOMAINS = ("kubernetes.io", "k8s.io")


@dataclass(frozen=True)
class UsbMatch:
    vendor: str
    product: str
    state: str = ""


@dataclass(frozen=True)
class PciMatch:
    vendor: str
    device: str | None = None
    class_prefix: str | None = None

    def matches(self, vendor: str | None, device: str | None, class_code: str | None) -> bool:
        return (
            vendor == self.vendor
            and (self.device is None or device == self.device)
            and (self.class_prefix is None or (class_code or "").startswith(self.class_prefix))
        )


@dataclass(frozen=True)
class MountSpec:
    host_path: str
    container_path: str
    read_only: bool = True


@dataclass(frozen=True)
class Resource:
    """One extended resource: a name, what hardware it counts, and what a container gets."""

    name: str
    usb: tuple[UsbMatch, ...] = ()
    pci: tuple[PciMatch, ...] = ()
    dev_globs: tuple[str, ...] = ()
    id_from: str = "port"
    replicas: int = 1
    usb_bus_mount: bool = True
    env: tuple[tuple[str, str], ...] = ()
    mounts: tuple[MountSpec, ...] = ()
    accelerator: str | None = None

    @property
    def short_name(self) -> str:
        """The part after the domain: `coral-usb` for `edgefd.io/coral-usb`."""
        return self.name.rpartition("/")[2]

    @property
    def env_prefix(self) -> str:
        """`EDGEFD_CORAL_USB` for `edgefd.io/coral-usb`: the allocated-devices variable stem."""
        return "EDGEFD_" + re.sub(r"[^A-Z0-9]", "_", self.short_name.upper())

    def usb_state(self, vendor: str | None, product: str | None) -> str | None:
        """The state a USB vendor:product is in for this resource, or None if not matched."""
        for m in self.usb:
            if m.vendor == vendor and m.product == product:
                return m.state
        return None


@dataclass(frozen=True)
class Config:
    resources: tuple[Resource, ...] = ()
    forget_after: float = DEFAULT_FORGET_AFTER
    source: str = "<built-in default>"

    def by_name(self) -> dict[str, Resource]:
        return {r.name: r for r in self.resources}


def check_resource_name(name: str) -> str | None:
    """Why the kubelet would refuse `name` as an extended resource name, else None."""
    if "/" not in name:
        return f"{name!r} must be <domain>/<name> (an extended resource needs a domain)"
    domain = name.partition("/")[0]
    for reserved in _RESERVED_DOMAINS:
        if domain == reserved or domain.endswith("." + reserved):
            return f"{name!r}: domain {domain!r} is reserved for Kubernetes' own resources"
    if name.startswith("requests."):
        return f"{name!r}: the 'requests.' prefix is reserved for quota"
    return check_key(name)


class _Fields:
    """Typed access to one mapping of the document, raising BadInput with the field path."""

    def __init__(self, obj: Any, where: str, allowed: set[str]) -> None:
        if not isinstance(obj, Mapping):
            raise BadInput(f"{where}: must be a mapping, not {type(obj).__name__}")
        unknown = sorted(str(k) for k in obj if k not in allowed)
        if unknown:
            raise BadInput(
                f"{where}.{unknown[0]}: unknown field (known: {', '.join(sorted(allowed))})"
            )
        self.obj = obj
        self.where = where

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def has(self, key: str) -> bool:
        return self.obj.get(key) is not None

    def str(self, key: str, default: str | None = None) -> str | None:
        v = self.obj.get(key)
        if v is None:
            return default
        if not isinstance(v, str):
            raise BadInput(f"{self.path(key)}: must be a string, not {type(v).__name__}")
        return v

    def hex4(self, key: str, required: bool = True) -> str | None:
        v = self.str(key)
        if v is None:
            if required:
                raise BadInput(f"{self.path(key)}: required")
            return None
        h = v.lower().removeprefix("0x")
        if not _HEX4.match(h):
            raise BadInput(f"{self.path(key)}: {v!r} is not 4 hex digits")
        return h

    def list(self, key: str) -> list[Any]:
        v = self.obj.get(key)
        if v is None:
            return []
        if not isinstance(v, list):
            raise BadInput(f"{self.path(key)}: must be a list, not {type(v).__name__}")
        return v

    def bool(self, key: str, default: bool) -> bool:
        v = self.obj.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise BadInput(f"{self.path(key)}: must be true or false, not {v!r}")
        return v

    def number(self, key: str, default: float) -> float:
        v = self.obj.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise BadInput(f"{self.path(key)}: must be a number of seconds >= 0, not {v!r}")
        return float(v)


def _parse_usb(raw: Any, where: str) -> UsbMatch:
    f = _Fields(raw, where, {"vendor", "product", "state"})
    state = f.str("state", "") or ""
    if state not in USB_STATES:
        raise BadInput(f"{where}.state: {state!r} must be boot, runtime or empty")
    return UsbMatch(f.hex4("vendor") or "", f.hex4("product") or "", state)


def _parse_pci(raw: Any, where: str) -> PciMatch:
    f = _Fields(raw, where, {"vendor", "device", "class"})
    cls = f.str("class")
    if cls is not None:
        cls = cls.lower().removeprefix("0x")
        if not _HEX_PREFIX.match(cls):
            raise BadInput(f"{where}.class: {f.obj['class']!r} is not 2 to 6 hex digits")
    return PciMatch(f.hex4("vendor") or "", f.hex4("device", required=False), cls)


def _parse_mount(raw: Any, where: str) -> MountSpec:
    f = _Fields(raw, where, {"host_path", "container_path", "read_only"})
    host = f.str("host_path")
    if not host or not host.startswith("/"):
        raise BadInput(f"{where}.host_path: must be an absolute path")
    container = f.str("container_path", host) or host
    if not container.startswith("/"):
        raise BadInput(f"{where}.container_path: must be an absolute path")
    return MountSpec(host, container, f.bool("read_only", True))


def _parse_resource(raw: Any, where: str, catalogue: Catalogue | None) -> Resource:
    f = _Fields(
        raw,
        where,
        {
            "name",
            "accelerator",
            "usb",
            "pci",
            "dev_globs",
            "id_from",
            "replicas",
            "usb_bus_mount",
            "env",
            "mounts",
        },
    )
    base = Resource(name="")
    acc_id = f.str("accelerator")
    if acc_id is not None:
        acc = (catalogue or load_catalogue()).by_id(acc_id)
        if acc is None:
            raise BadInput(f"{where}.accelerator: {acc_id!r} is not in the accelerator catalogue")
        base = resource_from_accelerator(acc) or Resource(name="", accelerator=acc_id)
    name = f.str("name", base.name or None)
    if not name:
        raise BadInput(f"{where}.name: required (the extended resource name)")
    reason = check_resource_name(name)
    if reason:
        raise BadInput(f"{where}.name: {reason}")

    usb = tuple(_parse_usb(u, f"{where}.usb[{i}]") for i, u in enumerate(f.list("usb")))
    pci = tuple(_parse_pci(p, f"{where}.pci[{i}]") for i, p in enumerate(f.list("pci")))
    globs: list[str] = []
    for i, g in enumerate(f.list("dev_globs")):
        if not isinstance(g, str) or not g.startswith("/dev/") or "\x00" in g:
            raise BadInput(f"{where}.dev_globs[{i}]: {g!r} must be a path glob under /dev/")
        globs.append(g)

    id_from = f.str("id_from", base.id_from) or "port"
    if id_from not in ID_FROM:
        raise BadInput(f"{where}.id_from: {id_from!r} must be one of {', '.join(ID_FROM)}")
    replicas = f.obj.get("replicas", base.replicas)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise BadInput(f"{where}.replicas: {replicas!r} must be a whole number >= 1")
    if replicas > MAX_REPLICAS:
        raise BadInput(f"{where}.replicas: {replicas} is more than {MAX_REPLICAS}")

    env = dict(base.env)
    env_raw = f.obj.get("env")
    if env_raw is not None:
        if not isinstance(env_raw, Mapping):
            raise BadInput(f"{where}.env: must be a mapping of NAME: value")
        for k, v in env_raw.items():
            if not isinstance(k, str) or not _ENV_RE.match(k):
                raise BadInput(f"{where}.env.{k}: not a valid environment variable name")
            if not isinstance(v, str | int | float) or isinstance(v, bool):
                raise BadInput(f"{where}.env.{k}: value must be a string")
            env[k] = str(v)
    mounts = tuple(_parse_mount(m, f"{where}.mounts[{i}]") for i, m in enumerate(f.list("mounts")))

    res = replace(
        base,
        name=name,
        usb=usb or base.usb,
        pci=pci or base.pci,
        dev_globs=tuple(globs) or base.dev_globs,
        id_from=id_from,
        replicas=replicas,
        usb_bus_mount=f.bool("usb_bus_mount", base.usb_bus_mount),
        env=tuple(sorted(env.items())),
        mounts=mounts or base.mounts,
        accelerator=acc_id or base.accelerator,
    )
    if not (res.usb or res.pci or res.dev_globs):
        raise BadInput(f"{where}: needs at least one of usb, pci, dev_globs (or accelerator)")
    if res.env_prefix + "_DEVICES" in env:
        raise BadInput(f"{where}.env.{res.env_prefix}_DEVICES: set by the plugin itself")
    return res


def parse_config(data: Any, source: str, catalogue: Catalogue | None = None) -> Config:
    """Validate a parsed YAML document into a Config; BadInput names the field at fault."""
    if data is None:
        data = {}
    try:
        f = _Fields(data, "", {"resources", "forget_after"})
        items = f.list("resources")
        resources = tuple(
            _parse_resource(r, f"resources[{i}]", catalogue) for i, r in enumerate(items)
        )
        forget_after = f.number("forget_after", DEFAULT_FORGET_AFTER)
    except BadInput as e:
        raise BadInput(f"{source}: {e}") from None
    seen: dict[str, int] = {}
    for i, r in enumerate(resources):
        if r.name in seen:
            raise BadInput(
                f"{source}: resources[{i}].name: {r.name!r} is already resources[{seen[r.name]}]"
            )
        seen[r.name] = i
    return Config(resources=resources, forget_after=forget_after, source=source)


def resource_from_accelerator(acc: Any) -> Resource | None:
    """The resource the catalogue implies for one accelerator (None when it names none)."""
    if not acc.resource:
        return None
    return Resource(
        name=acc.resource,
        usb=tuple(UsbMatch(u.vendor, u.product, u.state) for u in acc.usb),
        pci=tuple(PciMatch(p.vendor, p.device, p.class_prefix) for p in acc.pci),
        dev_globs=tuple(acc.dev_globs),
        env=tuple(getattr(acc, "env", ()) or ()),
        accelerator=acc.id,
    )


def default_config(catalogue: Catalogue | None = None) -> Config:
    """One resource per catalogue accelerator that names a resource, in catalogue order."""
    cat = catalogue or load_catalogue()
    resources: list[Resource] = []
    seen: set[str] = set()
    for acc in cat.accelerators:
        res = resource_from_accelerator(acc)
        if res is None or res.name in seen:
            continue
        reason = check_resource_name(res.name)
        if reason:
            raise BadInput(f"accelerator catalogue: {acc.id}: resource {reason}")
        seen.add(res.name)
        resources.append(res)
    return Config(resources=tuple(resources), source="<built-in default from the catalogue>")


def load_config(path: str | Path | None, catalogue: Catalogue | None = None) -> Config:
    """Read `path` (None: the catalogue default). Unreadable or invalid input is BadInput."""
    if path is None:
        return default_config(catalogue)
    return parse_config(read_yaml(path, "configuration"), str(path), catalogue)


__all__ = [
    "Config",
    "MountSpec",
    "PciMatch",
    "Resource",
    "UsbMatch",
    "check_resource_name",
    "default_config",
    "load_config",
    "parse_config",
]
