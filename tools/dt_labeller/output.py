"""What a run leaves behind: the feature file, dry-run bytes, or a JSON inventory.

The feature file goes through the one Publisher every edgefd producer uses (same bytes: sorted,
header line; atomic replace, untouched when unchanged; exact bytes on stdout in a dry run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgefd.core.labels import Derivation
from edgefd.core.log import get_logger
from edgefd.core.nudge import Nudge
from edgefd.core.output import emit_json, write_stdout
from edgefd.core.publish import Publisher

from .labels import Visit, origins, reference_format
from .tree import DeviceTree

log = get_logger("dt-labeller")

PRODUCER = "dt-labeller"


def inventory(tree: DeviceTree | None, result: Derivation[Visit]) -> dict[str, Any]:
    """Everything that went into the labels, for people and scripts asking "why this label"."""
    return {
        "source": {"path": tree.source, "form": tree.form} if tree else None,
        "nodes_in_tree": len(tree.nodes) if tree else 0,
        "visited": [
            {
                "path": v.path,
                "compatible": list(v.compatible),
                "status": v.status,
                "counted": v.counted,
                "labels": list(v.labels),
                **({"note": v.note} if v.note else {}),
            }
            # path order, not tree order: the blob and directory forms then print the same
            for v in sorted(result.reports, key=lambda v: v.path.split("/"))
        ],
        "labels": result.labels,
        "origins": {k: list(p) for k, p in origins(result).items()},
        "rejected": [{"key": r.key, "node": r.source, "reason": r.reason} for r in result.rejected],
        "warnings": list(tree.warnings) if tree else [],
    }


def emit(
    tree: DeviceTree | None,
    result: Derivation[Visit],
    features_dir: Path,
    dry_run: bool,
    output: str,
    fmt: str,
) -> int:
    """Write (or print) the labels; return the exit code."""
    publisher = Publisher(features_dir, PRODUCER, dry_run, nudge=None if dry_run else Nudge())
    report = inventory(tree, result) if output == "json" else None
    if report is not None and dry_run:
        content = publisher.render(result.labels).decode()
        report["feature_file"] = {"path": str(publisher.path), "written": False, "content": content}
        emit_json(report)
        return 0
    if dry_run and fmt == "reference":
        write_stdout(reference_format(result.labels))
        return 0
    publisher.publish(result.labels)
    publisher.settle()  # within NFD's tick of another producer's write: its trailing event
    changed = publisher.wrote
    if not dry_run:
        state = "wrote" if changed else "unchanged:"
        log.info("%s %s (%d labels)", state, publisher.path, len(result.labels))
    if report is not None:
        report["feature_file"] = {"path": str(publisher.path), "written": changed}
        emit_json(report)
    return 0
