"""The resources configuration: which resources exist, what each one selects and what a
container gets. devplugin's alone: device-keeper follows what devplugin decided from it (the
decisions file, edgefd.inventory.decisions), never the document itself.

Without a document,
the plugin serves one resource per accelerator of the catalogue that names a `resource`, so
the knowledge of "what is a Coral" has a single source. A resource selects devices by
catalogue model or kind, resolved through the catalogue when the inventory matches (never a
copy of its IDs), or by IDs and /dev globs of its own. Every error names the field path it
is about (`resources[1].usb[0].vendor: not 4 hex digits`) because the operator reading a
crash-looping pod's log has nothing else to go on.

Document shape::

    forget_after: 24h            # how long an absent device stays listed Unhealthy (0: forever;
                                 # 86400, 24h, 10m, 30s: the flags' durations)
    resources:
      - name: edgefd.io/coral-usb    # extended resource name
        accelerator: coral-usb       # a catalogue model (its env comes along), or:
        kind: edgetpu                # every catalogue model of a kind
        usb: [{vendor: "1a6e", product: "089a", state: boot}, ...]   # own IDs (replace both)
        pci: [{vendor: "1ac1", device: "089a", class: "0880"}]
        dev_globs: ["/dev/apex_*"]
        id_from: port                # port | serial (USB devices only): how devices are named
        replicas: 1                  # >1: each device is advertised that many times (<= 1000)
        usb_bus_mount: true          # mount host /dev/bus/usb (see allocate.py)
        env: {NAME: value}
        mounts: [{host_path: /opt/x, container_path: /opt/x, read_only: true}]
                                 # /, /proc, /sys, /dev/mem, the runtime's and kubelet's state
                                 # and sockets (SENSITIVE): refused unless allow_sensitive: true
        temperature: {limit: 80, hysteresis: 5}   # °C (80, 82.5, "80C"): Unhealthy from the
                                 # limit up, Healthy again below limit - hysteresis; no limit:
                                 # the driver's trip point; `false`: never judged by it. Only
                                 # devices whose catalogue entry has a temperature (coral-pcie)

At most MAX_RESOURCES (64) resources, and at most MAX_LIST (64) entries in each of a
resource's lists and env: more is refused as any other error (exit 3 at the start; a reload
keeps the configuration in use), because every resource is a server and a thread of its own.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgefd.bus.catalogue import (
    USB_ID_FIELDS,
    Accelerator,
    Catalogue,
    PciId,
    UsbId,
    env_pairs,
    load_catalogue,
    pci_id,
    usb_id,
)
from edgefd.core.errors import BadInput
from edgefd.core.labels import check_key
from edgefd.core.schema import Fields, read_yaml
from edgefd.devplugin.mounts import sensitive
from edgefd.inventory.device import Device
from edgefd.inventory.naming import container_path as alias_path
from edgefd.inventory.select import ID_FROM, Selector
from edgefd.inventory.temperature import DEFAULT_SETTING, TemperatureLimit, parse_setting

log = logging.getLogger(__name__)

MAX_REPLICAS = 1000
# Each resource is a device-plugin server of its own (a socket, a registration thread, its
# streams) and a selector every scan evaluates: 14,000 of them (a valid 1 MiB ConfigMap) took
# 345 MiB and 3,741 threads in a minute. A node has a handful of kinds of accelerator; these
# bounds are far above that and far below what hurts a 256 Mi pod.
MAX_RESOURCES = 64
MAX_LIST = 64  # IDs, globs, mounts and env entries of one resource (each is matched or copied)
DEFAULT_FORGET_AFTER = 86400.0
MAX_FORGET_AFTER = 10 * 365 * 86400.0
_RESERVED_DOMAINS = ("kubernetes.io", "k8s.io")
_RESOURCE_FIELDS = (
    "name",
    "accelerator",
    "kind",
    "usb",
    "pci",
    "dev_globs",
    "id_from",
    "replicas",
    "usb_bus_mount",
    "env",
    "mounts",
    "temperature",
)


@dataclass(frozen=True)
class MountSpec:
    host_path: str
    container_path: str
    read_only: bool = True


@dataclass(frozen=True)
class Resource:
    """One extended resource: a name, what hardware it selects, and what a container gets.

    What it selects (`selector`) is matched by the inventory, after the catalogue's one match:
    "what is a Coral" means the same thing to the plugin, DRA and the capability labels.
    """

    name: str
    usb: tuple[UsbId, ...] = ()
    pci: tuple[PciId, ...] = ()
    dev_globs: tuple[str, ...] = ()
    id_from: str = "port"
    replicas: int = 1
    usb_bus_mount: bool = True
    env: tuple[tuple[str, str], ...] = ()
    mounts: tuple[MountSpec, ...] = ()
    accelerator: str | None = None
    kind: str | None = None
    temperature: TemperatureLimit = DEFAULT_SETTING  # for devices that say theirs

    @property
    def selector(self) -> Selector:
        return Selector(
            self.name, self.accelerator, self.kind, self.usb, self.pci, self.dev_globs, self.id_from
        )

    @property
    def served(self) -> Resource:
        """What a front-end serves of it: all but the health settings, which the inventory
        applies (a new temperature limit restarts no server)."""
        return replace(self, temperature=DEFAULT_SETTING)

    @property
    def short_name(self) -> str:
        """The part after the domain: `coral-usb` for `edgefd.io/coral-usb`."""
        return self.name.rpartition("/")[2]

    def bus_mount(self, dev: Device) -> bool:
        """Whether a container given `dev` needs the host's /dev/bus/usb (container.py)."""
        return dev.bus == "usb" and self.usb_bus_mount

    def container_path(self, dev: Device, index: int, node: str) -> str:
        """Where `dev`'s `index`-th node (`node` on the host) appears in a container: a USB
        device's under /dev/edgefd (inside the bind of the host's bus it would be a node made
        on the host), anything else under its own name (`/dev/apex_0`, what libedgetpu opens)."""
        return alias_path(dev.name, index) if self.bus_mount(dev) else node

    @property
    def env_prefix(self) -> str:
        """`EDGEFD_CORAL_USB` for `edgefd.io/coral-usb`: the allocated-devices variable stem."""
        return "EDGEFD_" + re.sub(r"[^A-Z0-9]", "_", self.short_name.upper())


@dataclass(frozen=True)
class Config:
    resources: tuple[Resource, ...] = ()
    forget_after: float = DEFAULT_FORGET_AFTER
    source: str = "<built-in default>"

    def by_name(self) -> dict[str, Resource]:
        return {r.name: r for r in self.resources}

    def selecting(self, dev: Device) -> list[Resource]:
        """The configured resources that select `dev`, in the order its selectors matched
        (the configuration's, when it was scanned with this one): the device plugin
        advertises it under each."""
        by_name = self.by_name()
        return [by_name[r] for r in dev.resources if r in by_name]

    def dra_resource(self, dev: Device) -> Resource | None:
        """The one resource DRA hands `dev` out as (its container paths, env and mounts): the
        first that selects it."""
        return next(iter(self.selecting(dev)), None)

    @property
    def selectors(self) -> tuple[Selector, ...]:
        return tuple(r.selector for r in self.resources)

    @property
    def temperature(self) -> dict[str, TemperatureLimit]:
        """Each resource's temperature setting, as the inventory takes them."""
        return {r.name: r.temperature for r in self.resources}

    @property
    def memory(self) -> float | None:
        """How long an absent device is remembered, as the inventory takes it (None: ever)."""
        return self.forget_after or None

    def serves_nothing(self) -> str | None:
        """Why this configuration advertises nothing at all, or None when it has resources.

        Valid YAML with no resources (an empty ConfigMap key, `resources: []`, a typo'd
        indentation) would otherwise run a plugin that registers nothing and says nothing."""
        if self.resources:
            return None
        return (
            f"{self.source}: no resources configured, so nothing is advertised to the kubelet "
            "(list them under 'resources:', or drop --config for one per catalogue accelerator)"
        )


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


def _bounded(f: Fields, key: str, limit: int, what: str) -> None:
    """Refuse a list (or mapping) at `key` longer than `limit`, before anything is built of it."""
    v = f.obj.get(key)
    n = len(v) if isinstance(v, list | dict) else 0  # another type: its accessor says so
    if n > limit:
        raise f.error(f"{n} {what}, at most {limit}", key)


def _parse_mount(f: Fields) -> MountSpec:
    host = f.str("host_path")
    if not host or not host.startswith("/"):
        raise f.error("must be an absolute path", "host_path")
    why = sensitive(host)
    if why is not None and not f.bool("allow_sensitive", False):
        raise f.error(
            f"{host!r} {why}: every pod given the resource would get it, which can take the "
            "node; refused unless the mount says allow_sensitive: true",
            "host_path",
        )
    container = f.str("container_path", host) or host
    if not container.startswith("/"):
        raise f.error("must be an absolute path", "container_path")
    return MountSpec(host, container, f.bool("read_only", True))


def _parse_resource(f: Fields, catalogue: Catalogue | None) -> Resource:
    base = Resource(name="")
    acc_id, kind = f.str("accelerator"), f.str("kind")
    if acc_id is not None and kind is not None:
        raise f.error("give accelerator or kind, not both", "kind")
    if acc_id is not None:
        cat = catalogue or load_catalogue()
        acc = cat.by_id(acc_id)
        if acc is None:
            ids = ", ".join(sorted(a.id for a in cat.accelerators))
            raise f.error(
                f"{acc_id!r} is not in the accelerator catalogue (its ids: {ids})", "accelerator"
            )
        base = resource_from_accelerator(acc) or Resource(name="", accelerator=acc_id)
    if kind is not None:
        kinds = sorted({a.kind for a in (catalogue or load_catalogue()).accelerators})
        if kind not in kinds:
            raise f.error(
                f"{kind!r} is no kind of the accelerator catalogue (its kinds: {', '.join(kinds)})",
                "kind",
            )
        base = Resource(name="", kind=kind)
    name = f.str("name", base.name or None)
    if not name:
        raise f.error("required (the extended resource name)", "name")
    reason = check_resource_name(name)
    if reason:
        raise f.error(reason, "name")
    for key in ("usb", "pci", "dev_globs", "mounts", "env"):
        _bounded(f, key, MAX_LIST, "entries")
    usb = tuple(usb_id(u) for u in f.children("usb", USB_ID_FIELDS))
    pci = tuple(pci_id(p, "class") for p in f.children("pci", ("vendor", "device", "class")))
    globs = f.list("dev_globs")
    for i, g in enumerate(globs):
        if not isinstance(g, str) or not g.startswith("/dev/") or "\x00" in g:
            raise f.error(f"{g!r} must be a path glob under /dev/", f"dev_globs[{i}]")
    id_from = f.str("id_from", base.id_from) or "port"
    if id_from not in ID_FROM:
        raise f.error(f"{id_from!r} must be one of {', '.join(ID_FROM)}", "id_from")
    replicas = f.integer("replicas", base.replicas, minimum=1, maximum=MAX_REPLICAS)
    env = dict(base.env)
    env.update(env_pairs(f, "env"))
    mounts = tuple(
        _parse_mount(m)
        for m in f.children(
            "mounts", ("host_path", "container_path", "read_only", "allow_sensitive")
        )
    )
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
        temperature=parse_setting(f),
    )
    if not (res.usb or res.pci or res.dev_globs or res.accelerator or res.kind):
        raise f.error("needs at least one of usb, pci, dev_globs (or accelerator, kind)")
    if res.env_prefix + "_DEVICES" in env:
        raise f.error("set by the plugin itself", f"env.{res.env_prefix}_DEVICES")
    return res


def parse_config(data: Any, source: str, catalogue: Catalogue | None = None) -> Config:
    """Validate a parsed YAML document into a Config; BadInput names the field at fault."""
    if isinstance(data, dict) and data.get("kind") == "ConfigMap":
        keys = ", ".join(sorted(map(str, data.get("data") or {}))) or "none"
        raise BadInput(
            f"{source}: a Kubernetes ConfigMap, not the resources configuration: pass the file "
            f"one of its data keys holds ({keys}), as the pod mounts it, e.g. kubectl get "
            "configmap edgefd-devplugin -n edgefd -o jsonpath='{.data.resources\\.yaml}'"
        )
    f = Fields({} if data is None else data, "", ("resources", "forget_after"), source)
    _bounded(f, "resources", MAX_RESOURCES, "resources (each is a server and a thread of its own)")
    resources = tuple(
        _parse_resource(r, catalogue) for r in f.children("resources", _RESOURCE_FIELDS)
    )
    forget_after = f.duration("forget_after", DEFAULT_FORGET_AFTER, maximum=MAX_FORGET_AFTER)
    seen: dict[str, int] = {}
    for i, r in enumerate(resources):
        if r.name in seen:
            raise f.error(
                f"{r.name!r} is already resources[{seen[r.name]}]", f"resources[{i}].name"
            )
        seen[r.name] = i
    return Config(resources=resources, forget_after=forget_after, source=source)


def resource_from_accelerator(acc: Accelerator) -> Resource | None:
    """The resource the catalogue implies for one accelerator (None when it names none): it
    selects the model; its IDs and globs stay in the catalogue, its env comes along."""
    if not acc.resource:
        return None
    return Resource(name=acc.resource, env=acc.env, accelerator=acc.id)


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
    """Read `path` (None: the catalogue default). Unreadable or invalid input is BadInput;
    a valid configuration that serves nothing is logged as a warning (also on a reload)."""
    if path is None:
        config = default_config(catalogue)
    else:
        config = parse_config(read_yaml(path, "configuration"), str(path), catalogue)
    reason = config.serves_nothing()
    if reason:
        log.warning("%s", reason)
    return config
