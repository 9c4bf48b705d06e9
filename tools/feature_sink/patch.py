"""Turn "node now" and "node wanted" into one guarded RFC 6902 JSON Patch. Pure.

One patch carries the label changes and the ownership annotation together, so they are applied
atomically. It starts with `test` operations so that a concurrent writer is never clobbered:

- `test /metadata/resourceVersion`: the patch only applies to exactly the Node the sink read.
  JSON Patch has no "test absent", so without this an `add` could overwrite a label someone set
  between our read and our write. The API server answers a failed test with 422 (and a stale
  object with 409); the sink then re-reads and recomputes.
- `test` on the annotation's previous value: documents (and enforces, even if a proxy strips the
  resourceVersion test) that the ownership the diff was based on is still the one on the node.

An empty list means "nothing to do": the caller then makes no API write at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Op = dict[str, Any]


def escape_pointer(token: str) -> str:
    """JSON Pointer (RFC 6901) escaping of one path token: `~` -> `~0`, `/` -> `~1`."""
    return token.replace("~", "~0").replace("/", "~1")


def label_path(key: str) -> str:
    return "/metadata/labels/" + escape_pointer(key)


def annotation_path(key: str) -> str:
    return "/metadata/annotations/" + escape_pointer(key)


@dataclass(frozen=True)
class NodeView:
    """The parts of a Node (or any object) the sink diffs against."""

    name: str
    labels: dict[str, str] | None
    annotations: dict[str, str] | None
    resource_version: str | None = None
    uid: str | None = None


@dataclass(frozen=True)
class LabelChange:
    """One label change, for logs and the text dry-run."""

    op: str  # "add" | "replace" | "remove"
    key: str
    value: str | None = None
    old: str | None = None

    def __str__(self) -> str:
        if self.op == "add":
            return f"add     {self.key}={self.value}"
        if self.op == "replace":
            return f"replace {self.key}={self.value} (was {self.old})"
        return f"remove  {self.key} (was {self.old})"


def label_changes(current: dict[str, str], target: dict[str, str]) -> list[LabelChange]:
    """Sorted changes turning `current` into `target`."""
    changes: list[LabelChange] = []
    for key in sorted(set(current) | set(target)):
        old, new = current.get(key), target.get(key)
        if old == new:
            continue
        if new is None:
            changes.append(LabelChange("remove", key, old=old))
        elif old is None:
            changes.append(LabelChange("add", key, value=new))
        else:
            changes.append(LabelChange("replace", key, value=new, old=old))
    return changes


def build_patch(
    node: NodeView,
    target_labels: dict[str, str],
    annotation_key: str,
    new_annotation: str | None,
) -> list[Op]:
    """The guarded JSON Patch turning `node` into `target_labels` + `new_annotation`.

    Returns [] when neither the labels nor the annotation would change.
    """
    current = dict(node.labels or {})
    annotations = node.annotations or {}
    old_annotation = annotations.get(annotation_key)
    changes = label_changes(current, target_labels)
    annotation_changes = old_annotation != new_annotation
    if not changes and not annotation_changes:
        return []

    ops: list[Op] = []
    if node.resource_version is not None:
        ops.append(
            {"op": "test", "path": "/metadata/resourceVersion", "value": node.resource_version}
        )
    if old_annotation is not None:
        ops.append({"op": "test", "path": annotation_path(annotation_key), "value": old_annotation})

    adds = {c.key: c.value for c in changes if c.op == "add"}
    if node.labels is None and adds:
        # no labels map at all: a pointer into it would fail, so create it whole
        ops.append({"op": "add", "path": "/metadata/labels", "value": adds})
    else:
        for c in changes:
            if c.op == "add":
                ops.append({"op": "add", "path": label_path(c.key), "value": c.value})
    for c in changes:
        if c.op == "replace":
            ops.append({"op": "replace", "path": label_path(c.key), "value": c.value})
        elif c.op == "remove":
            ops.append({"op": "remove", "path": label_path(c.key)})

    if annotation_changes:
        if new_annotation is None:
            ops.append({"op": "remove", "path": annotation_path(annotation_key)})
        elif node.annotations is None:
            ops.append(
                {
                    "op": "add",
                    "path": "/metadata/annotations",
                    "value": {annotation_key: new_annotation},
                }
            )
        else:
            # `add` on an existing member replaces it (RFC 6902 4.1), and works when it is absent
            ops.append(
                {"op": "add", "path": annotation_path(annotation_key), "value": new_annotation}
            )
    return ops
