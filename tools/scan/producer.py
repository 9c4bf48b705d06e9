"""The body of a bus scanner (`usb-scan`, `pci-scan`): configure, scan, publish; once, or on
every device change with --watch.

One process can publish for several producers (`usb-scan --watch --also pci-scan`: one
interpreter, one watcher and one scan of each bus per change, for both files). Producers are
found by name through the `edgefd.producers` entry points, the way the tools register
themselves, so this engine never imports a tool.

"Could not read the host" is never published as "the host has nothing": a scan that raises
HostUnreadable ends a one-shot run with exit 3 and leaves the previous files untouched, and in
--watch mode keeps the last files until the buses can be read again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgefd.bus.enumerate import BusReader, rehost
from edgefd.cli import Listen
from edgefd.core.errors import UsageError
from edgefd.core.hostroot import HostRoot
from edgefd.core.log import get_logger
from edgefd.core.output import emit_json, write_stdout
from edgefd.core.publish import Publisher

from .config import SourceConfig, resolve_config, split_list
from .derive import BusSpec, Evaluation, evaluate, scan_buses
from .hold import DEFAULT_HOLD

if TYPE_CHECKING:
    from .watchloop import WatchLoop

log = get_logger(__name__)

ENTRY_POINTS = "edgefd.producers"


def load_producer(name: str) -> BusSpec[Any]:
    """The producer registered under `name` (`usb-scan`, `pci-scan`)."""
    from importlib.metadata import entry_points

    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINTS)}
    if name not in found:
        known = ", ".join(sorted(found)) or "none installed"
        raise UsageError(f"--also {name!r}: no such producer (known: {known})")
    spec = found[name].load()
    if not isinstance(spec, BusSpec):
        raise UsageError(f"--also {name!r}: entry point is not a bus scanner")
    return spec


@dataclass
class Producer:
    spec: BusSpec[Any]
    config: SourceConfig
    warnings: list[str]
    publisher: Publisher


def run_producer(
    spec: BusSpec[Any],
    capability_buses: Sequence[BusReader[Any]],
    *,
    host_root: str,
    features_dir: str,
    dry_run: bool,
    output: str,
    verbose: int = 0,
    also: Sequence[str] = (),
    class_whitelist: Sequence[str] = (),
    label_fields: Sequence[str] = (),
    config_path: Path | None = None,
    catalogue_path: Path | None = None,
    no_capabilities: bool = False,
    explain: bool = False,
    watch: bool = False,
    rescan_interval: float = 30.0,
    poll_interval: float = 0.25,
    hold: float = DEFAULT_HOLD,
    listen: Listen = None,
) -> int:
    """Scan and publish for `spec` and the producers named in `also`.

    --class-whitelist and --label-fields apply to `spec`'s own bus; the other producers take
    their settings from --config (an nfd-worker.conf has a section per bus) or NFD's defaults.
    """
    host = HostRoot.of(host_root)
    specs = [spec, *(load_producer(n) for n in dict.fromkeys(also) if n != spec.producer)]
    producers = []
    for i, s in enumerate(specs):
        config, warnings = resolve_config(
            s.rules,
            split_list(class_whitelist, "--class-whitelist") if i == 0 else None,
            split_list(label_fields, "--label-fields") if i == 0 else None,
            config_path,
        )
        producers.append(
            Producer(s, config, warnings, Publisher(features_dir, s.producer, dry_run))
        )
    readers = list({r.bus: r for r in [*(s.reader for s in specs), *capability_buses]}.values())
    catalogue = None
    if not no_capabilities:
        from edgefd.bus.catalogue import load_catalogue

        catalogue = load_catalogue(catalogue_path)
    held = None
    if watch and hold > 0:
        from .hold import Hold

        held = Hold(hold)
    loop: WatchLoop | None = None  # set below in --watch mode; emit() reads it when called

    def evaluate_all(now: float) -> list[Evaluation]:
        scans = scan_buses(readers, host)
        if held is not None:
            scans = held.apply(scans, readers, now)
        return [
            evaluate(p.spec, scans, p.config, catalogue, capability_buses, p.warnings)
            for p in producers
        ]

    by_producer = {p.spec.producer: p for p in producers}

    def emit(ev: Evaluation) -> None:
        publisher = by_producer[ev.spec.producer].publisher
        if explain or output == "json":
            from .report import explain_text, inventory
        if explain:
            write_stdout(explain_text(ev, host).encode())
            return
        for w in ev.warnings:
            log.warning("%s", rehost(host, w))
        if output == "json":
            doc = inventory(ev, host)
            if loop is not None:
                doc["watch"] = loop.describe()
            emit_json(doc)
            if dry_run:
                return
        changed = publisher.publish(ev.labels)
        if not dry_run:
            state = "wrote" if changed else "unchanged"
            log.info("%s %s (%d labels)", state, publisher.path, len(ev.labels))

    if not watch:
        for ev in evaluate_all(0.0):
            emit(ev)
        return 0
    from .watchloop import WatchLoop

    loop = WatchLoop(
        host,
        [r.bus for r in readers],
        evaluate_all,
        emit,
        [p.publisher for p in producers],
        held,
        rescan_interval=rescan_interval,
        poll_interval=poll_interval,
        listen=listen,
    )
    return loop.run()
