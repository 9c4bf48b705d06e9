"""One scenario of ``scripts/e2e``: edgefd installed one way (the overlay with kustomize, or the
chart with helm), offering devices through one API (device plugin or DRA), on one host tree;
its checks run in order on the shared node (session.py) and give one result.

A scenario is named ``WAY[+WAY...][@TREE][%LAYOUT]``: ``device-plugin`` (the default),
``helm``, ``dra``, ``helm+dra``, with ``+split`` the two-DaemonSet arrangement split by identity
(k8s/overlays/split-identity, the chart's splitByIdentity; e.g. ``dra+split``); ``@TREE`` is a
fixture node name (tests/fixtures/nodes) or a host tree directory (default: the rpi4-coral
sample); ``%LAYOUT`` the distribution whose layout
the node has (layouts.py; default kubeadm, or ``scripts/e2e --layout``), edgefd installed with
that distribution's profile (Helm ``distribution=LAYOUT``, kustomize ``k8s/overlays/LAYOUT``).
Every expectation of the checks comes from the tree (expect.py), so any tree with an
accelerator the catalogue knows can be a scenario's.

The check lists: ``CHECKS`` (device plugin, checks_pod/devices/lifecycle) and
``checks_dra.CHECKS``; each entry is (key, check, the keys it needs to have passed). A new check
is one more entry. What does not depend on the host tree runs once per way of installing (the
first scenario of that way): the checks in ``ONCE_PER_WAY``; the node reboot (``ONCE_PER_API``)
once per device API on each layout's node (the chart runs the same pod as the overlay); the
memory figure once per device API in the whole run (e2e.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from tests.peers.processes import REPO_ROOT

from . import (
    checks_devices,
    checks_dra,
    checks_keeper,
    checks_keeper_opt_out,
    checks_keeper_systemd,
    checks_lifecycle,
    checks_nonroot,
    checks_pod,
    checks_reboot,
    checks_reload,
    checks_thermal,
)
from .context import Run
from .expect import plugin_offer, producer_labels
from .install import HelmInstall, chart_values, kustomization
from .kube import Api, Kubectl, NodeSampler, wait_for
from .layouts import LAYOUTS
from .session import NAMESPACE

log = logging.getLogger("e2e")
OVERLAY = REPO_ROOT / "tests" / "system" / "overlay"
IDLE_S = 30.0
WAYS = ("device-plugin", "helm", "dra", "split", "two-nodes")

Check = Callable[[Run], dict[str, Any]]
CHECKS: list[tuple[str, Check, tuple[str, ...]]] = [
    ("1_daemonset", checks_pod.check_daemonset, ()),
    ("1b_no_warnings", checks_pod.check_no_warning_events, ("1_daemonset",)),
    ("1c_startup_logs", checks_pod.check_startup_logs, ("1_daemonset",)),
    ("2_labels", checks_pod.check_labels, ("1_daemonset",)),
    ("3_allocatable", checks_pod.check_allocatable, ("1_daemonset",)),
    ("4_workload", checks_devices.check_workload, ("3_allocatable",)),
    ("5_kubelet_restart", checks_devices.check_kubelet_restart, ("4_workload",)),
    ("6_replug", checks_devices.check_replug, ("4_workload",)),
    ("6b_replug_logged", checks_devices.check_replug_logged, ("6_replug",)),
    ("6t_overheating", checks_thermal.check_overheating, ("4_workload",)),
    # the keeper before 6c: its holder is check 4's workload, which 6c deletes to make room
    ("6k_keeper", checks_keeper.check_keeper, ("4_workload",)),
    ("6s_keeper_systemd", checks_keeper_systemd.check_keeper_systemd, ("4_workload",)),
    ("6o_keeper_opt_out", checks_keeper_opt_out.check_keeper_opt_out, ("4_workload",)),
    ("6c_nonroot", checks_nonroot.check_nonroot, ("6_replug",)),
    ("6n_nonroot_cdi", checks_nonroot.check_nonroot_cdi, ("6c_nonroot",)),
    ("6d_config_reload", checks_reload.check_config_reload, ("3_allocatable",)),
    ("7_rolling_update", checks_lifecycle.check_rolling_update, ("3_allocatable",)),
    ("7r_node_reboot", checks_reboot.check_node_reboot, ("3_allocatable",)),
    ("8_delete", checks_lifecycle.check_delete, ("1_daemonset",)),
    ("9_figures", checks_lifecycle.check_figures, ()),
]


# the lifecycle of the install (checks_lifecycle, checks_dra's delete) and the figures; and
# the device-keeper's opt-out and the device plugin's CDI check, for their cost (two rollouts
# of devplugin's pod each; the keeper's own check, 6k, runs on every tree: the paths and
# kinds a tree has are its own): the first scenario of each way has a USB Coral to
# re-enumerate (rpi4-coral)
# and no Warning Event at start (1b): an install's start, once per way; a tree's later
# scenario starts on a node reset under it (edgefd's namespace deleted and made again), where
# the kubelet's ConfigMap cache of the re-made namespace may post "failed to sync configmap
# cache" once for the token volume: the reset's, not the install's
ONCE_PER_WAY = frozenset(
    {
        "7_rolling_update",
        "8_delete",
        "9_figures",
        "6o_keeper_opt_out",
        "6n_nonroot_cdi",
        "1b_no_warnings",
    }
)
# checks that the chart's install cannot run: 6n applies its CDI overlay with kustomize over
# the running install (6k turns device-keeper off and on with the chart's value
# deviceKeeper.enabled when the chart installed edgefd)
NOT_WITH_HELM = frozenset({"6n_nonroot_cdi"})
# what the node does with each device API, whoever installed edgefd: a node reboot
ONCE_PER_API = frozenset({"7r_node_reboot"})


@dataclass(frozen=True)
class Scenario:
    name: str
    helm: bool = False
    dra: bool = False
    tree: str | None = None  # a fixture node name or a directory; None: the default sample
    layout: str = "kubeadm"  # the node's distribution (layouts.py)
    split: bool = False  # devplugin and device-keeper in a DaemonSet of their own
    # two-nodes: a second node's tree (twonodes.py; DRA); None: session.DEFAULT_SECOND
    nodes: int = 1
    tree2: str | None = None

    @classmethod
    def parse(cls, spec: str, layout: str = "kubeadm") -> Scenario:
        """``layout``: the run's, for a spec that names none."""
        rest, pct, named = spec.rpartition("%") if "%" in spec else (spec, "", "")
        ways, _, tree = rest.partition("@")
        words = set(ways.split("+")) if ways else {"device-plugin"}
        if not words <= set(WAYS) or (not tree and "@" in rest) or (pct and not named):
            raise ValueError(
                f"{spec!r}: not WAY[+WAY][@TREE][%LAYOUT] with WAY one of {', '.join(WAYS)}"
            )
        layout = named or layout
        if layout not in LAYOUTS:
            raise ValueError(f"{spec!r}: no layout {layout!r} (one of {', '.join(LAYOUTS)})")
        name = spec if named or layout == "kubeadm" else f"{spec}%{layout}"
        two = "two-nodes" in words
        tree, comma, tree2 = tree.partition(",")
        if comma and not two:
            raise ValueError(f"{spec!r}: two trees (@A,B) are for two-nodes only")
        if two and "split" in words:
            raise ValueError(f"{spec!r}: two-nodes runs one DaemonSet")
        return cls(
            name, "helm" in words, "dra" in words or two, tree or None, layout,
            "split" in words, 2 if two else 1, tree2 or None,
        )  # fmt: skip

    @property
    def api(self) -> str:
        return "dra" if self.dra else "device-plugin"

    @property
    def way(self) -> tuple[bool, bool, bool]:
        """How it is installed and offers devices: scenarios of one way have the same pods."""
        return self.helm, self.dra, self.split

    def overlay(self, work: Path | None = None) -> Path:
        """The e2e overlay of its API; split, or on another layout than kubeadm, that overlay
        plus the distribution's component and split-identity, last, as it must be (a
        kustomization written under ``work``)."""
        base = checks_dra.OVERLAY if self.dra else OVERLAY
        names = ([self.layout] if self.layout != "kubeadm" else []) + (
            ["split-identity"] if self.split else []
        )
        if not names or work is None:
            return base
        components = [REPO_ROOT / "k8s" / "overlays" / n for n in names]
        return kustomization(work / "-".join(["overlay", base.name, *names]), base, components)

    def checks(
        self, first_of_way: bool = True, first_of_api: bool = True
    ) -> list[tuple[str, Check, tuple[str, ...]]]:
        """The checks to run: all of them, or the host tree's only (``first_of_way`` False);
        the node reboot in the first scenario of each device API."""
        checks = checks_dra.CHECKS if self.dra else CHECKS
        return [
            c
            for c in checks
            if (first_of_way or c[0] not in ONCE_PER_WAY)
            and not (self.helm and c[0] in NOT_WITH_HELM)
            and (first_of_api or c[0] not in ONCE_PER_API)
        ]


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


def run_scenario(
    session: Any,
    sc: Scenario,
    measure_idle: bool,
    first_of_way: bool,
    first_of_api: bool,
) -> dict[str, Any]:
    """Install edgefd as ``sc`` says on the session's node, run its checks; the result."""
    result: dict[str, Any] = {"scenario": sc.name, "ok": False, "checks": {}, "timings": {}}
    t0 = time.monotonic()
    run: Run | None = None
    try:
        tree = session.load_tree(sc.tree)
        overlay = sc.overlay(session.work)
        ds = rendered_daemonset(session.kubectl, overlay)
        port, sys_inside, image = overlay_settings(ds)
        helm = None
        if sc.helm:  # the same settings as chart values; its DaemonSet is what runs
            values = chart_values(port, sys_inside, sc.api, sc.layout, sc.split)
            helm = HelmInstall(session.bin, session.kubectl, values)
            ds = helm.daemonset()
        node = session.node
        api = Api(session.cp)
        run = Run(
            cp=session.cp,
            node=node,
            api=api,
            kubectl=session.kubectl,
            sampler=NodeSampler(api, node.spec.name, slices=sc.dra).start(),
            overlay=overlay,
            dra=sc.dra,
            helm=helm,
            daemonset=ds,
            image=image,
            expected=producer_labels(tree),
            offer=plugin_offer(tree, node.spec.name),
            measure_idle=measure_idle,
        )
        run.figures["image_bytes"] = node.runtime.image_size(image)
        for archive in node.spec.images:
            run.figures["image_archive_bytes"] = archive.stat().st_size
        result["node"] = node.spec.name
        result["tree"] = sc.tree or "rpi4-coral"
        result["layout"] = sc.layout
        result["cgroup_driver"] = node.spec.driver
        run.t_apply = time.monotonic()
        if helm:
            helm.install()
        else:
            namespace_ready(api)
            session.kubectl("apply", "--server-side", "-k", str(overlay))
        if sc.nodes == 2:
            from .twonodes import node_run, run_two_nodes

            result["node_2"] = session.second.spec.name
            plugin = None if sc.helm else replace(sc, dra=False, nodes=1).overlay(session.work)
            run_two_nodes([run, node_run(run, session.second)], result, plugin)
        else:
            run_checks(run, sc.checks(first_of_way, first_of_api), result)
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        log.error("%s: %s", sc.name, result["error"])
    finally:
        if run:
            result["figures"] = run.figures
            result["samples"] = len(run.sampler.stop())
        result["ok"] = (
            bool(result["checks"])
            and all(c["ok"] for c in result["checks"].values())
            and "error" not in result
        )
        result["timings"]["scenario_s"] = round(time.monotonic() - t0, 2)
    return result


def run_checks(
    run: Run, checks: list[tuple[str, Check, tuple[str, ...]]], result: dict[str, Any]
) -> None:
    t0 = time.monotonic()
    peaks = None
    for key, check, needs in checks:
        if key == "4_workload" and run.measure_idle:  # all before only read: memory at rest
            measure_idle(run, result)
            peaks = checks_pod.MemoryPeaks(run).start()
        if key == "9_figures" and peaks is not None:  # the checks' peak (lifecycle ends it)
            run.figures["memory_peak_mib"] = peaks.stop()
            peaks = None
        run_one(result, key, needs, lambda check=check: check(run))
    if peaks is not None:
        run.figures["memory_peak_mib"] = peaks.stop()
    result["timings"]["checks_s"] = round(time.monotonic() - t0, 2)


def run_one(
    result: dict[str, Any], key: str, needs: tuple[str, ...], call: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """One check into ``result``: skipped when a check it needs failed, failed when it cannot
    finish (the run goes on), timed, logged."""
    failed = [n for n in needs if not result["checks"].get(n, {}).get("ok")]
    t = time.monotonic()
    if failed:
        res: dict[str, Any] = {"ok": False, "skipped": f"needs {', '.join(failed)}"}
    else:
        try:
            res = call()
        except Exception as e:  # a check that cannot finish has failed; go on
            log.debug("check %s", key, exc_info=True)
            res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    res["s"] = round(time.monotonic() - t, 2)
    result["checks"][key] = res
    verdict = "ok" if res["ok"] else "skipped" if "skipped" in res else "FAILED"
    log.info("check %s: %s (%.1fs)", key, verdict, res["s"])
    return res


def measure_idle(run: Run, result: dict[str, Any]) -> None:
    if not result["checks"].get("1_daemonset", {}).get("ok"):
        return
    ready_at = run.t_apply + run.figures["ds_create_to_ready_s"]
    time.sleep(max(0.0, ready_at + IDLE_S - time.monotonic()))
    with contextlib.suppress(Exception):
        run.figures["memory_mib"] = checks_pod.container_memory(run)


def namespace_ready(api: Api) -> None:
    """edgefd's namespace made, with its kube-root-ca.crt, before the overlay's pods: the
    controller-manager publishes that ConfigMap into a new namespace a moment after it is
    made, and a pod created first posts a FailedMount Warning ("failed to sync configmap
    cache") while it waits: the test's fresh namespace racing, not edgefd's start (check
    1b counts Warnings). A user's cluster has the namespace long before (or the chart's)."""
    if api.get_or_none(f"/api/v1/namespaces/{NAMESPACE}") is None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        api.request("POST", "/api/v1/namespaces", body)
    wait_for(
        "kube-root-ca.crt in edgefd's namespace",
        lambda: api.get_or_none(f"/api/v1/namespaces/{NAMESPACE}/configmaps/kube-root-ca.crt"),
        timeout=60,
        interval=0.1,
    )
