"""``scripts/e2e --helm``: install edgefd with the chart (charts/edgefd) instead of
``kubectl apply -k tests/system/overlay``, with the same settings.

The chart's values that mirror the overlay: hostNetwork (the k8s/overlays/hostnetwork
component: listeners and probes on 127.0.0.1), apiServer.host/port (the loopback API server)
and hostSys (the sample node's sysfs); the last two are read from the overlay's render, so the
test's node settings have one home (tests/system/overlay/node.yaml).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.peers.processes import REPO_ROOT

from .kube import Kubectl, KubeError

CHART = REPO_ROOT / "charts" / "edgefd"
RELEASE = "edgefd"


def chart_values(
    api_port: int,
    host_sys: str,
    api: str = "device-plugin",
    layout: str = "kubeadm",
    split: bool = False,
) -> list[str]:
    """The node's settings; on another layout than kubeadm (the chart's default), the
    distribution's profile, as an operator on that distribution installs it; ``split``: two
    DaemonSets split by identity (splitByIdentity)."""
    values = [
        "--set", "hostNetwork=true",
        "--set", "apiServer.host=127.0.0.1",
        "--set", f"apiServer.port={api_port}",
        "--set", f"hostSys={host_sys}",
        "--set", f"devicePlugin.api={api}",
    ]  # fmt: skip
    values += ["--set", "splitByIdentity=true"] if split else []
    return values + (["--set", f"distribution={layout}"] if layout != "kubeadm" else [])


def kustomization(dest: Path, resource: Path, components: list[Path]) -> Path:
    """A kustomization of ``resource`` with ``components`` (kustomize takes no absolute
    paths: relative ones from ``dest``); written atomically, returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    rel = [os.path.relpath(p, dest) for p in (resource, *components)]
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": rel[:1],
        "components": rel[1:],
    }
    tmp = dest / "kustomization.yaml.tmp"
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
    tmp.replace(dest / "kustomization.yaml")
    return dest


class HelmInstall:
    """The harness-built helm with the admin kubeconfig, and the chart's values for this node."""

    def __init__(self, bin_dir: Path, kubectl: Kubectl, values: list[str]) -> None:
        self.argv = [str(bin_dir / "helm"), kubectl.argv[1]]  # the same --kubeconfig
        self.values = values

    def __call__(self, *args: str, timeout: float = 180.0) -> str:
        r = subprocess.run([*self.argv, *args], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise KubeError(f"helm {' '.join(args[:2])}: {r.stderr.strip()[-2000:]}")
        return r.stdout

    def daemonset(self) -> dict[str, Any]:
        """The labels DaemonSet as the chart renders it with these values."""
        docs = yaml.safe_load_all(self("template", RELEASE, str(CHART), *self.values))
        return next(
            d for d in docs if d and d["kind"] == "DaemonSet" and d["metadata"]["name"] == "edgefd"
        )

    def install(self) -> None:
        """Server-side (Helm 4's default). The release record goes to `default`, the objects
        to the chart's own namespace (charts/edgefd/values.yaml: namespace)."""
        self("install", RELEASE, str(CHART), "--namespace=default", *self.values)
