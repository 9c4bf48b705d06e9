"""How much the sink may publish on one object, and which producers get it. Pure.

The API server refuses an object whose annotations total over 256 KiB (and etcd any request
over about 1.5 MiB) with one 422 for the whole write: without a budget, one producer too many
would keep *every* producer's labels off the node. So what the sink publishes (its labels'
keys and values plus its ownership annotation, which repeats every key) has a budget, and a
producer that does not fit is refused whole, with a reason, while all the others are applied.

Who gets the room, decided once here:
- First what stays whatever this sync does: every label the sink already has on the object
  (a producer that vanishes or is refused keeps its labels for the removal grace period).
- Then, producers that already have labels before new ones, so a new or grown file can never
  push out labels that are already applied; within each group the smallest growth first (a
  producer that shrinks makes room, the one that does not fit is the one that grew most), then
  by name.
- A refused producer counts as a file that could not be read: what it already has stays for
  the removal grace period, nothing new of it is applied.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from .desired import Desired
from .ownership import Ownership

DEFAULT_BUDGET = 128 * 1024
# {"missing":{},"producers":{},"v":1}
ENVELOPE = 35


def _producer_cost(producer: str) -> int:
    return len(json.dumps(producer)) + 4  # "name":[] and a comma


def _missing_cost(producer: str) -> int:
    return len(json.dumps(producer)) + 25  # "name":"2024-05-01T10:00:00Z",


def _cost(producer: str, labels: dict[str, str]) -> int:
    """Each label: its key and value on the object, and "key", in the annotation; plus room
    for the producer's removal-grace clock, so labels that fit keep fitting when it vanishes."""
    labels_cost = sum(2 * len(k) + len(v) + 3 for k, v in labels.items())
    return _producer_cost(producer) + _missing_cost(producer) + labels_cost


def _kept(producer: str, owned: Ownership, node_labels: dict[str, str]) -> dict[str, str]:
    return {k: node_labels[k] for k in owned.producers.get(producer, ()) if k in node_labels}


@dataclass(frozen=True)
class OverBudget:
    """A producer refused because its labels do not fit what is left of the budget."""

    producer: str
    labels: int
    needed: int
    left: int
    budget: int

    def __str__(self) -> str:
        return (
            f"{self.producer}: its {self.labels} labels need {self.needed} bytes (keys, values "
            f"and their ownership record) but only {max(0, self.left)} of the "
            f"{self.budget}-byte budget (--label-budget) are left; none of them applied, the "
            "labels it already has are kept for the removal grace period"
        )


def fit(
    desired: Desired, owned: Ownership, node_labels: dict[str, str], budget: int
) -> tuple[Desired, tuple[OverBudget, ...]]:
    """`desired` without the producers that do not fit, and why each was refused.

    Every owned producer's labels now on the object are charged first: they stay whatever
    happens to it (refused or vanished: kept for the grace period). Admitting a producer then
    costs only the difference, so a producer that shrinks makes room before one grows."""
    kept_cost = {}
    for producer in owned.producers:
        kept = _kept(producer, owned, node_labels)
        kept_cost[producer] = _cost(producer, kept) if kept else 0
    used = ENVELOPE + sum(kept_cost.values())

    def wanted(producer: str) -> dict[str, str]:
        labels = dict(desired.producers[producer])
        if producer in desired.settling:  # what it no longer lists stays a while, too
            labels = {**_kept(producer, owned, node_labels), **labels}
        return labels

    delta = {p: _cost(p, wanted(p)) - kept_cost.get(p, 0) for p in desired.producers}
    order = sorted(delta, key=lambda p: (p not in owned.producers, delta[p], p))
    over: list[OverBudget] = []
    for producer in order:
        if used + delta[producer] <= budget:
            used += delta[producer]
            continue
        needed = delta[producer] + kept_cost.get(producer, 0)
        left = budget - used + kept_cost.get(producer, 0)
        over.append(OverBudget(producer, len(desired.producers[producer]), needed, left, budget))
    if not over:
        return desired, ()
    refused = {o.producer for o in over}
    return (
        replace(
            desired,
            producers={p: v for p, v in desired.producers.items() if p not in refused},
            present=desired.present - refused,
            settling=desired.settling - refused,
        ),
        tuple(sorted(over, key=lambda o: o.producer)),
    )
