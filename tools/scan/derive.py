"""One scan of a host, as a bus scanner sees it: NFD's labels for its own bus, edgefd's
capability labels over every bus it is given, each label checked before it can be written.

Capability labels (`<domain>/<kind>.present`, `.count`) count an accelerator kind across all
the buses passed in (a Coral on USB plus one on PCIe is `edgetpu.count=2`), so both scanners
write the same capability values, which the features.d merge accepts without conflict, and
either scanner alone is still correct. They count the inventory's devices (its one catalogue
match, a device within its re-enumeration hold included, so a Coral loading its firmware
still counts once), never the records matched again here. The buses come in as arguments
(`BusReader`s); this module never imports a bus, or a tool, by name.

`<kind>.driver-version` is the version of the kernel module the kind's devices are bound to,
as the kernel prints it (`/sys/module/<module>/version`), so a pod can ask for a node whose
driver matches its userspace library (HailoRT refuses a driver of another version). Devices
that say no version (no driver bound, a built-in driver, a module without MODULE_VERSION, a
USB device driven from userspace) do not count. Two different versions among one kind's
devices leave the label out, with a warning: either value would promise a pod a driver half
of those devices do not have.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from edgefd.bus.catalogue import AccelMatch, Catalogue
from edgefd.bus.enumerate import BusReader, ScanResult
from edgefd.core.labels import DEFAULT_NAMESPACE, Derivation, Rejected, check_label
from edgefd.core.record import Record
from edgefd.inventory.device import Device
from edgefd.inventory.naming import qualified

from .config import BusRules, SourceConfig

D = TypeVar("D")
NFD_PREFIX = DEFAULT_NAMESPACE + "/"


class DeviceReport(Record):
    """Why one device did or did not produce labels, for --explain."""

    key: str  # "usb 1-1.3"
    title: str
    lines: tuple[str, ...]


class BusSpec(Record, Generic[D]):
    """A bus scanner: NFD's label rules for one bus, plugged onto that bus's reader."""

    rules: BusRules
    producer: str  # feature file name and tool name: "usb-scan"
    reader: BusReader[D]
    derive: Callable[[Sequence[D], SourceConfig], Derivation[DeviceReport]]
    inventory: Callable[[D, AccelMatch | None], dict[str, Any]]
    # labels of the host itself this producer owns (edgefd.scan.kernel), read once per run
    host_labels: Callable[[Any], dict[str, str]] | None = None


def capability_count_label(kind: str) -> str:
    return qualified(f"{kind}.count")


def capability_labels(matches: Iterable[AccelMatch]) -> dict[str, str]:
    """`<domain>/<kind>.present=true` and `.count=N` per kind, whatever the bus."""
    counts: dict[str, int] = {}
    for m in matches:
        counts[m.accelerator.kind] = counts.get(m.accelerator.kind, 0) + 1
    out = {}
    for kind, n in counts.items():
        out[qualified(f"{kind}.present")] = "true"
        out[capability_count_label(kind)] = str(n)
    return out


def driver_version_labels(devices: Iterable[Device]) -> tuple[dict[str, str], list[str]]:
    """`<domain>/<kind>.driver-version` per kind whose devices agree on one, and a warning
    for each kind whose devices do not."""
    seen: dict[str, dict[str, list[str]]] = {}  # kind -> version -> device names
    for d in devices:
        if d.facts.module_version:
            seen.setdefault(d.kind, {}).setdefault(d.facts.module_version, []).append(d.name)
    labels, warnings = {}, []
    for kind, versions in sorted(seen.items()):
        key = qualified(f"{kind}.driver-version")
        if len(versions) == 1:
            labels[key] = next(iter(versions))
            continue
        said = "; ".join(f"{v} ({', '.join(names)})" for v, names in sorted(versions.items()))
        warnings.append(f"{key} left out: the {kind} devices' drivers are not one version: {said}")
    return labels, warnings


def accelerators(devices: Iterable[Device], catalogue: Catalogue) -> list[AccelMatch]:
    """The catalogue accelerators among the inventory's devices, as the inventory matched
    them (a device's model is its catalogue id): looked up, not matched again."""
    out = []
    for d in devices:
        acc = catalogue.by_id(d.model)
        if acc is not None and acc.kind == d.kind:
            out.append(AccelMatch(d.key, acc, d.state))
    return out


def describe_match(m: AccelMatch) -> str:
    state = f", {m.state} state" if m.state else ""
    return f"{m.accelerator.id} ({m.accelerator.name}{state})"


class Evaluation(Record):
    """Everything one scan produced: the labels and how they came about."""

    spec: BusSpec[Any]
    config: SourceConfig
    devices: tuple[Any, ...]
    labels: dict[str, str]
    reports: tuple[DeviceReport, ...]
    own_matches: dict[str, AccelMatch]
    other_matches: list[AccelMatch]
    capabilities: dict[str, str]
    rejected: list[Rejected]
    warnings: list[str]


def evaluate(
    spec: BusSpec[Any],
    scans: Mapping[str, ScanResult[Any]],
    devices: Sequence[Device],
    config: SourceConfig,
    catalogue: Catalogue | None,
    capability_buses: Sequence[BusReader[Any]] = (),
    config_warnings: Sequence[str] = (),
    host_labels: Mapping[str, str] | None = None,
) -> Evaluation:
    """NFD labels for `spec`'s bus from its records (`scans` holds every bus named),
    capability labels over `capability_buses` from the inventory's `devices` (those that
    count: present, or within the hold), and the host's own facts the producer owns
    (`host_labels`, read by the caller); every label checked. Pure."""
    own = scans[spec.reader.bus]
    warnings = list(config_warnings) + list(own.warnings)
    der = spec.derive(own.devices, config)
    own_matches: dict[str, AccelMatch] = {}
    others: list[AccelMatch] = []
    versions: dict[str, str] = {}
    if catalogue is not None:
        buses = {r.bus for r in capability_buses} | {spec.reader.bus}
        counted = [d for d in devices if d.bus in buses]
        for m in accelerators(counted, catalogue):
            if m.bus == spec.reader.bus:
                own_matches[m.device] = m
            else:  # the other bus's problems belong to its own scanner's report
                others.append(m)
        matched = {m.key for m in [*own_matches.values(), *others]}
        versions, said = driver_version_labels(d for d in counted if d.key in matched)
        warnings.extend(said)
    caps = {**capability_labels([*own_matches.values(), *others]), **versions}
    labels: dict[str, str] = {}
    rejected: list[Rejected] = []
    for key, value in {**der.labels, **caps, **(host_labels or {})}.items():
        reason = check_label(key, value)
        if reason:
            rejected.append(Rejected(key, value, reason))
        else:
            labels[key] = value
    warnings.extend(f"label refused: {r.key}: {r.reason}" for r in rejected)
    return Evaluation(
        spec=spec,
        config=config,
        devices=own.devices,
        labels=labels,
        reports=der.reports,
        own_matches=own_matches,
        other_matches=others,
        capabilities=caps,
        rejected=rejected,
        warnings=warnings,
    )
