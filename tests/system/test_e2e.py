"""scripts/e2e as a test: the whole system on a real node, in each way edgefd is installed and
offers devices (device plugin with kustomize, DRA with kustomize, DRA with the Helm chart), and
on host trees of other shapes: an RK3588 whose NPU is on the platform bus (the chart's DRA
scenario); two Corals (one in its boot state), as a snapshot of a real host with real device
nodes in dev/; an x86 host with a PCIe Coral and nothing on USB, whose Coral runs hot and cools
down and whose driver is reloaded under its workload; a Pi with every USB state at once, with
both APIs. These run on one node brought up once (tests/system/session.py), laid out as kubeadm lays
a node out; then the node is laid out as each other distribution does
(tests/system/layouts.py), a node each, and edgefd installed there with that distribution's
profile, one way each, both device APIs across them: k3s with the chart (device plugin),
MicroK8s with kustomize in DRA mode, split by identity into two DaemonSets, k0s with
kustomize (device plugin); last, two real nodes on one control plane, a workload following its
Coral from one to the other. Each check of each is a test outcome. Each layout has its
distribution's cgroup driver: kubeadm's and k3s's nodes run the systemd driver with a real
systemd as their init (tests/system/systemd.py; check 6s), MicroK8s's and k0s's cgroupfs.

It runs wherever the machine can run a node: as root, with cgroup v1 hierarchies (the node's
pods live in them); scripts/e2e installs the Debian packages it needs. Otherwise it skips,
saying what is missing and how to get it; under CI it never skips."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixturegen import build_host
from tests.peers.processes import REPO_ROOT

from . import checks_dra
from .cgroups import CGROUP_FS
from .hosttree import device_nodes
from .scenario import CHECKS, NOT_WITH_HELM, ONCE_PER_API, ONCE_PER_WAY

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# the cgroup v1 controllers the kubelet puts pods into (either driver)
NODE_CGROUPS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer")
NEEDS = {
    "runc": "runc",
    "buildah": "buildah",
    "gcc": "gcc",
    "nsenter": "util-linux",
    "systemd-run": "systemd",  # the systemd driver's nodes: systemd as their init
}
SNAPSHOT = "rpi4-two-corals"  # made into a snapshot with real device nodes

ALL = [k for k, _, _ in CHECKS]
# a way's later scenarios: the tree's checks (and the device plugin's API was seen already)
ONCE = ONCE_PER_WAY | ONCE_PER_API
TREE = [k for k in ALL if k not in ONCE]
# label -> (scenario spec, the checks it reports); {snapshot} is the snapshot tree's directory
DRA = [k for k, _, _ in checks_dra.CHECKS]
SCENARIOS: dict[str, tuple[str, list[str]]] = {
    "device-plugin": ("device-plugin", ALL),
    "dra": ("dra", DRA),
    # the chart in DRA mode on an RK3588 (the platform bus: its NPU's slice, claim, re-plug);
    # after kustomize's DRA scenario, which reboots the node for that API
    "helm-dra-rk3588-npu": ("helm+dra@rk3588-npu", [k for k in DRA if k not in ONCE_PER_API]),
    SNAPSHOT: ("device-plugin@{snapshot}", TREE),
    # a PCIe Coral and nothing on USB; it runs hot and cools down (check 6t); its driver is
    # reloaded under a running holder (6k: the same path, another number)
    "x86-coral-pcie": ("device-plugin@x86-coral-pcie", TREE),
    # every USB state at once (two Corals on two buses, one in its boot state; an NCS2 whose
    # boot device has a serial): the keeper follows each, also at a bus path (6k), both APIs
    "rpi4-mixed-states": ("device-plugin@rpi4-mixed-states", TREE),
    "rpi4-mixed-states-dra": ("dra@rpi4-mixed-states", [k for k in DRA if k not in ONCE]),
    # a node of its own each (every check: a fresh node), after the kubeadm node's
    "k3s-helm": ("helm%k3s", [k for k in ALL if k not in NOT_WITH_HELM]),
    # DRA with the two DaemonSets split by identity (k8s/overlays/split-identity)
    "microk8s-dra-split": ("dra+split%microk8s", DRA),
    "k0s-device-plugin": ("device-plugin%k0s", ALL),
    # two real nodes on one control plane (tests/system/twonodes.py): per-node checks on
    # both, a claim's workload following its Coral back and forth, the extended-resource pod
    # (kubernetes#141290), the scheduling guide's recipes that choose between nodes, the
    # alert of a device pulled meanwhile, then the same fleet in device-plugin mode
    "two-nodes": (
        "two-nodes",
        ["2n_per_node", "2n_follow", "2n_extended", "2n_recipes", "2n_alert", "2n_device_plugin"],
    ),
}
CASES = [(label, check) for label, (_, checks) in SCENARIOS.items() for check in checks]


def why_not() -> str | None:
    """What keeps this machine from running the node, and how to get it; None if nothing."""
    if os.geteuid() != 0:
        return "needs root (a mount namespace, mknod, cgroups, containers): run `sudo make test`"
    missing = [c for c in NODE_CGROUPS if not (CGROUP_FS / c / "cgroup.procs").exists()]
    if missing:
        return (
            f"needs the cgroup v1 hierarchies {', '.join(missing)} under {CGROUP_FS} (the node's"
            " kubelet uses cgroup v1); on a cgroup v2-only system boot with"
            " systemd.unified_cgroup_hierarchy=0"
        )
    packages = sorted({pkg for cmd, pkg in NEEDS.items() if shutil.which(cmd) is None})
    if packages and not shutil.which("apt-get"):
        return f"needs {' '.join(packages)} (Debian packages; no apt-get here to install them)"
    return None


def snapshot_tree(dest: Path) -> Path:
    """A generated tree made like a snapshot of a real host: dev/ holds character devices."""
    tree = build_host(SNAPSHOT, dest)
    for n in device_nodes(tree):
        node = tree / "dev" / n.devname
        node.unlink(missing_ok=True)
        node.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(node, 0o600 | (0o060000 if n.block else 0o020000), os.makedev(n.major, n.minor))
    return tree


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One scripts/e2e run of every scenario on one node; the results by label."""
    why = why_not()
    if why and not os.environ.get("CI"):
        pytest.skip(why)
    snapshot = snapshot_tree(tmp_path_factory.mktemp("e2e") / f"{SNAPSHOT}-snapshot")
    specs = [spec.format(snapshot=snapshot) for spec, _ in SCENARIOS.values()]
    r = subprocess.run(
        [str(REPO_ROOT / "scripts" / "e2e"), *(f"--scenario={s}" for s in specs)],
        capture_output=True,
        text=True,
        timeout=3600,  # a cold machine builds the harness groups and the image first
    )
    kept = REPO_ROOT / ".cache" / "e2e" / "results.jsonl"  # every scenario's line, for the record
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text("".join(f"{ln}\n" for ln in r.stdout.splitlines() if ln.startswith("{")))
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert lines, f"scripts/e2e printed no result (exit {r.returncode}):\n{r.stderr[-4000:]}"
    results = [line for line in lines if "scenario" in line]
    out: dict[str, Any] = {"run": lines[-1], "returncode": r.returncode, "stderr": r.stderr}
    out.update(zip(SCENARIOS, results, strict=False))
    return out


def test_node_came_up(e2e: dict[str, Any]) -> None:
    run = e2e["run"]
    assert run.get("run") and "error" not in run, str(run.get("error")) + e2e["stderr"][-3000:]
    assert not run.get("teardown_problems"), run["teardown_problems"]


@pytest.mark.parametrize("label", SCENARIOS)
def test_scenario_ran(e2e: dict[str, Any], label: str) -> None:
    result = e2e.get(label)
    assert result is not None, f"scenario {label} did not run:\n{e2e['stderr'][-3000:]}"
    assert "error" not in result, result["error"] + e2e["stderr"][-3000:]
    assert not result.get("reset_problems"), result["reset_problems"]


@pytest.mark.parametrize(("label", "check"), CASES)
def test_check(e2e: dict[str, Any], label: str, check: str) -> None:
    res = (e2e.get(label) or {}).get("checks", {}).get(check)
    assert res is not None, f"check {check} of {label} did not run"
    assert res["ok"], json.dumps(res, indent=1)


def test_exit_status_matches(e2e: dict[str, Any]) -> None:
    assert e2e["returncode"] == (0 if e2e["run"]["ok"] else 1)
