"""`serve`'s one component (edgefd.runtime.runner): devplugin's decisions followed. The file
(edgefd.inventory.decisions, an emptyDir the two containers share, read-only here) is watched
with the one watcher (inotify on its directory, a listing poll where inotify cannot be had, and
a periodic read as a backstop); each version is read, checked and diffed into moves
(moves.py), and the moves are granted on the worker's thread of their own (service.Worker), so
a slow kubelet or runtime never holds up the next read.

A file that cannot be read or is not right is a refusal: logged once per reason, counted
(`edgefd_device_keeper_refused_total{reason="decisions"}`), said by /readyz, and nothing is
granted from it; the last good version stays the one the next is compared with. No file yet
(devplugin starting, or not given `--decisions`) is not ready, and nothing to do.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from edgefd.inventory.decisions import BadDecisions, Decisions, read
from edgefd.runtime.health import Freshness
from edgefd.runtime.runner import Lifeline
from edgefd.runtime.watch import Watcher

from .metrics import KeeperMetrics
from .moves import Move, MoveTracker, catch_up
from .service import Keeper, Report, Worker

log = logging.getLogger("device-keeper")
RESCAN = 30.0  # seconds: a read whatever the watch says
# seconds after the latest move: catch-ups of every present handout, for a container the
# runtime was still creating when its device moved (not listed then). A burst of moves (a
# device re-enumerating again and again) re-arms them, so it costs one set of looks after the
# burst, never one per move queued ahead of the next real move.
RECHECK: tuple[float, ...] = (2.0, 10.0)
_STOP = object()


class Following:
    """The decisions file, the moves it makes, the worker granting them, their probes."""

    def __init__(
        self,
        path: str,
        keeper: Keeper,
        report: Report,
        lifeline: Lifeline,
        metrics: KeeperMetrics,
        poll_interval: float = 0.25,
        rescan_interval: float = RESCAN,
        recheck: tuple[float, ...] = RECHECK,
    ) -> None:
        self.path = Path(path)
        self.metrics = metrics
        self.tracker = MoveTracker()
        self.worker = Worker(keeper, report, lifeline, "grants")
        self.last: Decisions | None = None
        self.refused = ""  # why the file on disk now is not acted on
        self.freshness = Freshness(rescan_interval, "read of the decisions")
        self._queue: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()  # the first read (start) and the watcher's
        self.recheck = recheck
        self._timers: list[threading.Timer] = []
        self._watcher = Watcher(
            self._changed,
            [self.path.parent],
            poll_interval=poll_interval,
            debounce=0.0,
            max_delay=0.0,
            rescan_interval=rescan_interval,
            name="decisions-watch",
        )

    def start(self) -> None:
        self.worker.start(self._moves())
        self._watcher.start()
        self.read()
        log.info("following devplugin's decisions in %s (%s)", self.path, self._watcher.mode)

    def _changed(self, names: frozenset[str]) -> None:
        if not names or self.path.name in names or "" in names:
            self.read()
        else:
            self.freshness.touch()

    def read(self) -> list[Move]:
        """Read the file now; queue (and return) the moves its version makes."""
        with self._lock:
            self.freshness.touch()
            try:
                decisions = read(self.path)
            except BadDecisions as e:
                self._refuse(str(e))
                return []
            if decisions is None:
                return []
            if self.refused:
                log.info("%s: read again", self.path)
                self.refused = ""
            if self.last is not None and decisions == self.last:
                return []
            self.last = decisions
            moves = self.tracker.moves(decisions)
            for m in moves:
                if m.old is not None:  # a catch-up is logged by the service if it finds a holder
                    log.info(
                        "%s re-enumerated: %s -> %s at %s",
                        m.device,
                        m.old,
                        m.new,
                        m.path,
                        extra={
                            "device": m.device,
                            "event": "re-enumerated",
                            "old": str(m.old),
                            "new": str(m.new),
                            "path": m.path,
                        },
                    )
                self._queue.put(m)
            if any(m.old is not None for m in moves):
                self._schedule_rechecks()
            return moves

    def _schedule_rechecks(self) -> None:
        for t in self._timers:  # the looks of an earlier move of the burst: these replace them
            t.cancel()
        self._timers = []
        for delay in self.recheck:
            t = threading.Timer(delay, self._recheck)
            t.daemon = True
            t.start()
            self._timers.append(t)

    def _recheck(self) -> None:
        """Catch-ups of every handout followed now: only a holder whose spec or ledger says
        another number than the device's is granted (the rest are current, said nowhere)."""
        with self._lock:
            if self.last is None:
                return
            for h in self.tracker.following:
                for m in catch_up(h, self.last):
                    self._queue.put(replace(m, again=True))

    def _refuse(self, why: str) -> None:
        if why != self.refused:
            self.metrics.refused.labels("decisions").inc()
            log.error("%s: not acted on: %s; nothing is granted from it", self.path, why)
        self.refused = why

    def _moves(self) -> Iterator[Move]:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            yield item

    def stop(self) -> None:
        """Stop reading, then let the move under way finish (its calls have timeouts)."""
        self._watcher.stop()
        for t in self._timers:
            t.cancel()
            t.join(1)
        self._queue.put(_STOP)
        self.worker.join(30)

    def alive(self) -> tuple[bool, str]:
        return self.freshness.check()

    def ready(self) -> tuple[bool, str]:
        if self.refused:
            return False, f"devplugin's decisions not acted on: {self.refused}"
        if self.last is None:
            return False, f"waiting for devplugin's decisions ({self.path})"
        if unsaved := self.worker.keeper.ledger.unsaved:
            return False, f"{unsaved}: no new grant is made until it can"
        n = sum(1 for _ in self.tracker.following)
        return True, f"following {n} handed-out device(s)"
