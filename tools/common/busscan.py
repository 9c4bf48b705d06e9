"""What usb-scan and pci-scan share: bus enumeration, NFD-style config, capabilities, output.

The two scanners have the same shape (enumerate a sysfs bus, derive node-feature-discovery's
`<bus>-<fields>.present` labels under a class whitelist, add edgefd capability labels from the
accelerator catalogue, write one feature file), so everything but the bus-specific reading and
label rules lives here once. A bus plugs in through a `BusSpec`.

Capability labels (`edgefd.io/<kind>.present`, `.count`) count an accelerator kind across *all*
buses (a Coral on USB plus one on PCIe is `edgetpu.count=2`), so each scanner also runs the other
bus's discovery for catalogue matches. Both files then carry the same capability values, which
the features.d merge accepts without conflict, and either scanner alone is still correct.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import click

from .cli import (
    BadInput,
    OutputError,
    common_options,
    emit_json,
    guarded,
    write_stdout_bytes,
)
from .hostroot import HostRoot
from .labels import DEFAULT_NAMESPACE, check_label
from .sysfs import note_dir_error
from .yamlfile import read_yaml

if TYPE_CHECKING:
    from .catalogue import Accelerator, Catalogue

log = logging.getLogger(__name__)

D = TypeVar("D")
CAPABILITY_DOMAIN = "edgefd.io"
NFD_PREFIX = DEFAULT_NAMESPACE + "/"


@dataclass(frozen=True)
class ScanResult(Generic[D]):
    """Devices found on one bus plus every problem met, for the caller to show."""

    devices: tuple[D, ...]
    warnings: tuple[str, ...] = ()


# --------------------------------------------------------------------------- enumeration


def rehost(host: HostRoot, message: str) -> str:
    """Show paths in a message as the host sees them (`/sys/...`), not under the fixture root."""
    root = str(host.root)
    if root == "/":
        return message
    return message.replace(root + "/", "/")


def host_path_of(host: HostRoot, real: str) -> str:
    """HostRoot.host_path for a path known to be under the root, without relpath's cost."""
    root = str(host.root).rstrip("/")
    if not root:
        return real
    if real.startswith(root + "/"):
        return real[len(root) :]
    return host.host_path(real)


def scandir_names(path: str, warnings: list[str]) -> set[str] | None:
    """Names in a directory, or None with a warning (broken link, loop, not a directory)."""
    try:
        return set(os.listdir(path))
    except OSError as e:
        note_dir_error(path, e, warnings)
    return None


def bus_entries(
    host: HostRoot, bus_dir: str, warnings: list[str], bus: str
) -> list[tuple[str, str]]:
    """(name, real path under the root) of every entry of a sysfs bus `devices` directory.

    The kernel makes each entry a relative symlink into `/sys/devices`; it is resolved lexically
    from its link text, which costs one `readlink` instead of an `lstat` per path component.
    Absolute targets (possible in a copied or chrooted tree) are re-rooted; a target that would
    climb out of the root falls back to HostRoot.resolve, which cannot escape.
    """
    base = host.path(bus_dir)
    root = str(host.root).rstrip("/")
    try:
        with os.scandir(base) as it:
            raw = sorted((e.name, e.path, e.is_symlink()) for e in it)
    except FileNotFoundError:
        warnings.append(
            f"{bus}: {bus_dir} does not exist under {host.root} (no {bus} bus on this host, "
            "or sysfs is not mounted there); no devices"
        )
        return []
    except OSError as e:
        warnings.append(f"{bus}: cannot list {bus_dir} ({e.strerror or e}); no devices")
        return []
    out = []
    for name, path, is_link in raw:
        real = path
        if is_link:
            try:
                target = os.readlink(path)
            except OSError as e:
                warnings.append(f"{bus} {name}: cannot read link ({e.strerror or e}); skipped")
                continue
            if target.startswith("/"):
                real = root + os.path.normpath(target)
            else:
                real = os.path.normpath(os.path.join(str(base), target))
            if not (real + "/").startswith(root + "/"):
                try:
                    real = str(host.resolve(f"{bus_dir}/{name}"))
                except OSError as e:
                    warnings.append(f"{bus} {name}: cannot resolve ({e.strerror or e}); skipped")
                    continue
        out.append((name, real))
    return out


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class BusRules:
    """NFD's per-bus constants: which attributes may name a label, and the defaults."""

    bus: str
    all_fields: tuple[str, ...]  # canonical order, as NFD joins them
    default_fields: tuple[str, ...]
    fallback_fields: tuple[str, ...]  # NFD's choice when no configured field is valid
    default_whitelist: tuple[str, ...]


@dataclass(frozen=True)
class SourceConfig:
    class_whitelist: tuple[str, ...]
    label_fields: tuple[str, ...]


def split_list(values: Iterable[str] | None) -> list[str] | None:
    """`--opt a,b --opt c` -> ['a', 'b', 'c']; None when the option was not given."""
    if not values:
        return None
    out = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def _string_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadInput(f"{where} must be a list of strings")
    return [v.strip() for v in value]


def load_config_file(path: Path, bus: str) -> dict[str, list[str]]:
    """Read `deviceClassWhitelist` / `deviceLabelFields` for one bus from a YAML file.

    Accepted shapes, so an existing nfd-worker.conf can be reused as is:
    `{sources: {usb: {...}}}`, `{usb: {...}}`, or the bare `{deviceClassWhitelist: ...}`.
    """
    doc = read_yaml(path, "config")
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise BadInput(f"{path}: the top level must be a mapping")
    where = str(path)
    section: Any = doc
    if "sources" in doc:
        section, where = doc["sources"] or {}, f"{path}: sources"
        if not isinstance(section, dict):
            raise BadInput(f"{where} must be a mapping")
    if bus in section:
        section, where = (
            section[bus] or {},
            f"{where}.{bus}" if "sources" in doc else f"{path}: {bus}",
        )
        if not isinstance(section, dict):
            raise BadInput(f"{where} must be a mapping")
    elif "deviceClassWhitelist" not in section and "deviceLabelFields" not in section:
        return {}
    out: dict[str, list[str]] = {}
    for key in ("deviceClassWhitelist", "deviceLabelFields"):
        if key in section and section[key] is not None:
            out[key] = _string_list(section[key], f"{where}.{key}")
    return out


def select_fields(requested: Sequence[str], rules: BusRules) -> tuple[tuple[str, ...], list[str]]:
    """NFD's rule: keep known fields in canonical order; if none is valid, use the fallback."""
    wanted = {f.strip().lower() for f in requested}
    fields = tuple(f for f in rules.all_fields if f in wanted)
    warnings = []
    unknown = sorted(wanted - set(rules.all_fields))
    if unknown:
        warnings.append(
            f"{rules.bus}: ignoring unknown label field(s) {', '.join(unknown)} "
            f"(known: {', '.join(rules.all_fields)})"
        )
    if not fields:
        fields = rules.fallback_fields
        warnings.append(f"{rules.bus}: no valid label fields; using {','.join(fields)}")
    return fields, warnings


def resolve_config(
    rules: BusRules,
    cli_whitelist: Sequence[str] | None,
    cli_fields: Sequence[str] | None,
    config_path: Path | None,
) -> tuple[SourceConfig, list[str]]:
    """Defaults, overridden by the config file, overridden by command-line options."""
    whitelist: list[str] = list(rules.default_whitelist)
    fields: list[str] = list(rules.default_fields)
    if config_path is not None:
        cfg = load_config_file(config_path, rules.bus)
        whitelist = cfg.get("deviceClassWhitelist", whitelist)
        fields = cfg.get("deviceLabelFields", fields)
    if cli_whitelist is not None:
        whitelist = list(cli_whitelist)
    if cli_fields is not None:
        fields = list(cli_fields)
    sel, warnings = select_fields(fields, rules)
    wl = tuple(w.strip().lower().removeprefix("0x") for w in whitelist if w.strip())
    return SourceConfig(class_whitelist=wl, label_fields=sel), warnings


def whitelist_match(cls: str, whitelist: Sequence[str]) -> str | None:
    """The first whitelist entry that prefixes `cls` (NFD's rule), or None."""
    for w in whitelist:
        if cls.startswith(w):
            return w
    return None


def join_fields(
    values: Mapping[str, str | None], fields: Sequence[str], omit_empty: str = ""
) -> str:
    """Join label fields with `_` in order; a missing value is an empty field, as in NFD,
    except for the field named by `omit_empty`, which is left out entirely."""
    parts = []
    for f in fields:
        v = values.get(f)
        if not v and f == omit_empty:
            continue
        parts.append(v or "")
    return "_".join(parts)


# --------------------------------------------------------------------------- derivation


@dataclass(frozen=True)
class DeviceReport:
    """Why one device did or did not produce labels, for --explain."""

    key: str  # "usb 1-1.3"
    title: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Derivation:
    labels: Mapping[str, str]
    reports: tuple[DeviceReport, ...]


@dataclass(frozen=True)
class AccelMatch:
    """One device the catalogue recognises; one physical accelerator counts once."""

    bus: str
    device: str  # "1-1.3", "0000:01:00.0"
    accelerator: Accelerator
    state: str = ""


def capability_labels(matches: Iterable[AccelMatch]) -> dict[str, str]:
    """`edgefd.io/<kind>.present=true` and `.count=N` per kind, whatever the bus."""
    counts: dict[str, int] = {}
    for m in matches:
        counts[m.accelerator.kind] = counts.get(m.accelerator.kind, 0) + 1
    out = {}
    for kind, n in counts.items():
        out[f"{CAPABILITY_DOMAIN}/{kind}.present"] = "true"
        out[f"{CAPABILITY_DOMAIN}/{kind}.count"] = str(n)
    return out


def describe_match(m: AccelMatch) -> str:
    state = f", {m.state} state" if m.state else ""
    return f"{m.accelerator.id} ({m.accelerator.name}{state})"


@dataclass(frozen=True)
class BusSpec(Generic[D]):
    """How one bus plugs into the shared producer."""

    rules: BusRules
    producer: str  # feature file name and tool name: "usb-scan"
    scan: Callable[[HostRoot], ScanResult[D]]
    derive: Callable[[Sequence[D], SourceConfig], Derivation]
    matches: Callable[[Sequence[D], Catalogue], list[AccelMatch]]
    inventory: Callable[[D, AccelMatch | None], dict[str, Any]]
    device_key: Callable[[D], str]


def get_spec(bus: str) -> BusSpec[Any]:
    """The spec of a bus, imported on demand (a scanner needs the other bus's only for matches)."""
    if bus == "usb":
        from tools.usb_scan.labels import SPEC as usb_spec

        return usb_spec
    if bus == "pci":
        from tools.pci_scan.labels import SPEC as pci_spec

        return pci_spec
    raise ValueError(f"unknown bus {bus!r}")


@dataclass
class Evaluation:
    """Everything one scan produced: the labels and how they came about."""

    spec: BusSpec[Any]
    config: SourceConfig
    devices: tuple[Any, ...]
    labels: dict[str, str]
    reports: tuple[DeviceReport, ...]
    own_matches: dict[str, AccelMatch]
    other_matches: list[AccelMatch]
    capabilities: dict[str, str]
    rejected: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def evaluate(
    spec: BusSpec[Any],
    host: HostRoot,
    config: SourceConfig,
    catalogue: Catalogue | None,
    other_buses: Sequence[str] = (),
    config_warnings: Sequence[str] = (),
) -> Evaluation:
    """Scan, derive NFD labels and capability labels, validate every label; pure after I/O."""
    result = spec.scan(host)
    warnings = list(config_warnings) + list(result.warnings)
    der = spec.derive(result.devices, config)
    own: dict[str, AccelMatch] = {}
    others: list[AccelMatch] = []
    if catalogue is not None:
        own = {m.device: m for m in spec.matches(result.devices, catalogue)}
        for bus in other_buses:
            other = get_spec(bus)
            ores = other.scan(host)
            # the other bus's problems belong to its own scanner's report; keep ours readable
            others.extend(other.matches(ores.devices, catalogue))
    caps = capability_labels([*own.values(), *others])
    labels: dict[str, str] = {}
    rejected: list[str] = []
    for key, value in {**der.labels, **caps}.items():
        reason = check_label(key, value)
        if reason:
            rejected.append(f"{key}={value}: {reason}")
        else:
            labels[key] = value
    warnings.extend(f"label refused: {r}" for r in rejected)
    return Evaluation(
        spec=spec,
        config=config,
        devices=result.devices,
        labels=labels,
        reports=der.reports,
        own_matches=own,
        other_matches=others,
        capabilities=caps,
        rejected=rejected,
        warnings=warnings,
    )


# --------------------------------------------------------------------------- output


def render_feature_file(ev: Evaluation) -> bytes:
    from .featuresd import render

    return render(ev.labels, ev.spec.producer)


def explain_text(ev: Evaluation, host: HostRoot) -> str:
    """Human explanation: per device, which labels it gave and why the others were not."""
    cfg = ev.config
    out = [
        f"{ev.spec.producer}: host root {host.root}",
        f"  class whitelist: {', '.join(cfg.class_whitelist) or '(empty: nothing is labelled)'}",
        f"  label fields: {', '.join(cfg.label_fields)}",
        "",
    ]
    if not ev.reports:
        out.append(f"no {ev.spec.rules.bus} devices found")
    rejected_keys = {r.split("=", 1)[0] for r in ev.rejected}
    for rep in ev.reports:
        out.append(f"{rep.key}  {rep.title}")
        for line in rep.lines:
            out.append(f"  {line}")
            if any(k in line for k in rejected_keys):
                out.append("    ^ label refused (see warnings): it is not written")
        m = ev.own_matches.get(rep.key.split(" ", 1)[1])
        if m is not None:
            out.append(
                f"  catalogue: {describe_match(m)} -> counts toward "
                f"{CAPABILITY_DOMAIN}/{m.accelerator.kind}.count (whatever the class whitelist)"
            )
        out.append("")
    out.append("capabilities (all buses):")
    if not ev.capabilities:
        out.append("  no catalogue accelerator found")
    kinds = sorted({k.split("/", 1)[1].rsplit(".", 1)[0] for k in ev.capabilities})
    allm = [*ev.own_matches.values(), *ev.other_matches]
    for kind in kinds:
        who = ", ".join(
            f"{m.bus} {m.device} {describe_match(m)}" for m in allm if m.accelerator.kind == kind
        )
        n = ev.capabilities[f"{CAPABILITY_DOMAIN}/{kind}.count"]
        out.append(f"  {CAPABILITY_DOMAIN}/{kind}.present=true, .count={n}: {who}")
    if ev.warnings:
        out.append("")
        out.append("warnings:")
        out.extend(f"  {rehost(host, w)}" for w in ev.warnings)
    out.append("")
    out.append(f"labels ({len(ev.labels)}):")
    out.extend(f"  {k}={ev.labels[k]}" for k in sorted(ev.labels))
    return "\n".join(out) + "\n"


def inventory(ev: Evaluation, host: HostRoot) -> dict[str, Any]:
    """The JSON inventory: every device with everything read about it, and the labels."""
    devices = []
    for d in ev.devices:
        key = ev.spec.device_key(d)
        devices.append(ev.spec.inventory(d, ev.own_matches.get(key)))
    return {
        "source": ev.spec.rules.bus,
        "producer": ev.spec.producer,
        "host_root": str(host.root),
        "config": {
            "deviceClassWhitelist": list(ev.config.class_whitelist),
            "deviceLabelFields": list(ev.config.label_fields),
        },
        "devices": devices,
        "capabilities": _capability_json([*ev.own_matches.values(), *ev.other_matches]),
        "labels": dict(sorted(ev.labels.items())),
        "warnings": [rehost(host, w) for w in ev.warnings],
    }


def _capability_json(matches: Sequence[AccelMatch]) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for m in matches:
        out.setdefault(m.accelerator.kind, []).append(
            {"bus": m.bus, "device": m.device, "accelerator": m.accelerator.id, "state": m.state}
        )
    return dict(sorted(out.items()))


def accelerator_json(m: AccelMatch | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "id": m.accelerator.id,
        "kind": m.accelerator.kind,
        "name": m.accelerator.name,
        "state": m.state,
        "resource": m.accelerator.resource,
    }


# --------------------------------------------------------------------------- the command


def bus_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Options both bus scanners take, on top of tools.common.cli.common_options."""
    opts = [
        click.option(
            "--class-whitelist",
            multiple=True,
            metavar="CLASSES",
            help="Comma-separated class prefixes to label (NFD deviceClassWhitelist); "
            "replaces the default.",
        ),
        click.option(
            "--label-fields",
            multiple=True,
            metavar="FIELDS",
            help="Comma-separated attributes joined into the label name (NFD deviceLabelFields).",
        ),
        click.option(
            "--config",
            "config_path",
            type=click.Path(dir_okay=False, path_type=Path),
            help="YAML config: an nfd-worker.conf (sources.<bus>) or a bare mapping with "
            "deviceClassWhitelist / deviceLabelFields. Command-line options win.",
        ),
        click.option(
            "--catalogue",
            "catalogue_path",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Accelerator catalogue YAML (default: the packaged accelerators.yaml).",
        ),
        click.option(
            "--no-capabilities",
            is_flag=True,
            help="Only NFD-compatible labels: no edgefd.io capability labels.",
        ),
        click.option(
            "--explain",
            is_flag=True,
            help="Print why every device did or did not produce each label; write nothing.",
        ),
        click.option(
            "--watch",
            is_flag=True,
            help="Keep running; rewrite the feature file within a second of a device change.",
        ),
        click.option(
            "--rescan-interval",
            type=click.FloatRange(min=0.5),
            default=30.0,
            show_default=True,
            help="With --watch: full rescan period, a backstop for missed events.",
        ),
        click.option(
            "--poll-interval",
            type=click.FloatRange(min=0.05, max=5.0),
            default=0.25,
            show_default=True,
            help="With --watch and no udev monitor: how often the bus listing is checked.",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def run_producer(
    spec: BusSpec[Any],
    *,
    host_root: str,
    features_dir: str,
    dry_run: bool,
    output: str,
    verbose: int = 0,
    class_whitelist: Sequence[str] = (),
    label_fields: Sequence[str] = (),
    config_path: Path | None = None,
    catalogue_path: Path | None = None,
    no_capabilities: bool = False,
    explain: bool = False,
    watch: bool = False,
    rescan_interval: float = 30.0,
    poll_interval: float = 0.25,
) -> int:
    """The body of `usb-scan` / `pci-scan`."""
    host = HostRoot.of(host_root)
    config, cfg_warnings = resolve_config(
        spec.rules, split_list(class_whitelist), split_list(label_fields), config_path
    )
    catalogue = None
    if not no_capabilities:
        from .catalogue import load_catalogue

        catalogue = load_catalogue(catalogue_path)
    others = tuple(b for b in ("usb", "pci") if b != spec.rules.bus)

    def once() -> Evaluation:
        return evaluate(spec, host, config, catalogue, others, cfg_warnings)

    def emit(ev: Evaluation) -> None:
        if explain:
            click.echo(explain_text(ev, host), nl=False)
            return
        for w in ev.warnings:
            log.warning("%s", rehost(host, w))
        data = render_feature_file(ev)
        if output == "json":
            emit_json(inventory(ev, host))
        elif dry_run:
            write_stdout_bytes(data)
        if dry_run:
            return
        from .featuresd import write_feature_file

        try:
            path, changed = write_feature_file(Path(features_dir), spec.producer, ev.labels)
        except OSError as e:
            raise OutputError(
                f"cannot write {Path(features_dir) / spec.producer}: {e.strerror or e}"
            ) from None
        log.info("%s %s (%d labels)", "wrote" if changed else "unchanged", path, len(ev.labels))

    if not watch:
        emit(once())
        return 0
    return watch_loop(host, once, emit, rescan_interval, poll_interval)


def watch_loop(
    host: HostRoot,
    once: Callable[[], Evaluation],
    emit: Callable[[Evaluation], None],
    rescan_interval: float,
    poll_interval: float,
) -> int:
    """Emit now, then again whenever the device set changes, until SIGTERM/SIGINT."""
    import signal  # lazy: only --watch needs these
    import threading

    from .hotplug import Watcher

    stop = threading.Event()
    last: list[bytes | None] = [None]
    lock = threading.Lock()
    failure: list[BaseException] = []

    def refresh() -> None:
        with lock:
            try:
                ev = once()
                data = render_feature_file(ev)
                if data != last[0]:
                    emit(ev)
                    last[0] = data
            except Exception as e:  # keep watching; a later rescan may succeed
                if isinstance(e, OutputError | BadInput):
                    log.error("%s", e)
                else:
                    failure.append(e)
                    stop.set()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    watcher = Watcher(
        host,
        subsystems=("usb", "pci"),
        rescan_interval=rescan_interval,
        poll_interval=poll_interval,
        on_change=refresh,
    )
    # start watching before the first scan, so a change during that scan is not lost
    watcher.start()
    refresh()
    log.info("watching %s (%s)", host.root, watcher.mode)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        watcher.stop()
        for s, h in old.items():
            signal.signal(s, h)
    if failure:
        raise failure[0]
    return 0


def make_command(tool: str, bus: str, help_text: str) -> click.Command:
    """Build the click command of a bus scanner; the two differ only in bus and help."""

    @click.command(name=tool, help=help_text)
    @common_options
    @bus_options
    @guarded(tool)
    def command(**kwargs: Any) -> int:
        return run_producer(get_spec(bus), **kwargs)

    return command
