"""A Coral plugged and re-enumerated within one second, as the real nfd-worker sees it.

The producer's writer (usb-scan's: the Publisher with a per-process Nudge, as
edgefd.scan.producer wires it) writes features.d twice, GAP apart: the Coral in its boot mode
(1a6e:089a), then re-enumerated (18d1:9302). A trial measures the time from the second write to
nfd-worker's NodeFeature holding exactly the final labels. `write_before` is the write of before
issue 34 (temp file in features.d, no trailing event), for the comparison figures.

Between trials the file goes back to the Coral-less labels and the worker is made to read it
(a chmod from the test itself, whichever writer is measured), then nothing happens for longer
than NFD's tick, so every trial starts with no window open and nothing due.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgefd.core.nudge import Nudge, touch_attrib
from edgefd.core.publish import Publisher, render, write_atomic

NFD = "feature.node.kubernetes.io/"
PRODUCER = "usb-scan"
GAP = 0.3  # a plug, then the re-enumeration libedgetpu's firmware load causes
QUIET = 1.5  # more than NFD's tick and the nudge's margin
WEBCAM = {NFD + "usb-ef_046d_0825.present": "true"}
TPU = {"edgefd.io/edgetpu.present": "true", "edgefd.io/edgetpu.count": "1"}
CORAL_BOOT = {**WEBCAM, **TPU, NFD + "usb-fe_1a6e_089a.present": "true"}
CORAL_RUN = {**WEBCAM, **TPU, NFD + "usb-ff_18d1_9302.present": "true"}

Writer = Callable[[dict[str, str]], None]


def write_fixed(fdir: Path) -> Writer:
    """usb-scan's writer: staging outside the watch, trailing event when due."""
    pub = Publisher(fdir, PRODUCER, dry_run=False, nudge=Nudge())
    return pub.publish


def write_before(fdir: Path) -> Writer:
    """The write before issue 34: its temp file in features.d, no trailing event."""

    def write(labels: dict[str, str]) -> None:
        write_atomic(fdir / PRODUCER, render(labels, PRODUCER))

    return write


def wait_labels(
    worker: Any, want: dict[str, str], limit: float, poll: float = 0.02
) -> float | None:
    """Seconds until the worker's NodeFeature holds exactly `want`; None past `limit`."""
    start = time.monotonic()
    while True:
        if worker.labels() == want:
            return time.monotonic() - start
        if time.monotonic() - start > limit:
            return None
        time.sleep(poll)


def reset(worker: Any, fdir: Path, write: Writer) -> None:
    """Back to the Coral-less labels, read by the worker, then quiet."""
    write(WEBCAM)
    time.sleep(QUIET)
    touch_attrib(fdir / PRODUCER)
    if wait_labels(worker, WEBCAM, 10.0) is None:
        raise AssertionError(f"reset not seen by nfd-worker:\n{worker.tail()}")
    time.sleep(QUIET)


def trial(worker: Any, fdir: Path, write: Writer, limit: float) -> float | None:
    """One plug and re-enumeration: the latency of the final labels (None: not in `limit`)."""
    reset(worker, fdir, write)
    write(CORAL_BOOT)
    time.sleep(GAP)
    write(CORAL_RUN)
    return wait_labels(worker, CORAL_RUN, limit)


@dataclass
class Figures:
    latencies: list[float | None]
    within: float

    @property
    def failures(self) -> int:
        return sum(1 for x in self.latencies if x is None or x > self.within)

    def text(self) -> str:
        seen = sorted(x for x in self.latencies if x is not None)
        p50 = f"{statistics.median(seen):.2f} s" if seen else "-"
        top = f"{seen[-1]:.2f} s" if seen else "-"
        return (
            f"{len(self.latencies)} trials: {self.failures} not within {self.within:g} s; "
            f"seen: p50 {p50}, max {top}; not seen: {sum(x is None for x in self.latencies)}"
        )


def run_trials(
    worker: Any, fdir: Path, make: Callable[[Path], Writer], n: int, within: float = 2.0,
    limit: float = 8.0,
) -> Figures:  # fmt: skip
    write = make(fdir)
    return Figures([trial(worker, fdir, write, limit) for _ in range(n)], within)
