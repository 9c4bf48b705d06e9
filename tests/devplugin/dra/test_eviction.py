"""When an absent device's taint turns NoExecute (eviction.py, `--evict-after`): after the
inventory's hold plus the duration, counted from when the inventory found the device missing
(not its last_seen), never for a present device or one not known missing, and not at all by
default. The taint it gives is dra/test_slices.py's; the DRA front-end publishing it at the
deadline, dra/test_frontend.py's; the option's usage, test_cli.py's."""

from __future__ import annotations

from edgefd.devplugin.dra.eviction import NEVER, Eviction
from tests.devplugin.devices import coral

# last seen at 1000, found missing by the scan at 1010
GONE = coral(
    present=False, reason="unplugged from port 2-1", last_seen=1000.0, missing_since=1010.0
)


def test_deadline_is_missing_since_plus_hold_plus_the_duration() -> None:
    ev = Eviction(after=2.0, hold=3.0)
    assert ev.deadline(GONE) == 1015.0  # from when it was found missing, not its last_seen
    assert not ev.due(GONE, 1014.9) and ev.due(GONE, 1015.0)
    assert ev.deadline(coral()) is None  # present: never
    assert ev.deadline(GONE._replace(missing_since=None)) is None  # not known missing: never
    assert NEVER.deadline(GONE) is None  # off by default
    assert ev.next_deadline([GONE, coral()], 1011.0) == 1015.0
    assert ev.next_deadline([GONE], 1016.0) is None  # past: nothing to wait for
