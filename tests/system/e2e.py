"""``python -m tests.system.e2e``: the body of ``scripts/e2e`` (which builds what it needs
first). Brings up a control plane and one real node (session.py), then runs each scenario on it
in turn (scenario.py): edgefd installed from k8s/ through tests/system/overlay with
``kubectl apply --server-side -k`` or from the chart with ``helm`` (install.py), offering
devices as a device plugin or through DRA, on a host tree; checks 1-9 each; the node is put
back to a fresh one between scenarios. Everything is torn down at the end (also on failure,
Ctrl-C and SIGTERM). One JSON line per scenario on stdout as it finishes (naming its layout),
then one for the run. Scenarios of another layout (``--layout``, ``%LAYOUT``: layouts.py) run
on a node of their own, brought up when the previous layout's is torn down.

Exit status: 0 every check of every scenario passed, 1 a check failed or the node could not be
brought up, 2 usage. Logs go to stderr; the logs of every component are kept in
``.cache/e2e/logs``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.fixturegen import NODES_DIR
from tests.peers.processes import REPO_ROOT, harness_bin_dir

from .cgroups import stale_roots
from .layouts import LAYOUTS
from .scenario import OVERLAY, Scenario, overlay_settings, rendered_daemonset, run_scenario
from .session import DEFAULT_NODE, DEFAULT_SECOND, Session

log = logging.getLogger("e2e")
CACHE = REPO_ROOT / ".cache" / "e2e"
CGROUP_PREFIX = "edgefd-e2e-"
LOCK = Path(tempfile.gettempdir()) / "edgefd-e2e.lock"

__all__ = ["OVERLAY", "main", "overlay_settings"]


class Interrupted(BaseException):
    """Ctrl-C, SIGTERM or SIGHUP: unwind so that everything is torn down."""


def _interrupt(signum: int, _frame: Any) -> None:
    _on_signals(signal.SIG_IGN)  # one is enough: a second must not cut the teardown short
    raise Interrupted(signal.Signals(signum).name)


def _on_signals(handler: Any) -> None:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, handler)


@contextlib.contextmanager
def machine_lock() -> Iterator[None]:
    """One e2e run at a time on a machine: the pods use fixed loopback ports (hostNetwork).
    A lock held by one of our own parents (`flock /tmp/edgefd-e2e.lock scripts/e2e ...`) is
    ours: waiting for it would wait forever."""
    with open(LOCK, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if held_by_ancestor(LOCK):
                yield
                return
            log.info("waiting for another e2e run on this machine to finish (%s)", LOCK)
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


def held_by_ancestor(path: Path) -> bool:
    """Whether a flock(2) lock on ``path`` belongs to a process we descend from."""
    st = path.stat()
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        holders = {
            int(f[4])
            for f in (line.split() for line in Path("/proc/locks").read_text().splitlines())
            if len(f) > 5 and f[1] == "FLOCK" and f[5] == inode
        }
    except (OSError, ValueError):
        return False
    pid = os.getppid()
    while pid > 1:
        if pid in holders:
            return True
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rpartition(")")[2].split()[1])
    return False


def clean_stale() -> None:
    """Processes and cgroups of an earlier run that died without tearing down (the lock is
    ours, so no live run owns them)."""
    for root in stale_roots(CGROUP_PREFIX):
        killed = root.kill_all()
        root.remove()
        log.warning(
            "removed the cgroups of a dead run (%s), killed %d process(es)", root.name, len(killed)
        )
    for d in Path(tempfile.gettempdir()).glob(f"{CGROUP_PREFIX}*"):
        shutil.rmtree(d, ignore_errors=True)


def log_phase(name: str, start: float, seconds: float) -> None:
    """A line for .ci/run's table of phase times (scripts/lib/phase), when it asks for one."""
    path = os.environ.get("EDGEFD_PHASE_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{name}\t{int(start)}\t{round(seconds)}\n")


class E2E:
    def __init__(
        self, scenarios: list[Scenario], image_archive: Path, keep: bool, cgroup_driver: str = ""
    ) -> None:
        self.scenarios = scenarios
        self.cgroup_driver = cgroup_driver  # "": each layout's distribution's
        self.archive = image_archive
        self.keep_node = keep
        self.work = Path(tempfile.mkdtemp(prefix=CGROUP_PREFIX))
        self.session: Session | None = None
        self.run: dict[str, Any] = {"run": True, "ok": False, "scenarios": {}, "timings": {}}

    def main(self) -> int:
        t0 = time.monotonic()
        groups = layout_groups(self.scenarios)
        self.run["layouts"] = [layout for layout, _ in groups]
        # the memory figure: once per device API in the run (the same image and pod on every
        # layout; each measurement is 30 s after Ready, most of it waited out)
        measured: set[str] = set()
        try:
            for n, (layout, group) in enumerate(groups):
                if n:
                    self.end_session()
                self.start_session(layout, group[0])
                apis: set[str] = set()  # the node reboot: once per device API and node
                ways: set[tuple[bool, bool]] = set()  # the lifecycle checks: once per way
                for i, sc in enumerate(group):
                    self.scenario(
                        sc,
                        reset=i > 0,
                        first_of_api=sc.api not in apis,
                        first_of_way=sc.way not in ways,
                        measure_idle=sc.api not in measured,
                    )
                    apis.add(sc.api)
                    ways.add(sc.way)
                    measured.add(sc.api)
        except (Exception, Interrupted) as e:
            self.run["error"] = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            log.error("%s", self.run["error"])
        finally:
            _on_signals(signal.SIG_IGN)  # nothing may cut the teardown short
            if self.keep_node and self.session and self.session.node:
                self.keep()
            self.teardown()
            self.run["timings"]["total_s"] = round(time.monotonic() - t0, 2)
            self.run["ok"] = (
                len(self.run["scenarios"]) == len(self.scenarios)
                and all(self.run["scenarios"].values())
                and not self.run.get("error")
            )
        print(json.dumps(self.run, sort_keys=True), flush=True)
        return 0 if self.run["ok"] else 1

    def start_session(self, layout: str, first: Scenario) -> None:
        """A control plane and a node laid out as ``layout`` (one per layout of the run)."""
        t0, wall = time.monotonic(), time.time()
        work = self.work / (layout if first.nodes == 1 else f"{layout}-{first.nodes}")
        work.mkdir()
        self.session = session = Session(
            work, harness_bin_dir(), LAYOUTS[layout], self.cgroup_driver
        )
        # the API server's port and where the pod finds the tree, as the overlay says
        port, sys_inside, _ = overlay_settings(rendered_daemonset(session.kubectl))
        session.port, session.tree_inside = port, str(Path(sys_inside).parent)
        session.start(first.tree, (self.archive,), CACHE, cgroup=self.work.name)
        if first.nodes == 2:
            session.add_node(first.tree2, (self.archive,), CACHE, cgroup=f"{self.work.name}-2")
        self.run.setdefault("node", session.node and session.node.spec.name)
        suffix = "" if layout == "kubeadm" else f" {layout}"
        log_phase(f"e2e bring-up{suffix}", wall, time.monotonic() - t0)

    def end_session(self) -> None:
        """Tear the node and control plane of one layout down, before the next layout's."""
        if self.session is None:
            return
        t = time.monotonic()
        session, self.session = self.session, None
        problems = session.stop()
        timings = {**session.timings, "teardown_s": round(time.monotonic() - t, 2)}
        self.run["timings"].setdefault("layouts", {})[session.layout.name] = timings
        if session.layout.name == "kubeadm":  # where they always were
            self.run["timings"].update(session.timings)
        if problems:
            self.run.setdefault("teardown_problems", []).extend(problems)

    def scenario(
        self, sc: Scenario, reset: bool, first_of_api: bool, first_of_way: bool, measure_idle: bool
    ) -> None:
        assert self.session is not None
        t0, wall = time.monotonic(), time.time()
        problems = self.session.reset() if reset else []
        result = run_scenario(self.session, sc, measure_idle, first_of_way, first_of_api)
        if problems:
            result["reset_problems"] = problems
            result["ok"] = False
        spent = time.monotonic() - t0
        result["timings"]["reset_s"] = round(spent - result["timings"]["scenario_s"], 2)
        self.run["scenarios"][sc.name] = result["ok"]
        log_phase(f"e2e {sc.name}", wall, time.monotonic() - t0)
        print(json.dumps(result, sort_keys=True, default=str), flush=True)

    def keep(self) -> None:
        assert self.session is not None and self.session.node is not None
        log.info(
            "node kept: KUBECONFIG=%s; crictl --runtime-endpoint %s inside nsenter --mount=%s;"
            " Ctrl-C tears it down",
            self.session.kubectl.argv[1].split("=", 1)[1],
            self.session.node.runtime.endpoint,
            self.session.node.ns.ns_path,
        )
        second = self.session.second
        if second is not None:
            log.info(
                "second node %s: crictl --runtime-endpoint %s inside nsenter --mount=%s --net=%s",
                second.spec.name,
                second.runtime.endpoint,
                second.ns.ns_path,
                second.ns.net_ns_path,
            )
        _on_signals(_interrupt)
        with contextlib.suppress(Interrupted):
            signal.pause()
        _on_signals(signal.SIG_IGN)

    def save_logs(self) -> None:
        """Every component's log and the pods' logs, to .cache/e2e/logs (replaced each run)."""
        logs = CACHE / "logs"
        shutil.rmtree(logs, ignore_errors=True)
        for f in self.work.rglob("*.log"):
            if f.is_file() and not f.is_symlink():
                dest = logs / f.relative_to(self.work)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, dest)

    def teardown(self) -> None:
        t = time.monotonic()
        self.end_session()
        try:
            self.save_logs()
        except Exception as e:
            self.run.setdefault("teardown_problems", []).append(f"logs: {type(e).__name__}: {e}")
        shutil.rmtree(self.work, ignore_errors=True)
        self.run["timings"]["teardown_s"] = round(time.monotonic() - t, 2)


def layout_groups(scenarios: list[Scenario]) -> list[tuple[str, list[Scenario]]]:
    """The scenarios by the layout of their node, in the order of their first appearance
    (one node per layout: bringing one up takes seconds, a check minutes); a two-node
    scenario has a session of its own (its trees are its nodes')."""
    groups: dict[tuple[str, int], list[Scenario]] = {}
    for sc in scenarios:
        key = (sc.layout, sc.nodes) if sc.nodes == 1 else (sc.layout, id(sc))
        groups.setdefault(key, []).append(sc)
    return [(layout, group) for (layout, _), group in groups.items()]


def scenarios_of(args: argparse.Namespace) -> list[Scenario]:
    """--scenario SPEC..., or the one the single-run flags describe. A tree is a directory
    (relative to where scripts/e2e was started) or a fixture node name."""
    if args.scenario:
        if args.host_tree or args.helm or args.api != "device-plugin" or args.nodes != 1:
            raise ValueError(
                "--scenario names the way and the tree: no --host-tree/--helm/--api/--nodes"
            )
        specs = args.scenario
    elif args.nodes == 2:
        trees = ",".join([args.host_tree or DEFAULT_NODE, args.host_tree_2 or DEFAULT_SECOND])
        specs = [("helm+" if args.helm else "") + f"two-nodes@{trees}"]
    else:
        if args.host_tree_2:
            raise ValueError("--host-tree-2 is the second node's: with --nodes 2")
        ways = [w for w, on in (("helm", args.helm), ("dra", args.api == "dra")) if on]
        tree = f"@{args.host_tree}" if args.host_tree else ""
        specs = [("+".join(ways) or "device-plugin") + tree]
    out = []
    caller = Path(os.environ.get("EDGEFD_E2E_CWD", "."))
    for spec in specs:
        sc = Scenario.parse(spec, args.layout)
        for field in ("tree", "tree2"):
            given = getattr(sc, field)
            if not given:
                continue
            if (caller / given).is_dir():
                tree = (caller / given).resolve()
                if not (tree / "sys").is_dir():
                    raise ValueError(f"{given}: not a host tree (no sys/)")
                name = sc.name.replace(given, tree.name)  # short, for logs and tables
                sc = dataclasses.replace(sc, name=name, **{field: str(tree)})
            elif not (NODES_DIR / f"{given}.yaml").is_file():
                raise ValueError(f"{given}: neither a directory nor a node in {NODES_DIR}")
        out.append(sc)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/e2e", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--host-tree",
        metavar="DIR",
        help=f"host tree with sys/ and dev/ (default: a generated {DEFAULT_NODE} node)",
    )
    ap.add_argument(
        "--nodes",
        type=int,
        choices=(1, 2),
        default=1,
        help="2: two real nodes on one control plane, edgefd in DRA mode, a workload following"
        " its Coral from one to the other (tests/system/twonodes.py)",
    )
    ap.add_argument(
        "--host-tree-2",
        metavar="DIR",
        help=f"the second node's host tree with --nodes 2 (default: a generated {DEFAULT_SECOND})",
    )
    ap.add_argument("--keep", action="store_true", help="keep the node running until Ctrl-C")
    ap.add_argument(
        "--helm", action="store_true", help="install the chart (charts/edgefd), not the overlay"
    )
    ap.add_argument(
        "--api",
        choices=("device-plugin", "dra"),
        default="device-plugin",
        help="how devplugin hands out devices (dra: k8s/overlays/dra, tests/system/checks_dra.py)",
    )
    ap.add_argument(
        "--scenario",
        action="append",
        metavar="WAY[+WAY][@TREE][%LAYOUT]",
        help="run these on one node per layout, in order (WAY: device-plugin, helm, dra; TREE:"
        " a fixture node name or a host tree directory; LAYOUT: as --layout); instead of"
        " --host-tree/--helm/--api",
    )
    ap.add_argument(
        "--layout",
        choices=tuple(LAYOUTS),
        default="kubeadm",
        help="lay the node out as this distribution does (kubelet root dir, containerd socket"
        " and config: tests/system/layouts.py) and install edgefd with its profile; for every"
        " scenario that names none",
    )
    ap.add_argument(
        "--cgroup-driver",
        choices=("systemd", "cgroupfs"),
        default="",
        help="the node's cgroup driver (systemd: a real systemd is its init, tests/system/"
        "systemd.py); default each layout's distribution's (kubeadm and k3s systemd, MicroK8s"
        " and k0s cgroupfs)",
    )
    ap.add_argument("--image-archive", required=True, help="OCI archive of the edgefd image")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="e2e: %(message)s",
        stream=sys.stderr,
    )
    try:
        scenarios = scenarios_of(args)
    except ValueError as e:
        log.error("%s", e)
        return 2
    if os.geteuid() != 0:
        log.error("needs root (a mount namespace, mknod, cgroups, containers)")
        return 1
    _on_signals(_interrupt)
    with machine_lock():
        clean_stale()
        return E2E(scenarios, Path(args.image_archive), args.keep, args.cgroup_driver).main()


if __name__ == "__main__":
    sys.exit(main())
