"""From devicetree nodes to node labels: pure functions, no I/O.

The mapping is the one adaptant-labs/k8s-dt-node-labeller uses, so a cluster can switch tools
without its label selectors changing: the root node and nodes named like `cpu`/`gpu` are
visited, and every `compatible` string `vendor,model` becomes `<prefix>/vendor-model` whose
value is how many visited nodes carry it. Where that tool would publish a label the API server
rejects (taking the node's whole label update down with it), this one refuses just that label
and says why; and it does not count devices the tree itself marks as unusable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from edgefd.core.labels import PRODUCER_POLICY, Derivation, NamespacePolicy, Rejected, check_label

from .tree import DtNode

DEFAULT_PREFIX = "beta.devicetree.org"
DEFAULT_NODE_NAMES = ("cpu", "gpu")

# The reference tool renames this vendor prefix; keeping it keeps label selectors portable.
VENDOR_ALIASES = {"xlnx": "xilinx"}

# Devicetree spec, "status" property: only these mean the device can be used by the OS.
AVAILABLE_STATUSES = frozenset({"okay", "ok"})


@dataclass(frozen=True)
class Visit:
    """A node that was looked at, and what it contributed (or why it did not)."""

    path: str
    compatible: tuple[str, ...]
    status: str | None
    counted: bool
    labels: tuple[str, ...] = ()
    note: str = ""


def origins(result: Derivation[Visit]) -> dict[str, tuple[str, ...]]:
    """Label -> the paths of the nodes that carry it, in visiting order (for --explain)."""
    out: dict[str, list[str]] = {}
    for v in result.reports:
        for key in v.labels:
            out.setdefault(key, []).append(v.path)
    return {k: tuple(out[k]) for k in sorted(out)}


def name_matcher(names: Iterable[str]) -> re.Pattern[str]:
    """Match node names as the reference does: `name`, `name@addr` and `nameN@addr`."""
    alts = "|".join(re.escape(n) for n in dict.fromkeys(names) if n)
    if not alts:
        return re.compile(r"(?!)")
    return re.compile(rf"(?:{alts})(?:[0-9]*@.*)?", re.DOTALL)


def split_compatible(raw: bytes | None) -> tuple[list[str], list[str]]:
    """Split a stringlist property into its strings and descriptions of what would not decode."""
    if not raw:
        return [], []
    good: list[str] = []
    bad: list[str] = []
    for part in raw.split(b"\0"):
        if not part:
            continue
        try:
            good.append(part.decode("utf-8"))
        except UnicodeDecodeError:
            bad.append(part.decode("utf-8", "backslashreplace"))
    return good, bad


def decode_status(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    return raw.split(b"\0", 1)[0].decode("utf-8", "backslashreplace")


def is_available(status: str | None) -> bool:
    """A node without `status` is available; otherwise only "okay" (or legacy "ok") is."""
    return status is None or status in AVAILABLE_STATUSES


def label_name(compatible: str) -> str:
    """`vendor,model` -> `vendor-model`, exactly as the reference tool spells it.

    Like the reference, only the part before a second comma survives, and a string without a
    comma is used as is (`pwm-fan` -> `pwm-fan`).
    """
    parts = compatible.split(",")
    if len(parts) == 1:
        return compatible
    return f"{VENDOR_ALIASES.get(parts[0], parts[0])}-{parts[1]}"


def derive(
    nodes: Sequence[DtNode],
    node_names: Iterable[str] = DEFAULT_NODE_NAMES,
    prefix: str = DEFAULT_PREFIX,
    include_disabled: bool = False,
    policy: NamespacePolicy = PRODUCER_POLICY,
) -> Derivation[Visit]:
    """Turn tree nodes into labels, recording every visited node for the inventory.

    A node counts once per label even if two of its strings map to the same label; the
    reference would count it twice, but "how many nodes" is what the value claims to be.
    """
    matcher = name_matcher(node_names)
    counts: dict[str, int] = {}
    visits: list[Visit] = []
    rejected: dict[tuple[str, str], Rejected] = {}
    for node in nodes:
        path = node.path
        name = path.rsplit("/", 1)[1]
        if path != "/" and not matcher.fullmatch(name):
            continue
        strings, undecodable = split_compatible(node.compatible)
        status = decode_status(node.status)
        for s in undecodable:
            key = f"{prefix}/{s}"
            rejected.setdefault(
                (key, path), Rejected(key, "", "compatible string is not UTF-8 text", path)
            )
        if not is_available(status) and not include_disabled:
            visits.append(
                Visit(path, tuple(strings), status, False, (), f'status is "{status}"; not counted')
            )
            continue
        own: list[str] = []
        for s in strings:
            key = f"{prefix}/{label_name(s)}"
            reason = check_label(key, "1", policy)
            if reason:
                rejected.setdefault(
                    (key, path), Rejected(key, "", f"from compatible {s!r}: {reason}", path)
                )
                continue
            if key not in own:
                own.append(key)
        for key in own:
            counts[key] = counts.get(key, 0) + 1
        visits.append(Visit(path, tuple(strings), status, True, tuple(own)))
    return Derivation(
        labels={k: str(counts[k]) for k in sorted(counts)},
        reports=tuple(visits),
        rejected=tuple(rejected.values()),
    )


def reference_format(labels: dict[str, str]) -> bytes:
    """What the reference tool's dry run prints, so migrating users can diff the two."""
    lines = ["Discovered the following devicetree properties:", ""]
    lines.extend(f"{k}: {labels[k]}" for k in sorted(labels))
    return ("\n".join(lines) + "\n").encode()
