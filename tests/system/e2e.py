"""``python -m tests.system.e2e``: the body of ``scripts/e2e`` (which builds what it needs
first). Brings up a control plane and one real node on a sample host tree, applies k8s/
through tests/system/overlay (the shipped k8s/overlays/hostnetwork plus this node's settings)
with ``kubectl apply --server-side -k``, or installs the chart with the same settings
(``--helm``, install.py), runs the issue's checks 1-9, tears
everything down (also on failure, Ctrl-C and SIGTERM) and prints one JSON line.

Exit status: 0 every check passed, 1 a check failed or the node could not be brought up,
2 usage. Logs go to stderr; the logs of every component are kept in ``.cache/e2e/logs``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.fixturegen import build_host
from tests.peers.processes import REPO_ROOT, harness_bin_dir

from . import checks_devices, checks_dra, checks_lifecycle, checks_pod
from .cgroups import stale_roots
from .context import Run, producer_labels
from .hosttree import usb_ids
from .install import HelmInstall, chart_values
from .kube import Api, Kubectl, NodeSampler, control_plane, start_control_plane
from .node import Node, NodeSpec

log = logging.getLogger("e2e")
OVERLAY = REPO_ROOT / "tests" / "system" / "overlay"
CACHE = REPO_ROOT / ".cache" / "e2e"
DEFAULT_NODE = "rpi4-coral"
CGROUP_PREFIX = "edgefd-e2e-"
LOCK = Path(tempfile.gettempdir()) / "edgefd-e2e.lock"
IDLE_S = 30.0
# USB IDs of the two accelerators the checks use, in both of their states (REFERENCE.md §8)
CORAL_IDS = {("1a6e", "089a"), ("18d1", "9302")}
NCS2_IDS = {("03e7", "2485"), ("03e7", "f63b")}

Check = Callable[[Run], dict[str, Any]]
CHECKS: list[tuple[str, Check, tuple[str, ...]]] = [
    ("1_daemonset", checks_pod.check_daemonset, ()),
    ("2_labels", checks_pod.check_labels, ("1_daemonset",)),
    ("3_allocatable", checks_pod.check_allocatable, ("1_daemonset",)),
    ("4_workload", checks_devices.check_workload, ("3_allocatable",)),
    ("5_kubelet_restart", checks_devices.check_kubelet_restart, ("4_workload",)),
    ("6_replug", checks_devices.check_replug, ("4_workload",)),
    ("7_rolling_update", checks_lifecycle.check_rolling_update, ("3_allocatable",)),
    ("8_delete", checks_lifecycle.check_delete, ("1_daemonset",)),
    ("9_figures", checks_lifecycle.check_figures, ()),
]


class SetupError(RuntimeError):
    pass


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
    """One e2e run at a time on a machine: the pods use fixed loopback ports (hostNetwork)."""
    with open(LOCK, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another e2e run on this machine to finish (%s)", LOCK)
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


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


def rendered_daemonset(kubectl: Kubectl, overlay: Path = OVERLAY) -> dict[str, Any]:
    docs = yaml.safe_load_all(kubectl("kustomize", str(overlay)))
    return next(
        d for d in docs if d and d["kind"] == "DaemonSet" and d["metadata"]["name"] == "edgefd"
    )


def overlay_settings(ds: dict[str, Any]) -> tuple[int, str, str]:
    """(API port, host sysfs path inside the node, image) as the overlay sets them."""
    spec = ds["spec"]["template"]["spec"]
    sink = next(c for c in spec["containers"] if c["name"] == "feature-sink")
    port = int(next(e["value"] for e in sink["env"] if e["name"] == "KUBERNETES_SERVICE_PORT"))
    sys_path = next(v["hostPath"]["path"] for v in spec["volumes"] if v["name"] == "host-sys")
    return port, sys_path, sink["image"]


class E2E:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.bin = harness_bin_dir()
        self.work = Path(tempfile.mkdtemp(prefix=CGROUP_PREFIX))
        self.kubectl = Kubectl(self.bin, str(self.work / "cp" / "admin.kubeconfig"))
        self.result: dict[str, Any] = {"ok": False, "checks": {}, "timings": {}}
        self.run: Run | None = None
        self.node: Node | None = None
        self.cp: Any = None
        self.keeper: Keeper | None = None
        self.helm: HelmInstall | None = None  # --helm: the chart instead of the overlay
        dra = getattr(args, "api", "device-plugin") == "dra"  # the DRA run: checks_dra.py
        self.overlay = checks_dra.OVERLAY if dra else OVERLAY
        self.checks_list = checks_dra.CHECKS if dra else CHECKS

    def host_tree(self) -> Path:
        """A copy of --host-tree (check 6 re-plugs a device in it), else a generated node."""
        dest = self.work / "host"
        if self.args.host_tree:
            shutil.copytree(self.args.host_tree, dest, symlinks=True)
            return dest
        return build_host(DEFAULT_NODE, dest)

    def bring_up(self) -> Run:
        t0 = time.monotonic()
        ds = rendered_daemonset(self.kubectl, self.overlay)
        port, sys_inside, image = overlay_settings(ds)
        if self.args.helm:  # the same settings as chart values; its DaemonSet is what runs
            api = getattr(self.args, "api", "device-plugin")
            self.helm = HelmInstall(self.bin, self.kubectl, chart_values(port, sys_inside, api))
            ds = self.helm.daemonset()
        tree = self.host_tree()
        name = (
            (tree / "etc/hostname").read_text().strip()
            if (tree / "etc/hostname").exists()
            else "e2e-node"
        )
        archive = Path(self.args.image_archive)
        self.cp = control_plane(self.work / "cp", self.bin, port)
        spec = NodeSpec(
            name=name,
            workdir=self.work / "node",
            bin_dir=self.bin,
            host_tree=tree,
            host_tree_inside=str(Path(sys_inside).parent),
            images=(archive,),
            cgroup_root=self.work.name,
            cache=CACHE,
        )
        self.node = node = Node(spec, self.cp)
        self.keeper = Keeper(lambda: start_control_plane(self.cp), self.cp.stop)
        node.start_runtime()
        self.keeper.wait_started()
        self.result["timings"]["control_plane_and_runtime_s"] = round(time.monotonic() - t0, 2)
        node.join()
        self.result["timings"].update(node.timings)
        self.result["timings"]["bring_up_s"] = round(time.monotonic() - t0, 2)
        api = Api(self.cp)
        run = Run(
            cp=self.cp,
            node=node,
            api=api,
            kubectl=self.kubectl,
            sampler=NodeSampler(api, name).start(),
            overlay=self.overlay,
            daemonset=ds,
            image=image,
            expected=producer_labels(tree),
        )
        run.figures["image_archive_bytes"] = archive.stat().st_size
        run.figures["image_bytes"] = node.runtime.image_size(image)
        ids = usb_ids(tree)
        coral = next((p for p, i in ids.items() if i in CORAL_IDS), None)
        ncs2 = next((p for p, i in ids.items() if i in NCS2_IDS), None)
        if coral is None or ncs2 is None:
            raise SetupError(f"{tree}: the checks need a Coral USB and an NCS2 in the host tree")
        run.facts["coral_devname"] = _devname(tree, coral)
        run.facts["ncs2_path"] = "/dev/" + _devname(tree, ncs2)
        self.result["node"] = name
        return run

    def checks(self, run: Run) -> None:
        run.t_apply = t0 = time.monotonic()
        if self.helm:
            self.helm.install()
        else:
            self.kubectl("apply", "--server-side", "-k", str(self.overlay))
        for key, check, needs in self.checks_list:
            if key == "4_workload":  # everything before only read: measure memory at rest
                self.measure_idle(run)
            failed = [n for n in needs if not self.result["checks"].get(n, {}).get("ok")]
            t = time.monotonic()
            if failed:
                res: dict[str, Any] = {"ok": False, "skipped": f"needs {', '.join(failed)}"}
            else:
                try:
                    res = check(run)
                except Exception as e:  # a check that cannot finish has failed; go on
                    log.debug("check %s", key, exc_info=True)
                    res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            res["s"] = round(time.monotonic() - t, 2)
            self.result["checks"][key] = res
            verdict = "ok" if res["ok"] else "skipped" if "skipped" in res else "FAILED"
            log.info("check %s: %s (%.1fs)", key, verdict, res["s"])
        self.result["timings"]["checks_s"] = round(time.monotonic() - t0, 2)

    def measure_idle(self, run: Run) -> None:
        if not self.result["checks"].get("1_daemonset", {}).get("ok"):
            return
        ready_at = run.t_apply + run.figures["ds_create_to_ready_s"]
        time.sleep(max(0.0, ready_at + IDLE_S - time.monotonic()))
        with contextlib.suppress(Exception):
            run.figures["memory_mib"] = checks_pod.container_memory(run)

    def main(self) -> int:
        t0 = time.monotonic()
        try:
            self.run = self.bring_up()
            self.checks(self.run)
        except (Exception, Interrupted) as e:
            self.result["error"] = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            log.error("%s", self.result["error"])
        finally:
            _on_signals(signal.SIG_IGN)  # nothing may cut the teardown short
            if self.run:
                self.result["figures"] = self.run.figures
                self.result["samples"] = len(self.run.sampler.stop())
            self.result["ok"] = (
                bool(self.result["checks"])
                and all(c["ok"] for c in self.result["checks"].values())
                and "error" not in self.result
            )
            if self.args.keep and self.node:
                self.keep()
            self.teardown()
            self.result["timings"]["total_s"] = round(time.monotonic() - t0, 2)
        print(json.dumps(self.result, sort_keys=True), flush=True)
        return 0 if self.result["ok"] else 1

    def keep(self) -> None:
        checks = self.result["checks"].values()
        log.info(
            "%d passed, %d failed (the JSON line follows the teardown)",
            sum(c["ok"] for c in checks),
            sum(not c["ok"] for c in checks),
        )
        log.info(
            "node kept: KUBECONFIG=%s; crictl --runtime-endpoint %s; Ctrl-C tears it down",
            self.kubectl.argv[1].split("=", 1)[1],
            self.node.runtime.endpoint if self.node else "",
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
        problems: list[str] = []
        for what, step in (
            ("node", self.node and self.node.stop),
            ("control plane", self.keeper and self.keeper.release),
            ("logs", self.save_logs),
        ):
            t_step = time.monotonic()
            try:
                problems += (step() or []) if step else []
            except Exception as e:  # the rest of the teardown still runs
                problems.append(f"{what}: {type(e).__name__}: {e}")
            log.debug("teardown: %s %.1fs", what, time.monotonic() - t_step)
        t_rm = time.monotonic()
        shutil.rmtree(self.work, ignore_errors=True)
        log.debug("teardown: scratch removed in %.1fs", time.monotonic() - t_rm)
        self.result["timings"]["teardown_s"] = round(time.monotonic() - t, 2)
        if problems:
            self.result["teardown_problems"] = problems


class Keeper:
    """Runs ``start`` in a thread that then waits for ``release()`` and runs ``stop``. The
    processes ``start`` spawns are killed when the *thread* that spawned them ends
    (PR_SET_PDEATHSIG is per thread), so that thread lives exactly as long as they should."""

    def __init__(self, start: Callable[[], Any], stop: Callable[[], Any]) -> None:
        self._start, self._stop = start, stop
        self._started, self._released = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="control-plane", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._start()
        except BaseException as e:
            self.error = e
        self._started.set()
        self._released.wait()
        self._stop()

    def wait_started(self) -> None:
        self._started.wait()
        if self.error:
            raise self.error

    def release(self) -> None:
        self._released.set()
        self._thread.join(timeout=120)


def _devname(tree: Path, port: str) -> str:
    ev = (tree / "sys/bus/usb/devices" / port / "uevent").read_text()
    return next(line.split("=", 1)[1] for line in ev.splitlines() if line.startswith("DEVNAME="))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/e2e", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--host-tree",
        metavar="DIR",
        help=f"host tree with sys/ and dev/ (default: a generated {DEFAULT_NODE} node)",
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
    ap.add_argument("--image-archive", required=True, help="OCI archive of the edgefd image")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="e2e: %(message)s",
        stream=sys.stderr,
    )
    if os.geteuid() != 0:
        log.error("needs root (a mount namespace, mknod, cgroups, containers)")
        return 1
    if args.host_tree and not (Path(args.host_tree) / "sys").is_dir():
        log.error("%s: not a host tree (no sys/)", args.host_tree)
        return 2
    _on_signals(_interrupt)
    with machine_lock():
        clean_stale()
        return E2E(args).main()


if __name__ == "__main__":
    sys.exit(main())
