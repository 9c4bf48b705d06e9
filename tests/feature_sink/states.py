"""What the sink's pure decisions are fed, built in memory, for the unit tests of desired,
ownership, patch, sync, budget and report: a desired state from feature-file texts (as read at
NOW), a Node carrying an ownership annotation, the Node a JSON Patch leaves, and how many bytes
the sink publishes on an object."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from edgefd.core.featuresd import parse_text
from edgefd.core.labels import NamespacePolicy
from edgefd.feature_sink.desired import Desired, build_desired
from edgefd.feature_sink.namespaces import SINK_POLICY
from edgefd.feature_sink.ownership import ANNOTATION, Ownership, encode
from edgefd.feature_sink.patch import NodeView
from edgefd.feature_sink.sync import Rules
from tests.feature_sink.jsonpatch import apply_patch

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
GRACE = timedelta(minutes=10)
RULES = Rules(GRACE)
F = "feature.node.kubernetes.io"


def desired_of(files: dict[str, str], policy: NamespacePolicy = SINK_POLICY) -> Desired:
    """The desired state of feature files named and written as in `files`, read at NOW."""
    parsed = [parse_text(text, name, NOW) for name, text in sorted(files.items())]
    return build_desired(parsed, policy)


def node(labels=None, owned: Ownership | None = None, rv="7", extra_ann=None) -> NodeView:
    """Node n1 with `labels` and the annotation recording `owned` (plus `extra_ann`)."""
    ann = dict(extra_ann or {})
    if owned is not None:
        value = encode(owned)
        if value is not None:
            ann[ANNOTATION] = value
    return NodeView("n1", labels, ann, rv, "uid-1")


def apply(n: NodeView, ops) -> NodeView:
    """`n` as the API server would store it after the JSON Patch `ops` (resourceVersion 8)."""
    doc = {
        "metadata": {
            "resourceVersion": n.resource_version,
            **({"labels": n.labels} if n.labels is not None else {}),
            **({"annotations": n.annotations} if n.annotations is not None else {}),
        }
    }
    out = apply_patch(doc, ops)["metadata"]
    return NodeView(n.name, out.get("labels"), out.get("annotations"), "8", n.uid)


def published_size(labels: dict[str, str], own: Ownership) -> int:
    """Bytes the sink publishes on an object: its labels' keys and values and the annotation."""
    owned = own.keys
    size = sum(len(k) + len(v) for k, v in labels.items() if k in owned)
    return size + len(encode(own) or "")
