"""Which nodes a pod's nodeSelector and required node affinity let it onto, and, when none,
which requirement no node meets and what the nodes have instead.

The usual causes, said with the evidence: a misspelt key (`edgefd.io/edgtpu.present`: no
node has it; a node has `edgefd.io/edgetpu.present`), a value the nodes do not carry (`True`
for `true`), or requirements each met by some node but never all by one.
"""

from __future__ import annotations

import difflib
from typing import Any

from edgefd.inventory.naming import qualified

from .causes import Cause, listing
from .podspec import Requirement, labels, name_of, selector_terms, selects

# the label namespaces edgefd's producers write: a pod selecting on one asks for hardware
ACCELERATOR_LABELS = (qualified(""), "feature.node.kubernetes.io/", "beta.devicetree.org/")


def selected(pod: dict[str, Any], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    terms = selector_terms(pod)
    return [n for n in nodes if selects(terms, n)]


def asks_labels(pod: dict[str, Any]) -> list[Requirement]:
    """The requirements on labels edgefd's producers write."""
    return [
        r
        for term in selector_terms(pod)
        for r in term
        if not r.field and r.key.startswith(ACCELERATOR_LABELS) and r.operator != "DoesNotExist"
    ]


def did_you_mean(word: str, choices: set[str]) -> str | None:
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.75)
    return close[0] if close else None


def _unmet(req: Requirement, nodes: list[dict[str, Any]]) -> str:
    """Why no node meets `req`, with what the nodes have instead."""
    if req.field:
        return f"no node is named {listing(list(req.values))}" if req.operator == "In" else ""
    keys = {k for n in nodes for k in labels(n)}
    if req.operator in ("In", "Exists", "Gt", "Lt") and req.key not in keys:
        text = f"no node has a label {req.key}"
        near = did_you_mean(req.key, keys)
        if near:
            having = [name_of(n) for n in nodes if near in labels(n)]
            verb = "has" if len(having) == 1 else "have"
            text += f" (did you mean {near}? {listing(having)} {verb} it)"
        return text
    values = sorted({labels(n)[req.key] for n in nodes if req.key in labels(n)})
    if req.operator == "In":
        asked = " or ".join(f"{req.key}={v}" for v in req.values)
        text = f"no node has {asked}; the nodes have {req.key}={listing(values)}"
        lower = {v.lower() for v in values}
        if any(v.lower() in lower and v not in values for v in req.values):
            text += " (label values are case-sensitive: true is not True)"
        return text
    return f"no node meets {req.text()} (the nodes have {req.key}={listing(values)})"


def selector_cause(pod: dict[str, Any], nodes: list[dict[str, Any]]) -> Cause | None:
    """The reason no node is selected; None when some node is."""
    terms = selector_terms(pod)
    if any(selects(terms, n) for n in nodes):
        return None
    if not nodes:
        return Cause("no-node-matches-selector", "The cluster has no node at all.")
    spec = pod.get("spec") or {}
    has_affinity = bool((spec.get("affinity") or {}).get("nodeAffinity") or {})
    where = " and ".join(
        w
        for w, used in (("nodeSelector", spec.get("nodeSelector")), ("node affinity", has_affinity))
        if used
    )
    where = f"its {where or 'node selection'}"
    parts = []
    for i, term in enumerate(terms):
        unmet = [r for r in term if not any(r.holds(n) for n in nodes)]
        head = f"term {i + 1}: " if len(terms) > 1 else ""
        if unmet:
            parts.append(head + "; ".join(_unmet(r, nodes) for r in unmet))
        else:  # each alone is met somewhere, never all together
            alone = [
                f"{r.text()} on {listing([name_of(n) for n in nodes if r.holds(n)])}" for r in term
            ]
            parts.append(
                f"{head}no node has all of {listing([r.text() for r in term])} ({'; '.join(alone)})"
            )
    asked = listing([r.text() for t in terms for r in t])
    return Cause(
        "no-node-matches-selector",
        f"No node has what {where} asks ({asked}): {'. '.join(parts)}.",
    )
