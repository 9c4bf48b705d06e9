"""What a run leaves behind: the feature file, dry-run bytes, or a JSON inventory.

The feature file goes through tools.common.featuresd so its bytes are the same ones every
edgefd producer writes (sorted, header line, atomic replace, untouched when unchanged).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tools.common.cli import OutputError, emit_json, write_stdout_bytes
from tools.common.featuresd import render, write_feature_file

from .labels import Derivation, reference_format
from .tree import DeviceTree

log = logging.getLogger("dt-labeller")

PRODUCER = "dt-labeller"


def inventory(tree: DeviceTree | None, result: Derivation) -> dict[str, Any]:
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
            for v in sorted(result.visits, key=lambda v: v.path.split("/"))
        ],
        "labels": result.labels,
        "origins": {k: list(p) for k, p in result.origins.items()},
        "rejected": [{"key": r.key, "node": r.source, "reason": r.reason} for r in result.rejected],
        "warnings": list(tree.warnings) if tree else [],
    }


def emit(
    tree: DeviceTree | None,
    result: Derivation,
    features_dir: Path,
    dry_run: bool,
    output: str,
    fmt: str,
) -> int:
    """Write (or print) the labels; return the exit code."""
    report = inventory(tree, result) if output == "json" else None
    if dry_run:
        if report is not None:
            report["feature_file"] = {
                "path": str(features_dir / PRODUCER),
                "written": False,
                "content": render(result.labels, PRODUCER).decode(),
            }
            emit_json(report)
        elif fmt == "reference":
            write_stdout_bytes(reference_format(result.labels))
        else:
            write_stdout_bytes(render(result.labels, PRODUCER))
        return 0
    try:
        path, changed = write_feature_file(features_dir, PRODUCER, result.labels)
    except OSError as e:
        raise OutputError(f"cannot write {features_dir / PRODUCER}: {e.strerror or e}") from None
    log.info("%s %s (%d labels)", "wrote" if changed else "unchanged:", path, len(result.labels))
    if report is not None:
        report["feature_file"] = {"path": str(path), "written": changed}
        emit_json(report)
    return 0
