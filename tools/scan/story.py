"""What a watching scanner tells its log at the default level: each device change, each file
write with the labels it added, changed and removed, and each scan warning once.

A watching scanner has no output but its files and its log, so "why did the NCS2 label vanish
at 12:40?" must be answerable from the log alone: the device line says it was unplugged (or
re-enumerated, or its hold expired), the write line says which labels went. A rescan that finds
nothing new writes nothing and says nothing; a warning that every scan repeats (an unreadable
attribute) is said when it first appears, and again only after it went away and came back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from edgefd.core.log import get_logger

if TYPE_CHECKING:
    from edgefd.inventory.snapshot import Change, Diff

log = get_logger("edgefd.scan")

MAX_NAMED = 10  # labels named in one write line; the counts are always complete


def device_line(c: Change) -> str:
    """One device change in a scanner's words. A scanner forgets a device when its hold ends
    (forget_after is the hold), so "forgotten" is the moment its labels go."""
    if c.kind == "removed":
        assert c.before is not None
        return f"device {c.name}: hold expired, its labels go (last seen at {c.before.key.where})"
    if c.kind == "added":
        return f"device {c.name}: added: {c.describe().split(': ', 1)[1]}"
    return f"device {c.describe()}"  # re-enumerated, unplugged ...: the devplugin's words


def tell_devices(diff: Diff) -> None:
    for c in diff.changes:
        log.info("%s", device_line(c), extra=c.log_fields())


def label_changes(before: Mapping[str, str] | None, after: Mapping[str, str]) -> str:
    """`2 label(s) added, 0 changed, 1 removed (14 in all): +a=1, +b=true, -c`."""
    if before is None:
        return f"{len(after)} label(s)"
    added = sorted(k for k in after if k not in before)
    removed = sorted(k for k in before if k not in after)
    changed = sorted(k for k in after if k in before and before[k] != after[k])
    items = [f"+{k}={after[k]}" for k in added]
    items += [f"~{k}={after[k]}" for k in changed]
    items += [f"-{k}" for k in removed]
    shown = ", ".join(items[:MAX_NAMED])
    if len(items) > MAX_NAMED:
        shown += f", and {len(items) - MAX_NAMED} more"
    counts = f"{len(added)} label(s) added, {len(changed)} changed, {len(removed)} removed"
    return f"{counts} ({len(after)} in all)" + (f": {shown}" if shown else "")


def label_fields(before: Mapping[str, str] | None, after: Mapping[str, str]) -> dict[str, object]:
    """A write's labels as a json log line's keys: every label added, changed and removed
    (the text line names at most MAX_NAMED)."""
    if before is None:
        return {"labels": dict(after)}
    return {
        "added": {k: v for k, v in after.items() if k not in before},
        "changed": {k: v for k, v in after.items() if k in before and before[k] != v},
        "removed": sorted(k for k in before if k not in after),
        "count": len(after),
    }


class Warnings:
    """Says each warning once while it lasts."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def new(self, current: Iterable[str]) -> list[str]:
        now = list(dict.fromkeys(current))
        fresh = [w for w in now if w not in self._said]
        self._said = set(now)
        return fresh
