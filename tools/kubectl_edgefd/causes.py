"""The reasons `kubectl edgefd why` can give, each one sentence an operator acts on, with a
stable kind a script can test (`-o json`).

The kinds, in the order the paragraph tells them:
  not-pending              the pod is not Pending (Running, Succeeded, Failed)
  scheduled                Pending but bound to a node: the scheduler is done with it
  no-scheduler             no scheduler has looked at it (no PodScheduled condition)
  nothing-asked            it asks for no edgefd accelerator (no resource, claim or label)
  no-node-matches-selector no node has the labels its nodeSelector / required affinity ask
  unknown-resource         an edgefd.io/* resource no node has and edgefd does not serve
  claim-missing            a ResourceClaim (Template) or DeviceClass it names does not exist
  selector-matches-nothing a claim's request matches no device any node publishes
  selector-error           a claim's CEL selector fails on a device (as for the scheduler)
  plugin-not-registered    a node has the accelerator (its label) but serves no device of it
  no-device                no node it may run on has a device of what it asks
  unhealthy                a node's device is unhealthy (device plugin)
  tainted                  a device is tainted (DRA: unplugged, no device node, too hot)
  in-use                   every device it could have is held, by the pods named
  node-blocked             a node with a free device refuses the pod (taint, cordon, selector)
  could-fit                a node could take it now (the scheduler has not retried yet)
  claim-pending            a claim's state to know (made from a template not yet; allocated)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ORDER = (
    "not-pending",
    "scheduled",
    "no-scheduler",
    "nothing-asked",
    "no-node-matches-selector",
    "unknown-resource",
    "claim-missing",
    "selector-matches-nothing",
    "selector-error",
    "plugin-not-registered",
    "no-device",
    "unhealthy",
    "tainted",
    "in-use",
    "node-blocked",
    "could-fit",
    "claim-pending",
)


@dataclass(frozen=True)
class Cause:
    kind: str
    text: str  # one or more whole sentences, ending with a full stop

    def __post_init__(self) -> None:
        if self.kind not in ORDER:
            raise ValueError(f"unknown cause kind {self.kind!r}")

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text}


def ordered(causes: Iterable[Cause]) -> list[Cause]:
    """Causes in the paragraph's order, each sentence once."""
    seen: set[str] = set()
    out = []
    for c in sorted(causes, key=lambda c: ORDER.index(c.kind)):
        if c.text not in seen:
            seen.add(c.text)
            out.append(c)
    return out


def listing(items: list[str], limit: int = 4) -> str:
    """`a`, `a and b`, `a, b and c`, or the first `limit` and how many more."""
    if len(items) > limit:
        items = [*items[:limit], f"{len(items) - limit} more"]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")
