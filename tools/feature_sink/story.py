"""What a sync did, told at info level: which labels came and went, from which producer and why.

The sink's log is what an operator greps when a label vanished ("why did the NCS2 label go at
12:40?"), so every write says what it changed and on whose behalf; a sync that changes nothing
says nothing. The reasons are derived from the plan alone (the ownership before and after, the
files read), plus what this sink last applied, which tells a producer's change from a hand edit
that the sink set back.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .desired import Desired
    from .ownership import Ownership, Target
    from .patch import LabelChange

log = logging.getLogger("edgefd.feature_sink")

# A first sync on a busy node may add hundreds of labels: the first ones at info, the rest at
# debug (-vv), after a line saying how many there were.
MAX_CHANGE_LINES = 100


def _when(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def why(
    c: LabelChange,
    before: Ownership,
    after: Ownership,
    desired: Desired,
    applied: dict[str, str] | None,
) -> str:
    """Who asked for one change, and why, in a few words."""
    if c.op == "remove":
        producer = before.owner_of(c.key) or "?"
        if producer in desired.present:
            return f"{producer} no longer lists it"
        return f"{producer}'s file is gone and its removal grace is over"
    producer = after.owner_of(c.key) or "?"
    if c.key in before.keys:
        if c.op == "add":
            return f"from {producer}; repaired: someone had removed it from the node"
        if applied is not None and applied.get(c.key) not in (None, c.old):
            return f"from {producer}; repaired: someone had changed it on the node"
    return f"from {producer}"


def summary(changes: list[LabelChange], owned: int) -> str:
    counts = {op: sum(1 for c in changes if c.op == op) for op in ("add", "replace", "remove")}
    return (
        f"{counts['add']} label(s) added, {counts['replace']} changed, {counts['remove']} "
        f"removed; {owned} owned"
    )


def producer_news(
    changes: list[LabelChange],
    before: Ownership,
    after: Ownership,
    desired: Desired,
    grace: timedelta,
) -> list[str]:
    """Producers whose file vanished (their labels kept for the removal grace) or came back,
    and labels found already set that the sink now owns: annotation-only news."""
    lines = []
    for p in sorted(set(after.missing) - set(before.missing)):
        n = len(after.producers.get(p, ()))
        until = _when(after.missing[p] + grace)
        lines.append(f"{p}'s file is gone; its {n} label(s) are kept until {until}")
    for p in sorted(set(before.missing) - set(after.missing)):
        if p in desired.present:
            lines.append(f"{p}'s file is back")
    changed = {c.key for c in changes}
    adopted = sorted(after.keys - before.keys - changed)
    if adopted:
        shown = ", ".join(adopted[:5]) + (
            f" and {len(adopted) - 5} more" if len(adopted) > 5 else ""
        )
        lines.append(f"adopted {len(adopted)} label(s) already set as wanted: {shown}")
    return lines


def tell(
    what: str,
    changes: list[LabelChange],
    before: Ownership,
    outcome: Target,
    desired: Desired,
    applied: dict[str, str] | None,
    grace: timedelta,
) -> None:
    """Log one write: a summary, then each change with its producer and reason. `before` is
    the ownership the sync started from, `outcome` what it wrote."""
    after = outcome.ownership
    news = producer_news(changes, before, after, desired, grace)
    if not changes and not news:
        return
    log.info("%s: %s", what, summary(changes, len(after.keys)))
    for line in news:
        log.info("%s: %s", what, line)
    for i, c in enumerate(changes):
        if i == MAX_CHANGE_LINES:
            log.info("%s: ... %d more change(s) (-vv lists them)", what, len(changes) - i)
        level = logging.INFO if i < MAX_CHANGE_LINES else logging.DEBUG
        reason = why(c, before, after, desired, applied)
        fields = {"object": what, "label": c.key, "op": c.op, "value": c.value, "was": c.old}
        log.log(level, "%s: %s (%s)", what, c, reason, extra=fields)


def applied_labels(outcome: Target) -> dict[str, str]:
    """The owned labels as a sync left them: what `why` compares the next sync against."""
    return {k: outcome.labels[k] for k in outcome.ownership.keys if k in outcome.labels}
