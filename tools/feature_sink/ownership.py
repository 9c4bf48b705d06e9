"""Which labels the sink owns, and the pure rules deciding what the node's labels become.

Ownership lives on the Node itself, in one annotation written by the same JSON Patch that
changes the labels, so it can never disagree with them (a crash leaves both old or both new)
and it survives restarts of the sink: a restarted sink sees what it owns and changes nothing.

Annotation `edgefd.io/owned-labels`, compact JSON with sorted keys::

    {"missing":{"usb-scan":"2024-05-01T10:00:00Z"},
     "producers":{"pci-scan":["feature.node.kubernetes.io/pci-0302_10de.present"]},"v":1}

- `producers`: producer (features.d file name) -> sorted label keys it set. JSON, not a comma
  list, because it records two levels (producer, key) and file names may hold any character;
  label keys cannot hold `"` or `\\`, so the keys cost no escaping.
- `missing`: producers whose file has vanished, with the time the sink first noticed. Kept on
  the node so a sink that restarts (or crash-loops) during the grace period neither forgets
  the clock nor restarts it.
- `v`: format version; an unknown version is treated like a malformed annotation.

The annotation can be edited by anyone who may patch the Node, so it is a claim, not a fact
(decide what a claim is worth in `decode` and `vet`, the README beside it, "Ownership trust"):
- A claim the sink cannot read as a whole (not JSON, nested too deep, a member twice, an
  unknown version or member, wrong shapes, over 256 KiB) is *untrusted*: the sink writes
  nothing at all to that object until a person removes or fixes the annotation.
- Single entries the sink's own rules would never have written (a key that is not a valid
  label key, or that its namespace policy refuses; a producer name that is not a usable
  features.d file name; a key claimed by two producers) are dropped from the annotation and
  reported; the labels they name are left exactly as they are.

Rules (NFD's and the brief's, decided here once):
- Labels not owned are never changed or removed.
- A desired label already on the node with the same value but not owned is adopted (nothing on
  the node changes; the sink manages it from then on). With a different value it is someone
  else's: left alone and reported as a conflict.
- A label goes away when its producer's file exists and no longer lists it. When the file
  disappears, its labels stay for the grace period, measured from when the sink first noticed.
- An owned label whose value was edited by hand, or which was deleted by hand, is repaired.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from edgefd.core.labels import NamespacePolicy, check_key
from edgefd.inventory.naming import qualified

from .desired import Desired, check_producer_name

log = logging.getLogger(__name__)

ANNOTATION = qualified("owned-labels")
FORMAT_VERSION = 1
# The API's limit for all of an object's annotations together: a larger value was never
# written by the API server, let alone by the sink; not worth parsing.
MAX_ANNOTATION_BYTES = 256 * 1024
_MEMBERS = frozenset({"v", "producers", "missing"})


@dataclass(frozen=True)
class Ownership:
    """What the sink owns on one node: producer -> label keys, plus removal-grace clocks."""

    producers: dict[str, frozenset[str]] = field(default_factory=dict)
    missing: dict[str, datetime] = field(default_factory=dict)

    def owner_of(self, key: str) -> str | None:
        for producer, keys in self.producers.items():
            if key in keys:
                return producer
        return None

    @property
    def keys(self) -> frozenset[str]:
        return _all(self.producers.values())

    def is_empty(self) -> bool:
        return not any(self.producers.values()) and not self.missing


def _ceil_second(t: datetime) -> datetime:
    """The annotation stores whole seconds; rounding the first-noticed time up (never down)
    keeps the grace period from ending early after a round trip through the annotation."""
    whole = t.replace(microsecond=0)
    return whole if whole == t else whole + timedelta(seconds=1)


def _fmt_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str) -> datetime:
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        raise ValueError("no time zone")
    return t


def encode(own: Ownership) -> str | None:
    """The annotation value, or None when the sink owns nothing (the annotation is dropped)."""
    if own.is_empty():
        return None
    doc = {
        "v": FORMAT_VERSION,
        "producers": {p: sorted(keys) for p, keys in sorted(own.producers.items()) if keys},
    }
    if own.missing:
        doc["missing"] = {p: _fmt_time(t) for p, t in sorted(own.missing.items())}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


class MalformedOwnership(ValueError):
    """The annotation exists but cannot be trusted as a whole (edited by hand, corrupted,
    forged, or from a newer sink)."""


def _shown(text: str, limit: int = 80) -> str:
    """Annotation text as messages show it: escaped (no forged log lines), cut short."""
    out = ascii(text)
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON readers disagree on which of two equal member names wins: refuse the ambiguity."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise MalformedOwnership(f"annotation {ANNOTATION}: member {_shown(k)} appears twice")
        out[k] = v
    return out


def decode(value: str | None) -> Ownership:
    """Read the annotation; raise MalformedOwnership rather than guess at a damaged one.

    Structure only: whether each entry is one the sink would have written is `vet`'s call."""
    if value is None or value == "":
        return Ownership()
    bad = f"annotation {ANNOTATION}"
    if len(value) > MAX_ANNOTATION_BYTES:
        raise MalformedOwnership(f"{bad} is {len(value)} bytes, more than any the sink writes")
    try:
        doc = json.loads(value, object_pairs_hook=_unique_members)
    except RecursionError:
        raise MalformedOwnership(f"{bad} is nested too deeply to be the sink's") from None
    except ValueError as e:
        if isinstance(e, MalformedOwnership):
            raise
        raise MalformedOwnership(f"{bad} is not JSON: {e}") from e
    version = doc.get("v") if isinstance(doc, dict) else None
    if type(version) is not int or version != FORMAT_VERSION:
        raise MalformedOwnership(
            f"{bad} has no supported format version (want v={FORMAT_VERSION}; a newer sink "
            "may have written it)"
        )
    unknown = sorted(set(doc) - _MEMBERS)
    if unknown:
        raise MalformedOwnership(f"{bad} has unknown member {_shown(unknown[0])}")
    producers_doc = doc.get("producers", {})
    missing_doc = doc.get("missing", {})
    if not isinstance(producers_doc, dict) or not isinstance(missing_doc, dict):
        raise MalformedOwnership(f"{bad}: producers/missing must be objects")
    producers: dict[str, frozenset[str]] = {}
    for p, keys in producers_doc.items():
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise MalformedOwnership(f"{bad}: the keys of {_shown(p)} must be a list of strings")
        producers[p] = frozenset(keys)
    missing: dict[str, datetime] = {}
    for p, t in missing_doc.items():
        try:
            if not isinstance(t, str):
                raise ValueError("not a string")
            missing[p] = _parse_time(t)
        except ValueError as e:
            raise MalformedOwnership(f"{bad}: bad time for {_shown(p)}: {e}") from None
    return Ownership(producers, missing)


@dataclass(frozen=True)
class DroppedClaim:
    """An annotation entry the sink would never have written: dropped, never acted on."""

    producer: str
    keys: tuple[str, ...]  # () for the producer's whole entry
    reason: str

    def __str__(self) -> str:
        what = "its claims" if not self.keys else ", ".join(_shown(k) for k in self.keys[:3])
        more = f" and {len(self.keys) - 3} more" if len(self.keys) > 3 else ""
        return (
            f"annotation {ANNOTATION}: producer {_shown(self.producer)} claims {what}{more}, "
            f"but {self.reason}; claim dropped, the labels are left as they are"
        )


def vet(own: Ownership, policy: NamespacePolicy) -> tuple[Ownership, tuple[DroppedClaim, ...]]:
    """Keep only the claims the sink's own rules could have produced.

    The sink may only ever add, change or remove keys its namespace policy would let a
    producer write; a claim on anything else (`kubernetes.io/hostname`, a key in a denied
    namespace, garbage) would turn the annotation into a way to make the sink delete labels."""
    counts: dict[str, int] = {}
    for keys in own.producers.values():
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
    kept: dict[str, frozenset[str]] = {}
    dropped: list[DroppedClaim] = []
    for producer, keys in sorted(own.producers.items()):
        reason = check_producer_name(producer)
        if reason is not None:
            why = f"that is no usable producer name ({reason})"
            dropped.append(DroppedClaim(producer, (), why))
            continue
        by_reason: dict[str, list[str]] = {}
        for k in sorted(keys):
            why = (
                "a key is claimed by more than one producer"
                if counts[k] > 1
                else check_key(k) or policy.check(k)
            )
            if why:
                by_reason.setdefault(why, []).append(k)
        dropped.extend(DroppedClaim(producer, tuple(ks), why) for why, ks in by_reason.items())
        bad = {k for ks in by_reason.values() for k in ks}
        if keys - bad:
            kept[producer] = keys - bad
    missing = {p: t for p, t in own.missing.items() if p in kept}
    return Ownership(kept, missing), tuple(dropped)


def _all(items: Iterable[frozenset[str]]) -> frozenset[str]:
    out: set[str] = set()
    for keys in items:
        out |= keys
    return frozenset(out)


@dataclass(frozen=True)
class Conflict:
    """A desired label someone else set to another value; the sink leaves it alone."""

    key: str
    wanted: str
    found: str
    producer: str


@dataclass(frozen=True)
class Target:
    """The labels the node should end with, and the ownership to record alongside them.

    `labels` is the complete target label map (unowned labels included, unchanged), so a
    caller only diffs it against the node; `ownership` is what the annotation must say.
    """

    labels: dict[str, str]
    ownership: Ownership
    conflicts: tuple[Conflict, ...] = ()
    kept_for_grace: frozenset[str] = frozenset()
    next_expiry: datetime | None = None


def reconcile(
    node_labels: dict[str, str],
    owned: Ownership,
    desired: Desired,
    now: datetime,
    grace: timedelta,
) -> Target:
    """Decide the node's target labels. Pure: same inputs, same answer."""
    target = dict(node_labels)
    new_producers: dict[str, set[str]] = {}
    conflicts: list[Conflict] = []
    owned_keys = owned.keys
    claimed: set[str] = set()

    # 1. producers whose file was read: they say exactly what they want.
    for producer, labels in desired.producers.items():
        mine = new_producers.setdefault(producer, set())
        for key, value in labels.items():
            current = node_labels.get(key)
            if key in owned_keys or current is None or current == value:
                target[key] = value
                mine.add(key)
                claimed.add(key)
            else:
                conflicts.append(Conflict(key, value, current, producer))
    # ... except a file caught mid-rewrite: what it no longer lists stays until it is quiet
    for producer in desired.settling:
        still = {
            k for k in owned.producers.get(producer, ()) if k not in claimed and k in node_labels
        }
        new_producers.setdefault(producer, set()).update(still)
        claimed |= still

    # 2. producers not read this time: a stream speaks only for itself; a vanished file keeps
    #    its labels (those still on the node) until the grace period runs out.
    missing: dict[str, datetime] = {}
    kept: set[str] = set()
    next_expiry: datetime | None = None
    for producer, keys in owned.producers.items():
        if producer in desired.present:
            continue
        if not desired.authoritative:
            still = {k for k in keys if k not in claimed}
            if still:
                new_producers.setdefault(producer, set()).update(still)
                if producer in owned.missing:
                    missing[producer] = owned.missing[producer]
            continue
        # a recorded time in the future (a clock step, a forged annotation) restarts the clock
        since = min(owned.missing.get(producer) or _ceil_second(now), _ceil_second(now))
        expiry = since + grace
        if now >= expiry:
            continue  # grace over: its labels are no longer owned, so removed below
        still = {k for k in keys if k not in claimed and k in node_labels}
        if not still:
            continue
        new_producers.setdefault(producer, set()).update(still)
        missing[producer] = since
        kept |= still
        next_expiry = expiry if next_expiry is None else min(next_expiry, expiry)

    # 3. what was owned and is no longer owned by anyone goes away.
    now_owned: set[str] = set()
    for keys in new_producers.values():
        now_owned |= keys
    for key in owned_keys - now_owned:
        target.pop(key, None)

    ownership = Ownership(
        {p: frozenset(k) for p, k in new_producers.items() if k},
        missing,
    )
    return Target(
        labels=target,
        ownership=ownership,
        conflicts=tuple(sorted(conflicts, key=lambda c: c.key)),
        kept_for_grace=frozenset(kept),
        next_expiry=next_expiry,
    )
