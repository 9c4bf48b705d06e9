"""The service: for each move of a device devplugin hands out (moves.py: its node went from
number A to number B, at the path devplugin gave it), every running container the kubelet gave
it to (either API) is allowed B and denied A, and its path for the node is made to name B.
Nothing else is touched: a container that does not hold the device never gains B, and a number
the container holds through another device is never revoked for this one.

Moves come from an injected source (any iterable of `Move`): devplugin's decisions, followed
(follow.py), or a list in a test. Who holds what is asked of the kubelet at each move, not
cached: a re-enumeration is rare and the answer must be current.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from edgefd.core.errors import EdgefdError
from edgefd.runtime.runner import Lifeline

from . import nodes
from .cgroupv2 import GrantRefused, Unrestricted
from .containers import Container, NotThisContainer, cgroup_dirs
from .grant import SystemdManaged, grant
from .holders import Holder, holders
from .ledger import Ledger, Unsaved
from .metrics import KeeperMetrics
from .moves import Move, number
from .proof import given, unproven
from .rules import DeviceNumber
from .systemd import Systemd

log = logging.getLogger("device-keeper")


@dataclass
class Done:
    """What one move did to one container."""

    holder: Holder
    container: str = ""
    cgroups: list[str] = field(default_factory=list)
    node: str = ""  # current / replaced / unchanged / skipped / failed: why
    refused: str = ""
    allowed: str = ""  # the number allowed (or, in a dry run, that would be)
    revoked: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "namespace": self.holder.namespace,
            "pod": self.holder.pod,
            "container": self.holder.container,
            "via": self.holder.via,
            "container_id": self.container,
            "cgroups": self.cgroups,
            "node": self.node,
            "refused": self.refused or None,
            "allowed": self.allowed or None,
            "revoked": self.revoked,
        }


def held_numbers(pods: list[Any], holder: Holder, move: Move) -> set[DeviceNumber]:
    """The numbers `holder` holds now through what it was given (every present handout of the
    move's decisions that the kubelet gave it, this one's other nodes included): none is
    revoked for this move, whatever it once was to this device (the kernel gives a freed
    minor to the next device that comes)."""
    out: set[DeviceNumber] = set()
    for h in move.decisions.handouts:
        if h.present and holder in holders(pods, h):
            out |= {number(n.number) for n in h.nodes}
    out.discard(move.new)
    return out


class PodLister(Protocol):
    def list(self) -> list[Any]: ...


class ContainerFinder(Protocol):
    def containers(self, holder: Holder) -> list[Container]: ...


class Keeper:
    def __init__(
        self,
        pods: PodLister,
        runtime: ContainerFinder,
        cgroup_fs: str,
        proc: str,
        metrics: KeeperMetrics,
        dry_run: bool = False,
        ledger: Ledger | None = None,
        systemd: Systemd | None = None,
    ) -> None:
        """`systemd`: the host's systemd, for containers under its cgroup driver (grants go
        through their scope's DeviceAllow= too; None: such containers are refused)."""
        self.ledger = ledger if ledger is not None else Ledger(None)
        self.systemd = systemd
        self.pods = pods
        self.runtime = runtime
        self.cgroup_fs = cgroup_fs
        self.proc = proc
        self.metrics = metrics
        self.dry_run = dry_run

    def handle(self, move: Move) -> list[Done]:
        if move.old is not None:
            self.metrics.moves.inc()
            what = f"{move.device} re-enumerated {move.old} -> {move.new}"
        else:
            what = f"{move.device} at {move.new}"
        try:
            pods = self.pods.list()
        except EdgefdError as e:
            self.metrics.errors.labels("holders").inc()
            log.error("%s: cannot ask who holds it: %s", what, e)
            return []
        held = holders(pods, move.handout)
        if not held and move.old is not None:
            log.info("%s: no running container holds it", what)
        out = []
        for h in held:
            try:
                found = self.runtime.containers(h)
            except EdgefdError as e:
                self.metrics.errors.labels("runtime").inc()
                log.error("%s: cannot find its container: %s", h, e)
                out.append(Done(h, refused=str(e)))
                continue
            kept = held_numbers(pods, h, move)
            out += [self._contained(move, c, kept) for c in found if given(move, c)]
        self.forget_gone(d.container for d in out)
        return out

    def _contained(self, move: Move, c: Container, kept: set[DeviceNumber]) -> Done:
        """One container's grant, whatever it did to its own /dev or cgroup: a failure is
        its own (logged with its traceback, counted), and the other holders are still
        granted by the same worker, which goes on with the next move."""
        try:
            return self._container(move, c, kept)
        except Exception as e:
            self.metrics.errors.labels("container").inc()
            log.error(
                "%s (container %s): %s not granted: %s: %s; the other holders go on",
                c.holder,
                c.id[:12],
                move.new,
                type(e).__name__,
                e,
                exc_info=True,
            )
            return Done(c.holder, c.id, node=f"failed: {e}", refused=f"{type(e).__name__}: {e}")

    def _container(self, move: Move, c: Container, kept: set[DeviceNumber]) -> Done:
        done = Done(c.holder, c.id)
        revoke = self.stale(move, c) - kept
        if move.old is None and not revoke:
            done.node = "current"
            return done
        done.revoked = [str(n) for n in sorted(revoke)]
        allow = self._recorded(move, c, done)
        if not allow and not revoke:
            done.node = "skipped: not granted"
            return done
        changed = False
        for d in c.cgroup_dirs(self.cgroup_fs):
            try:
                res = grant(d, allow, revoke, self.dry_run, self.systemd)
            except Unrestricted:
                continue
            except EdgefdError as e:
                self._not_granted(c, done, e)
                continue
            done.cgroups.append(f"{res.version}:{d}")
            changed = changed or res.changed
            if res.applied:
                self.metrics.grants.labels(res.version).inc()
                self.metrics.revokes.labels(res.version).inc()
            log.info(
                "%s (container %s, via %s): %s %s, %s %s (cgroup %s %s)",
                c.holder,
                c.id[:12],
                c.holder.via,
                "would allow" if self.dry_run else "allowed",
                done.allowed or "nothing",
                "would revoke" if self.dry_run else "revoked",
                ", ".join(str(n) for n in sorted(revoke)),
                res.version,
                d,
                extra={
                    "device": move.device,
                    "holder": str(c.holder),
                    "container": c.id[:12],
                    "allowed": done.allowed,
                    "revoked": [str(n) for n in sorted(revoke)],
                    "cgroup": res.version,
                    "dry_run": self.dry_run,
                },
            )
        if not done.cgroups:
            done.node = "skipped: no grant"
            return done
        if move.old is None and changed:
            log.warning(
                "%s (container %s): %s was given %s, not the device's %s: %s",
                c.holder,
                c.id[:12],
                move.path,
                ", ".join(str(n) for n in sorted(revoke)),
                move.new,
                "it was being created while the device moved"
                if move.again
                else "a move missed while the keeper was not running",
            )
        if not allow:
            done.node = "skipped: not granted"
            return done
        done.node = self._node(move, c, revoke)
        return done

    def _recorded(self, move: Move, c: Container, done: Done) -> dict[DeviceNumber, str]:
        """What may be allowed: the new number once the ledger has it on disk (ledger.py);
        nothing when it cannot be saved (the stale numbers are still revoked)."""
        if not self.dry_run:
            try:
                self.ledger.record(c.id, c.cgroups_path, move.path, move.new)
            except Unsaved as e:
                self.metrics.refused.labels("ledger").inc()
                done.refused = f"{move.new} not allowed: {e}"
                log.error("%s (container %s): %s", c.holder, c.id[:12], done.refused)
                return {}
        done.allowed = str(move.new)
        return {move.new: move.access}

    def stale(self, move: Move, c: Container) -> set[DeviceNumber]:
        """What the container loses: every number the runtime made at the node's path now,
        or at a (path, number) the node was given before, and every number the keeper allowed
        at any of its paths; never what the container's path names now (the container owns
        it), never the new number."""
        given = set(move.was) | ({(move.old_path, move.old)} if move.old is not None else set())
        out = {n for p, n in c.devices if p == move.path or (p, n) in given}
        for p in move.paths:
            out |= self.ledger.granted(c.id, p)
        if self.ledger.lost:
            out |= unproven(move, c, self.cgroup_fs, self.systemd)
        if move.old is not None:
            out.add(move.old)
        out.discard(move.new)
        return out

    def _not_granted(self, c: Container, done: Done, e: EdgefdError) -> None:
        """Refused (a systemd scope, a program that cannot be extended) or failed (the kernel
        said no): logged and counted; the container's other cgroup and path are still tried."""
        if isinstance(e, SystemdManaged):
            self.metrics.refused.labels("systemd").inc()
        elif isinstance(e, GrantRefused):
            self.metrics.refused.labels("program").inc()
        else:
            self.metrics.errors.labels("grant").inc()
        done.refused = str(e)
        log.log(
            logging.WARNING if isinstance(e, SystemdManaged) else logging.ERROR,
            "%s: %s",
            c.holder,
            e,
        )

    def _node(self, move: Move, c: Container, revoke: set[DeviceNumber]) -> str:
        """The container's path made to name the new node (its convenience: nothing is
        decided from it), once its pid is known to be the container's."""
        if self.dry_run:
            return f"would name {move.new}"
        try:
            start = c.identify(self.proc)
        except NotThisContainer as e:
            self.metrics.nodes.labels("failed").inc()
            log.error("%s (container %s): its path not written: %s", c.holder, c.id[:12], e)
            return f"skipped: {e}"

        def check() -> None:
            c.same(self.proc, start)

        try:
            return self._name_node(move, c, revoke, check)
        except NotThisContainer as e:
            self.metrics.nodes.labels("failed").inc()
            log.error("%s (container %s): its path not written: %s", c.holder, c.id[:12], e)
            return f"skipped: {e}"
        except nodes.NodeNotReplaced as e:
            self.metrics.nodes.labels("failed").inc()
            log.error("%s: %s", c.holder, e)
            return f"failed: {e}"

    def _name_node(
        self, move: Move, c: Container, revoke: set[DeviceNumber], check: Callable[[], None]
    ) -> str:
        proc = self.proc
        names = nodes.current(c.pid, move.path, proc=proc, check=check)
        old = names if names in revoke else move.old
        if old is None and revoke:  # a catch-up: the node the path should name, said
            old = min(revoke)
        # the node's other paths, where the path moved with the number: only where the
        # runtime or the keeper made a node (never a path of a bind-mounted host directory)
        made = {p for p, _ in c.devices} | set(self.ledger.latest(c.id))
        others = sorted((move.paths & made) - {move.path})
        like = None
        if names is None:  # the new path gets the mode and owner of the node it replaces
            like = next(
                (st for p in others if (st := nodes.node_stat(c.pid, p, proc, check))), None
            )
        r = nodes.replace(c.pid, move.path, move.new, old, proc=proc, check=check, like=like)
        result = "replaced" if r.changed else "unchanged"
        self.metrics.nodes.labels(result).inc()
        log.info("%s: %s now names %s (was %s)", c.holder, r.path, r.new, r.old or "missing")
        for p in others:
            gone = nodes.remove(c.pid, p, revoke, proc=proc, check=check)
            if gone is not None:
                log.info("%s: %s (%s) removed: the device moved to %s", c.holder, p, gone, r.path)
        return result

    def forget_gone(self, keep: Iterable[str] = ()) -> None:
        """The ledger forgets containers whose cgroup is gone."""
        if self.dry_run:
            return
        for cid in self.ledger.forget(lambda cg: not cgroup_dirs(cg, self.cgroup_fs), keep):
            log.info("container %s is gone: its grants forgotten", cid[:12])

    def run(self, source: Iterable[Move], report: Callable[[Move, list[Done]], None]) -> None:
        """Handle every move the source yields until it ends (or the caller stops it)."""
        for move in source:
            done = self.handle(move)
            if move.again and not any(d.cgroups or d.refused for d in done):
                continue  # a second look that found every holder current
            if move.seen and any(d.cgroups for d in done):
                took = max(0.0, time.time() - move.seen)
                self.metrics.latency.set(took)
                log.info("%s: granted %.0f ms after the scan that saw it", move.device, took * 1e3)
            report(move, done)


Report = Callable[[Move, list[Done]], None]


class Worker:
    """The thread that hands moves to the service; its death ends the process."""

    def __init__(self, keeper: Keeper, report: Report, lifeline: Lifeline, name: str) -> None:
        self.keeper = keeper
        self.report = report
        self.lifeline = lifeline
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._moves: Iterable[Move] = ()

    def start(self, moves: Iterable[Move]) -> None:
        self._moves = moves
        self.thread.start()

    def _run(self) -> None:
        try:
            self.prepare()  # inside: a worker that cannot even start ends the process too
            self.keeper.run(self._moves, self.report)
        except BaseException as e:  # a bug: the process must not run on without its worker
            log.critical("the grant worker died: %s", e, exc_info=True)
            self.lifeline.fail(e)
            return
        self.finished()

    def prepare(self) -> None:
        """Before the first move: the gRPC stubs, for a worker that follows devices (about a
        quarter of a second on a small machine, which the first grant would otherwise wait;
        a feed of a few moves by hand pays it when a move comes, and its memory only then)."""
        from .api import cri_pb2_grpc, podresources_pb2_grpc  # noqa: F401

    def finished(self) -> None:
        """The source ended: for a feed, the work is done."""

    def join(self, timeout: float) -> None:
        if self.thread.is_alive():
            self.thread.join(timeout)
