"""Live labels against the real API server: a device plugged in or pulled out changes the Node
within a second (after the hold, for a removal), and a re-enumerating Coral never makes the
capability labels flap. The latency distribution over many trials is benchmarks/bench_live.py;
here each property is checked with margins a loaded 2-core machine keeps."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.scan.live import CORAL_BOOT, CORAL_RUNTIME, NFD, TPU, LivePipeline

pytestmark = pytest.mark.realpeer

BOOT_LABEL = f"{NFD}/usb-fe_1a6e_089a.present"
RUNTIME_LABEL = f"{NFD}/usb-ff_18d1_9302.present"
HOLD = 3.0


@pytest.fixture
def live(kube_apiserver: Any, tmp_path: Path) -> Iterator[LivePipeline]:
    p = LivePipeline(kube_apiserver, tmp_path)
    try:
        yield p.start(hold=f"{HOLD:g}s")
    finally:
        p.stop()


def test_plug_and_unplug(live: LivePipeline) -> None:
    # the sample node's Coral (boot IDs, port 2-1) goes away: labels stay for the hold, then go
    t0 = time.monotonic()
    live.builder.remove_usb("2-1")
    gone = live.history.wait(lambda s: f"{TPU}.present" not in s, HOLD + 5, t0)
    assert HOLD - 0.3 <= gone - t0 <= HOLD + 1.5, (gone - t0, live.log("bus-scan"))
    assert BOOT_LABEL not in live.history.current()
    # plugged in again (another port): on the Node within a second, no hold in that direction
    t1 = time.monotonic()
    live.builder.add_usb({**CORAL_BOOT, "port": "2-2"})
    back = live.history.wait(
        lambda s: s.get(f"{TPU}.present") == "true" and s.get(BOOT_LABEL) == "true", 10, t1
    )
    assert back - t1 < 1.5, (back - t1, live.log("bus-scan"), live.log("feature-sink"))


@pytest.mark.parametrize("gap", [0.1, 1.0, 2.5])
def test_reenumeration_never_flaps(live: LivePipeline, gap: float) -> None:
    """Boot-state directory removed, runtime-state directory at the same port `gap` s later:
    at every moment the Node says one Edge TPU, and the NFD label switches once, from the boot
    to the runtime ID, with no moment where neither is there."""
    start = time.monotonic()
    live.builder.remove_usb("2-1")
    time.sleep(gap)
    live.builder.add_usb({**CORAL_RUNTIME, "port": "2-1"})
    switched = live.history.wait(lambda s: RUNTIME_LABEL in s, 10, start)
    time.sleep(HOLD + 1)  # past the hold: nothing may expire later either
    states = live.history.between(start, time.monotonic())
    assert all(s.get(f"{TPU}.present") == "true" for s in states), states
    assert all(s.get(f"{TPU}.count") == "1" for s in states), states
    assert all(BOOT_LABEL in s or RUNTIME_LABEL in s for s in states), states
    assert BOOT_LABEL not in live.history.current()
    assert switched - start < gap + 1.5


def test_two_corals_plugged_together_only_count_up(live: LivePipeline) -> None:
    live.builder.remove_usb("2-1")
    t0 = time.monotonic()
    live.history.wait(lambda s: f"{TPU}.present" not in s, HOLD + 5, t0)
    t1 = time.monotonic()
    live.builder.add_usb({**CORAL_BOOT, "port": "2-1"})
    time.sleep(0.05)
    live.builder.add_usb({**CORAL_BOOT, "port": "2-2"})
    live.history.wait(lambda s: s.get(f"{TPU}.count") == "2", 10, t1)
    time.sleep(1.0)
    counts = [int(s.get(f"{TPU}.count", "0")) for s in live.history.between(t1, time.monotonic())]
    assert counts == sorted(counts) and counts[-1] == 2, counts
