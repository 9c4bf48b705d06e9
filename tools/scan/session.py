"""A scan session: the bus scanners' subscriber of the inventory. Every snapshot becomes each
producer's labels (derive.py) and goes out through its outputs: the feature file (or stdout
in a dry run), `--output json`, `--explain`. The publisher decides, once, whether a file's
bytes changed; nothing is written or printed when they did not.

With --watch the session is a component of the runner (edgefd.runtime.runner) and one
subscriber among the inventory's, on its thread: a file that cannot be written is kept as it
was and retried on the next snapshot; a bug ends the process through its lifeline rather than
letting it run on with stale files. Once (without --watch), failures propagate to the
command, which exits with their code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from edgefd.bus.catalogue import Catalogue
from edgefd.bus.enumerate import BusReader, rehost
from edgefd.core.errors import EdgefdError
from edgefd.core.hostroot import HostRoot
from edgefd.core.log import get_logger
from edgefd.core.output import emit_json, write_stdout
from edgefd.core.publish import Publisher
from edgefd.core.record import Record

from .config import SourceConfig, source_changes
from .derive import BusSpec, Evaluation, evaluate
from .story import Warnings, label_changes, label_fields, tell_devices

if TYPE_CHECKING:
    from edgefd.inventory.snapshot import Snapshot

log = get_logger(__name__)


class Producer(Record):
    """One feature file: its bus scanner, its NFD settings and where its labels go."""

    spec: BusSpec[Any]
    config: SourceConfig
    warnings: list[str]
    publisher: Publisher


class ScanMetrics:
    def __init__(self, m: Any) -> None:  # edgefd.runtime.metrics.Metrics
        self.writes = m.counter(
            "edgefd_scan_writes_total", "Feature files written, by producer", ["producer"]
        )
        self.write_failures = m.counter(
            "edgefd_scan_write_failures_total", "Feature files that could not be written (kept)"
        )


class WatchContext(Record):
    """What a watching session is given: the inventory it follows (for `--output json`'s
    `watch`, /readyz and a rescan after a reload), where a bug ends the process, its metrics."""

    inventory: Any  # edgefd.inventory.inventory.Inventory
    lifeline: Any  # edgefd.runtime.runner.Lifeline
    metrics: ScanMetrics | None = None
    config_path: Any = None  # --config, for the reload's log line


class ScanSession:
    def __init__(
        self,
        host: HostRoot,
        producers: Sequence[Producer],
        catalogue: Catalogue | None,
        capability_buses: Sequence[BusReader[Any]],
        *,
        output: str = "text",
        explain: bool = False,
        watch: WatchContext | None = None,
    ) -> None:
        self.host = host
        self.producers = tuple(producers)
        self.catalogue = catalogue
        self.capability_buses = tuple(capability_buses)
        self.output = output
        self.explain = explain
        self.watch = watch
        self.metrics = watch.metrics if watch is not None else None
        self._labels: dict[str, dict[str, str]] = {}  # as last published, per producer
        self._host: dict[str, dict[str, str]] = {}  # per producer: its host labels
        self._warnings = Warnings()

    def evaluate(self, snap: Snapshot) -> list[Evaluation]:
        scans, devices = snap.label_scans(), snap.label_devices()
        return [
            evaluate(
                p.spec, scans, devices, p.config, self.catalogue, self.capability_buses,
                p.warnings, self.host_labels(p.spec),
            )
            for p in self.producers
        ]  # fmt: skip

    def host_labels(self, spec: BusSpec[Any]) -> dict[str, str]:
        """The host's own labels `spec` owns, read once: the kernel does not change under a
        running process. edgefd's, so not with --no-capabilities (NFD's labels only)."""
        if spec.host_labels is None or self.catalogue is None:
            return {}
        if spec.producer not in self._host:
            self._host[spec.producer] = spec.host_labels(self.host)
        return self._host[spec.producer]

    def on_snapshot(self, snap: Snapshot) -> None:
        """Publish every producer's labels from `snap`. Once: errors propagate. Watching: a
        file that cannot be written is kept and retried; a bug stops the process."""
        if self.watch is None:
            self._publish(snap)
            return
        tell_devices(snap.diff)
        try:
            self._publish(snap)
        except EdgefdError as e:
            if self.metrics:
                self.metrics.write_failures.inc()
            log.error("%s (keeping the previous files; retrying on the next change)", e)
        except Exception as e:  # a bug: its traceback here, the process ends with 70
            log.exception("publishing the labels died: %s", e)
            self.watch.lifeline.fail(e)

    # -- as a component of the runner

    def start(self) -> None:
        """Nothing of its own to start: it publishes on the inventory's snapshots."""

    def stop(self) -> None:
        """The files stay as they are; a trailing event still due (a write within NFD's tick
        of another change, edgefd.core.nudge) is sent first, so NFD reads what stays."""
        for p in self.producers:
            p.publisher.settle()

    def reconfigure(self, producers: Sequence[Producer]) -> None:
        """--config changed (a ConfigMap update): the labels follow, no restart."""
        old, self.producers = self.producers, tuple(producers)
        if self.watch is not None:
            changes = [
                f"{p.spec.producer}: {change}"
                for before, p in zip(old, self.producers, strict=True)
                for change in source_changes(before.config, p.config)
            ]
            log.info(
                "configuration reloaded from %s: %s",
                self.watch.config_path,
                "; ".join(changes) or "nothing changed",
            )
            self.watch.inventory.refresh()

    def _publish(self, snap: Snapshot) -> None:
        evaluations = self.evaluate(snap)
        # each warning once while it lasts (every scan would repeat an unreadable attribute)
        if not self.explain:  # --explain shows them in its report
            for w in self._warnings.new(w for ev in evaluations for w in ev.warnings):
                log.warning("%s", rehost(self.host, w))
        for p, ev in zip(self.producers, evaluations, strict=True):
            if not p.publisher.publish(ev.labels):
                continue  # the same bytes as last time: nothing to say
            if self.metrics:
                self.metrics.writes.labels(producer=p.spec.producer).inc()
            self._report(p, ev)
            self._labels[p.spec.producer] = dict(ev.labels)

    def _report(self, p: Producer, ev: Evaluation) -> None:
        if self.explain:
            from .report import explain_text

            write_stdout(explain_text(ev, self.host).encode())
            return
        if self.output == "json":
            from .report import inventory

            doc = inventory(ev, self.host)
            if self.watch is not None:
                doc["watch"] = self.watch.inventory.describe()
            emit_json(doc)
        pub = p.publisher
        if pub.dry_run:
            return
        if not pub.wrote:  # a restart finding its file as it would write it
            log.debug("unchanged %s (%d labels)", pub.path, len(ev.labels))
            return
        before = self._labels.get(p.spec.producer)
        log.info(
            "wrote %s: %s",
            pub.path,
            label_changes(before, ev.labels),
            extra={
                "producer": p.spec.producer,
                "file": str(pub.path),
                **label_fields(before, ev.labels),
            },
        )

    def ready(self) -> tuple[bool, str]:
        """/readyz: every file written completely once (the pod's startup probe)."""
        missing = [p.spec.producer for p in self.producers if not p.publisher.published]
        if missing:
            return False, f"not written yet: {', '.join(missing)}"
        mode = self.watch.inventory.mode if self.watch is not None else "once"
        return True, f"ok ({', '.join(p.spec.producer for p in self.producers)}; {mode})"
