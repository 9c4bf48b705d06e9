"""The body of a bus scanner (`usb-scan`, `pci-scan`): configure, then one scan session on one
inventory; once, or on every device change with --watch.

One process can publish for several producers (`usb-scan --watch --also pci-scan`: one
interpreter, one inventory, one scan of each bus per change, both files). Producers are
found by name through the `edgefd.producers` entry points, the way the tools register
themselves, so this engine never imports a tool.

"Could not read the host" is never published as "the host has nothing": a scan that raises
HostUnreadable ends a one-shot run with exit 3 and leaves the previous files untouched; with
--watch the inventory keeps its last snapshot (and so the files) until the buses can be read
again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from edgefd.bus.enumerate import BusReader
from edgefd.core.errors import UsageError
from edgefd.core.hostroot import HostRoot
from edgefd.core.log import get_logger
from edgefd.core.nudge import Nudge
from edgefd.core.publish import Publisher, features_directory
from edgefd.core.record import Record
from edgefd.core.service import Listen, WatchSettings

from .config import resolve_config, split_list
from .derive import BusSpec
from .session import Producer, ScanMetrics, ScanSession, WatchContext

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


class Labelling(Record):
    """Which labels: NFD's settings for the scanner's own bus (--config, --class-whitelist,
    --label-fields), the catalogue, and the other producers of the process (--also)."""

    class_whitelist: Sequence[str] = ()
    label_fields: Sequence[str] = ()
    config_path: Path | None = None
    catalogue_path: Path | None = None
    no_capabilities: bool = False
    also: Sequence[str] = ()


class Outputs(Record):
    features_dir: str
    dry_run: bool = False
    output: str = "text"  # text | json
    explain: bool = False
    create_dir: bool = False  # --create-features-dir


class Watching(Record):
    hold: float
    settings: WatchSettings
    listen: Listen = None
    notice_dir: str | None = None  # where a failed reload is told (edgefd.core.notices)


def run_from_options(spec: BusSpec[Any], capability_buses: Sequence[Any], **o: Any) -> int:
    """The command's options (edgefd.cli.scanner), grouped."""
    if o["explain"]:
        explain_alone(o["output"], o["watch"])
    labelling = Labelling(
        o["class_whitelist"],
        o["label_fields"],
        o["config_path"],
        o["catalogue_path"],
        o["no_capabilities"],
        o["also"],
    )
    outputs = Outputs(
        o["features_dir"], o["dry_run"], o["output"], o["explain"], o["create_features_dir"]
    )
    watching = None
    if o["watch"]:
        settings = WatchSettings(
            poll_interval=o["poll_interval"], rescan_interval=o["rescan_interval"]
        )
        watching = Watching(o["hold"], settings, o["listen"], o["notice_dir"])
    return run_producer(spec, capability_buses, o["host_root"], labelling, outputs, watching)


def explain_alone(output: str, watch: bool) -> None:
    """--explain is one scan explained in text: with -o json it would print text under a
    JSON flag, with --watch a watch that prints nothing; both are usage errors, said at once
    (dt-labeller's --explain as well)."""
    if output == "json":
        raise UsageError(
            "--explain prints text: drop -o json (-o json --dry-run prints the JSON inventory: "
            "its devices and labels)"
        )
    if watch:
        raise UsageError("--explain explains one scan: drop --watch")


def configured(
    specs: Sequence[BusSpec[Any]], labelling: Labelling, publishers: Sequence[Publisher]
) -> list[Producer]:
    """Each producer with its NFD settings: --class-whitelist and --label-fields for the first
    (the command's own bus), --config (re-read on a reload) for all."""
    out = []
    for i, (s, pub) in enumerate(zip(specs, publishers, strict=True)):
        config, warnings = resolve_config(
            s.rules,
            split_list(labelling.class_whitelist, "--class-whitelist") if i == 0 else None,
            split_list(labelling.label_fields, "--label-fields") if i == 0 else None,
            labelling.config_path,
        )
        out.append(Producer(s, config, warnings, pub))
    return out


class Scanning(Record):
    """One process's scanning, as set up: where, which producers over which buses, and how
    a session is made for them (the outputs)."""

    host: HostRoot
    specs: Sequence[BusSpec[Any]]
    labelling: Labelling
    publishers: Sequence[Publisher]
    readers: Sequence[BusReader[Any]]
    catalogue: Any
    make_session: Callable[..., ScanSession]


def run_producer(
    spec: BusSpec[Any],
    capability_buses: Sequence[BusReader[Any]],
    host_root: str,
    labelling: Labelling,
    outputs: Outputs,
    watching: Watching | None = None,
) -> int:
    """Scan and publish for `spec` and the producers named in `also`.

    --class-whitelist and --label-fields apply to `spec`'s own bus; the other producers take
    their settings from --config (an nfd-worker.conf has a section per bus) or NFD's defaults.
    """
    from edgefd.inventory.inventory import Inventory

    host = HostRoot.of(host_root)
    also = dict.fromkeys(labelling.also)
    specs = [spec, *(load_producer(n) for n in also if n != spec.producer)]
    # --explain and a JSON dry run show something else than the file: nothing is printed
    echo = not (outputs.explain or outputs.output == "json")
    dry = outputs.dry_run or outputs.explain
    if not dry:
        features_directory(outputs.features_dir, outputs.create_dir)
    nudge = None if dry else Nudge()  # one per process: each file knows the others' events
    publishers = [Publisher(outputs.features_dir, s.producer, dry, echo, nudge) for s in specs]
    producers = configured(specs, labelling, publishers)
    readers = list({r.bus: r for r in [*(s.reader for s in specs), *capability_buses]}.values())
    catalogue = None
    if not labelling.no_capabilities:
        from edgefd.bus.catalogue import load_catalogue

        catalogue = load_catalogue(labelling.catalogue_path)
        readers = [r.bound(catalogue) for r in readers]  # the platform bus reads what it names
    make_session = partial(
        ScanSession, host, producers, catalogue, capability_buses, output=outputs.output,
        explain=outputs.explain,
    )  # fmt: skip
    if watching is None:
        make_session().on_snapshot(Inventory(host, readers, catalogue=catalogue, hold=0.0).scan())
        for p in publishers:
            p.settle()  # a trailing event still due is sent before the process ends
        return 0
    scanning = Scanning(host, specs, labelling, publishers, readers, catalogue, make_session)
    return _watch(scanning, outputs, watching)


def _watch(scanning: Scanning, outputs: Outputs, watching: Watching) -> int:
    """Publish now, then after every snapshot, until SIGTERM/SIGINT: the inventory and the
    session as components of the runner (edgefd.runtime.runner), --config reloaded."""
    from edgefd.core.duration import format_duration
    from edgefd.core.version import startup_line
    from edgefd.inventory.inventory import Inventory
    from edgefd.runtime.runner import Lifeline, Reload, run

    m = None
    if watching.listen is not None:
        from edgefd.runtime.metrics import Metrics

        m = Metrics()
    labelling = scanning.labelling
    shown = {
        "producers": ",".join(s.producer for s in scanning.specs),
        "host-root": scanning.host.root,
        "features-dir": "stdout (dry run)" if outputs.dry_run else outputs.features_dir,
        "hold": format_duration(watching.hold),
        "poll": format_duration(watching.settings.poll_interval),
        "rescan": format_duration(watching.settings.rescan_interval),
        "listen": _listen_text(watching.listen),
    }

    def build(lifeline: Lifeline) -> list[Any]:
        # the hold is the only memory a scanner needs: a device is forgotten when it ends
        inventory = Inventory(
            scanning.host,
            scanning.readers,
            catalogue=scanning.catalogue,
            hold=watching.hold,
            forget_after=watching.hold,
            settings=watching.settings,
            metrics=m,
        )
        metrics = ScanMetrics(m) if m is not None else None
        watch = WatchContext(inventory, lifeline, metrics, labelling.config_path)
        session = scanning.make_session(watch=watch)
        inventory.subscribe(session.on_snapshot, name="feature files")
        return [Watched(inventory), session]  # watch, then the first scan

    reload = None
    if labelling.config_path is not None:
        specs, publishers = scanning.specs, scanning.publishers
        from edgefd.core.notices import board_for

        reload = Reload(
            lambda: configured(specs, labelling, publishers),
            labelling.config_path,
            notices=board_for(watching.notice_dir, specs[0].producer),
        )
    return run(
        build,
        startup_line=startup_line("watch", shown),
        listen=watching.listen,
        metrics=m,
        reload=reload,
    )


def _listen_text(listen: Listen) -> str:
    return "off" if listen is None else f"{listen[0] or '0.0.0.0'}:{listen[1]}"


class Watched:
    """The scanner's inventory as a component of the runner, less `reconfigure`: a scanner's
    --config says how to label (the session takes it), not what to watch, while the
    inventory's reconfigure takes devplugin's resources (handed the scanner's config, the first
    reload ended the watch: 'list' object has no attribute 'selectors')."""

    def __init__(self, inventory: Any) -> None:
        self.inventory = inventory

    def start(self) -> None:
        self.inventory.start()

    def stop(self) -> None:
        self.inventory.stop()

    def alive(self) -> tuple[bool, str]:
        result: tuple[bool, str] = self.inventory.alive()
        return result
