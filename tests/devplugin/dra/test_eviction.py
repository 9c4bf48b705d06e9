"""When an absent device's taint turns NoExecute (eviction.py, `--evict-after`): after the
inventory's hold plus the duration, counted from when this process found the device missing
(not its last_seen, not an earlier run's saved times, also after a restart), never for a
present device or one not known missing, and not at all by default. The taint it gives is
dra/test_slices.py's; the DRA front-end publishing it at the deadline, dra/test_frontend.py's;
the option's usage, test_cli.py's."""

from __future__ import annotations

from pathlib import Path

from edgefd.devplugin.dra import slices
from edgefd.devplugin.dra.eviction import NEVER, Eviction
from edgefd.inventory import state
from tests.devplugin.devices import coral
from tests.fixturegen import HostBuilder
from tests.inventory.inventories import Clock, inventory

# last seen at 1000, found missing by the scan at 1010
GONE = coral(
    present=False,
    reason="unplugged from port 2-1",
    last_seen=1000.0,
    missing_since=1010.0,
    missed_since=1010.0,
)


def test_deadline_is_missed_since_plus_hold_plus_the_duration() -> None:
    ev = Eviction(after=2.0, hold=3.0)
    assert ev.deadline(GONE) == 1015.0  # from when it was found missing, not its last_seen
    assert not ev.due(GONE, 1014.9) and ev.due(GONE, 1015.0)
    assert ev.deadline(coral()) is None  # present: never
    assert ev.deadline(GONE._replace(missed_since=None)) is None  # not known missing: never
    earlier_run = GONE._replace(missing_since=10.0)  # an earlier run's saved time: not counted
    assert ev.deadline(earlier_run) == 1015.0
    assert NEVER.deadline(GONE) is None  # off by default
    assert ev.next_deadline([GONE, coral()], 1011.0) == 1015.0
    assert ev.next_deadline([GONE], 1016.0) is None  # past: nothing to wait for


def test_after_a_restart_an_absence_counts_from_this_process_not_the_state_file(
    host: Path, tmp_path: Path
) -> None:
    """Issue 30, item 3: the state file says the Coral was last seen an hour ago and missing
    since 50 minutes ago (the last run stopped while it was away); this process starts while it
    is away again (loading its firmware). No NoExecute taint, and none dated in the past,
    before the hold plus `--evict-after` have passed from this process's first scan."""
    clock = Clock()
    path = tmp_path / "state.json"
    old = coral(port="2-1", last_seen=clock.t - 3600, missing_since=clock.t - 3000)
    state.save(path, [old._replace(present=False)])
    HostBuilder(host).remove_usb("2-1")
    inv = inventory(host, state_file=path, clock=clock, monotonic=clock.mono)
    ev = Eviction(after=2.0, hold=inv.hold)
    start = clock.t
    clock.t += 0.9  # the first scan, 0.9 s after the start
    snap = inv.refresh()
    assert snap is not None
    gone = snap.device("coral-usb-2-1")
    assert gone is not None and not gone.present
    assert gone.missing_since == start - 3000  # kept for what else reads it
    assert ev.deadline(gone) == start + 0.9 + inv.hold + 2.0
    for dt in (0.9, 2.0, inv.hold + 2.0, inv.hold + 2.8):
        [taint] = slices.taints(gone, ev, start + dt)
        assert taint["effect"] == "NoSchedule", dt
    clock.t = start + 0.9 + inv.hold + 2.0
    gone = inv.refresh().device("coral-usb-2-1")  # type: ignore[union-attr]
    assert gone is not None and ev.due(gone, clock.t)
    [taint] = slices.taints(gone, ev, clock.t)
    assert taint["effect"] == "NoExecute"
    assert taint["timeAdded"] == slices._rfc3339(start + 0.9 + inv.hold + 2.0)
