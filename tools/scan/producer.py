"""The body of a bus scanner (`usb-scan`, `pci-scan`): configure, scan, publish; once, or on
every device change with --watch.

"Could not read the host" is never published as "the host has nothing": a scan that raises
HostUnreadable ends a one-shot run with exit 3 and leaves the previous file untouched, and in
--watch mode keeps the last file until the bus can be read again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from edgefd.bus.enumerate import BusReader, rehost
from edgefd.core.errors import EdgefdError
from edgefd.core.hostroot import HostRoot
from edgefd.core.output import emit_json, write_stdout
from edgefd.core.publish import Publisher

from .config import resolve_config, split_list
from .derive import BusSpec, Evaluation, evaluate
from .report import explain_text, inventory

log = logging.getLogger(__name__)


def run_producer(
    spec: BusSpec[Any],
    capability_buses: Sequence[BusReader[Any]],
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
    """Scan `spec`'s bus (and, for capability labels, `capability_buses`) and publish."""
    host = HostRoot.of(host_root)
    config, cfg_warnings = resolve_config(
        spec.rules,
        split_list(class_whitelist, "--class-whitelist"),
        split_list(label_fields, "--label-fields"),
        config_path,
    )
    catalogue = None
    if not no_capabilities:
        from edgefd.bus.catalogue import load_catalogue

        catalogue = load_catalogue(catalogue_path)
    publisher = Publisher(features_dir, spec.producer, dry_run)

    def once() -> Evaluation:
        return evaluate(spec, host, config, catalogue, capability_buses, cfg_warnings)

    def emit(ev: Evaluation) -> None:
        if explain:
            write_stdout(explain_text(ev, host).encode())
            return
        for w in ev.warnings:
            log.warning("%s", rehost(host, w))
        if output == "json":
            emit_json(inventory(ev, host))
            if dry_run:
                return
        changed = publisher.publish(ev.labels)
        if not dry_run:
            state = "wrote" if changed else "unchanged"
            log.info("%s %s (%d labels)", state, publisher.path, len(ev.labels))

    if not watch:
        emit(once())
        return 0
    buses = tuple(dict.fromkeys([spec.reader.bus, *(r.bus for r in capability_buses)]))
    return watch_loop(host, buses, once, emit, publisher, rescan_interval, poll_interval)


def watch_loop(
    host: HostRoot,
    buses: Sequence[str],
    once: Callable[[], Evaluation],
    emit: Callable[[Evaluation], None],
    publisher: Publisher,
    rescan_interval: float,
    poll_interval: float,
) -> int:
    """Emit now, then again whenever what would be written changes, until SIGTERM/SIGINT."""
    from edgefd.runtime.signals import Signals
    from edgefd.runtime.watch import Watcher

    lock = threading.Lock()
    last: list[bytes | None] = [None]
    failure: list[BaseException] = []
    signals = Signals().install()

    def refresh(_names: frozenset[str] = frozenset()) -> None:
        with lock:
            try:
                ev = once()
                data = publisher.render(ev.labels)
                if data != last[0]:
                    emit(ev)
                    last[0] = data
            except EdgefdError as e:  # unreadable host, unwritable output: keep the last file
                log.error("%s (keeping the previous file; retrying on the next change)", e)
            except Exception as e:  # a bug: stop rather than run on with a stale file
                failure.append(e)
                signals.request_stop()

    watcher = Watcher(
        refresh,
        [host.path(f"/sys/bus/{b}/devices") for b in buses],
        uevent_subsystems=buses,
        poll_interval=poll_interval,
        rescan_interval=rescan_interval,
        name="hotplug",
    )
    # watch before the first scan, so a change during that scan is not lost
    watcher.start()
    try:
        refresh()
        log.info("watching %s (%s)", host.root, watcher.mode)
        while not signals.stop_requested:
            signals.wait(1.0)
    finally:
        watcher.stop()
        signals.close()
    if failure:
        raise failure[0]
    return 0
