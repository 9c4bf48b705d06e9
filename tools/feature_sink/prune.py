"""`feature-sink --prune`: take back what edgefd put on a Node, once edgefd is uninstalled.

Uninstalling (`kubectl delete -k k8s/`, `helm uninstall`) leaves the labels on purpose: a
DaemonSet that goes away must not make every workload that selects on them unschedulable at
once. When they should go too, this removes exactly what the ownership annotation says edgefd
owns, and the annotation.

It is not a second planner: a prune is the sink's own sync in the state where every producer's
file has gone and every grace period has run out (no producer present, grace 0). So the same
rules decide, and the same guarded write (one JSON Patch testing the resourceVersion and the
annotation it read) carries it out: an annotation that cannot be trusted as a whole blocks
every write; a claim on a key the namespace policy refuses (`kubernetes.io/hostname` in a
tampered annotation) is dropped and its label left as it is; labels nobody claims are never
touched. Run it after the uninstall: a running sink would put the labels back.

With `--mode nodefeature` it empties edgefd's NodeFeature object the same way (nfd-master then
removes the labels); it never creates one. Deleting edgefd's namespace, as both uninstalls do
by default, already deletes those objects.
"""

from __future__ import annotations

import dataclasses
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from edgefd.core.output import emit_json

from .desired import Desired
from .metrics import SinkMetrics
from .patch import Change
from .report import Reporter, desired_problems
from .service import Settings, connect, make_syncer
from .sync import OwnershipUntrusted, Syncer

# Every producer gone: nothing is present, and the state is authoritative, so each producer
# the annotation names has vanished and its labels are due for removal.
GONE = Desired()


def prune_moment() -> datetime:
    """Now, in whole seconds. With a grace of 0 a vanished producer's labels expire at the
    first whole second after it is noticed (the annotation keeps whole seconds); a whole-second
    `now` is that very second, so nothing is kept back."""
    return datetime.now(UTC).replace(microsecond=0)


def pruner(settings: Settings, api: Any, metrics: SinkMetrics) -> Syncer:
    """The sink's own syncer for this node and mode, with no removal grace and no Events (an
    administrator's tool: problems go to stderr)."""
    quick = dataclasses.replace(settings, grace=timedelta(0), events=False)
    return make_syncer(quick, api, metrics)


def run(settings: Settings, dry_run: bool, output: str) -> int:
    """Prune once (or show what would go); the sync's exceptions carry the exit code: 5 API
    unreachable, 1 refused or the ownership annotation untrusted (nothing written)."""
    metrics = SinkMetrics()
    syncer = pruner(settings, connect(settings, metrics), metrics)
    now = prune_moment()
    current = syncer.read()
    if current is None:  # no NodeFeature: nothing to take back (and none to create)
        print(f"feature-sink: {syncer.what} does not exist; nothing to prune", file=sys.stderr)
        return 0
    if dry_run:
        plan = syncer.plan(current, GONE, now)
        Reporter(metrics, events=False).observe(desired_problems(GONE) + list(plan.problems))
        if plan.blocked:
            raise OwnershipUntrusted(plan.blocked)
        _print(plan.changes, plan.needed, output)
        return 0
    result = syncer.sync(GONE, now)
    _print(result.changes, result.wrote, output)
    return 0


def _print(changes: list[Change], writes: bool, output: str) -> None:
    """The labels that go (or would go), as data on stdout; the rest is said on stderr."""
    if output == "json":
        emit_json([{"op": c.op, "key": c.key, "value": c.old} for c in changes])
    else:
        for c in changes:
            print(c)
    if not writes:
        print("feature-sink: nothing to prune", file=sys.stderr)
    elif not changes:
        print("feature-sink: no labels to remove; only the ownership annotation", file=sys.stderr)
