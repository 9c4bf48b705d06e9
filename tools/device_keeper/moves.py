"""From devplugin's decisions (edgefd.inventory.decisions), version after version, to moves:
"this handout's node went from number A at path P to number B at path Q".

A move is a node of a present handout whose number differs from the one this process last saw
it present with (a Coral that loads its firmware comes back at its port as the same device,
1a6e:089a -> 18d1:9302, with a new number; at its bus path, the path moves with it). An absent
handout moves nothing: its last present number stays the one compared with when it is back,
however many versions later. The first time this process sees a handout present (its first
read, or later: a device plugged in, a handout a new configuration makes) is a catch-up, `old`
None: each holder that the runtime or the keeper (before a restart) gave another number at one
of the paths the node was given at (`was`) missed a move, and gets the number now (service.py;
never decided from what the holder's path names). A handout devplugin no longer lists is
forgotten: if it comes back, that is a first sight again.

Pure: the file is read by follow.py, the grants are made by service.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from edgefd.inventory.decisions import Decisions, GivenNode, Handout

from .rules import DEFAULT_ACCESS, DeviceNumber, parse_node


def number(text: str) -> DeviceNumber:
    """A handout's number ("c:189:5") as the keeper's DeviceNumber (decisions checked it)."""
    node, _ = parse_node(text)
    return node


@dataclass(frozen=True)
class Move:
    """Node `index` of `handout` is now `new` at `path`; it was `old` at `old_path`.

    `old` None is a catch-up (see the module). `was`: the (path, number) pairs the node was
    given before (the catch-up's candidates). `decisions`: the version the move is of, which
    says what else a holder holds (never revoked for this move)."""

    handout: Handout
    new: DeviceNumber
    path: str
    old: DeviceNumber | None = None
    old_path: str = ""
    was: tuple[tuple[str, DeviceNumber], ...] = ()
    access: str = DEFAULT_ACCESS
    seen: float = 0.0  # wall clock of the scan that saw the new node (0: not known)
    again: bool = False  # a second look after a move (follow.RECHECK): reported only if it acted
    decisions: Decisions = field(default_factory=lambda: Decisions(0.0), compare=False)

    @property
    def device(self) -> str:
        return self.handout.device

    @property
    def paths(self) -> set[str]:
        """Every path the node was given at: the runtime's and the keeper's nodes there are
        this node's."""
        return {self.path, *([self.old_path] if self.old_path else []), *(p for p, _ in self.was)}


def _was(node: GivenNode) -> tuple[tuple[str, DeviceNumber], ...]:
    return tuple((p, number(n)) for p, n in node.was)


def catch_up(handout: Handout, decisions: Decisions) -> list[Move]:
    """The first look at a present handout: a move to each node's number from whatever each
    holder was given at its paths (a move missed while the keeper was not following)."""
    return [
        Move(handout, number(n.number), n.path, was=_was(n), decisions=decisions)
        for n in handout.nodes
    ]


def moves_between(before: Handout, after: Handout, decisions: Decisions) -> list[Move]:
    """The moves of one handout's nodes from `before` (last seen present) to `after`."""
    out = []
    for b, a in zip(before.nodes, after.nodes, strict=False):
        if b.pair == a.pair:
            continue
        out.append(
            Move(
                after,
                number(a.number),
                a.path,
                old=number(b.number),
                old_path=b.path,
                was=_was(a),
                seen=decisions.time,
                decisions=decisions,
            )
        )
    return out


class MoveTracker:
    """The handouts last seen present, and the moves each new version makes of them."""

    def __init__(self) -> None:
        self._present: dict[tuple, Handout] = {}
        self._now: list[Handout] = []  # the handouts present in the latest version

    def moves(self, decisions: Decisions) -> list[Move]:
        out: list[Move] = []
        listed = decisions.by_key()
        self._now = [h for h in listed.values() if h.present]
        for key in [k for k in self._present if k not in listed]:
            del self._present[key]  # no longer decided: a first sight if it comes back
        for key, h in listed.items():
            if not h.present:
                continue
            before = self._present.get(key)
            out += catch_up(h, decisions) if before is None else moves_between(before, h, decisions)
            self._present[key] = h
        return out

    @property
    def following(self) -> Iterable[Handout]:
        """The handouts present now. Not those only last *seen* present: an absent device's
        entry keeps the number it had (to tell its move when it returns), and a catch-up to
        that number would grant a number the device no longer has (another device may take
        it) and revoke what its holder was given since."""
        return list(self._now)
