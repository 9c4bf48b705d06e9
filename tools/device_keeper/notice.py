"""A refused grant where an operator looks: the keeper holds no API token, so it leaves its
refusal as its notice (edgefd.core.notices) and feature-sink posts it as a Warning Event on
the Node, naming the keeper and, in the words, the pod and container that were not granted.

On the Node, not on the workload's pod: an Event on any pod would need `create` on Events in
every namespace, which the admission policy cannot confine to this node's pods (a policy sees
the Event, not the pod it names), so a stolen token could post words on any pod of the
cluster. The notice is the last refusal; it is cleared when a later move is granted to every
holder with none refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgefd.core.notices import GRANT_REFUSED, NoticeBoard


class RefusalNotice:
    """The keeper's notice board, fed each handled move."""

    def __init__(self, board: NoticeBoard | None) -> None:
        self.board = board
        self.posted = False

    def after(self, move: Any, done: Sequence[Any]) -> None:
        if self.board is None:
            return
        refused = [d for d in done if d.refused]
        if refused:
            first = refused[0]
            more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
            self.board.post(
                GRANT_REFUSED,
                f"{move.device} at {move.new} not granted to {first.holder} (container "
                f"{first.container[:12] or '?'}): {first.refused}{more}; its next open of the "
                "device fails with EPERM (docs/troubleshooting.md)",
            )
            self.posted = True
        elif self.posted and any(d.cgroups for d in done):
            self.board.clear()
            self.posted = False
