"""Recipe 8 of the scheduling guide, Dynamic Resource Allocation: the DeviceClasses edgefd ships
in ``k8s/`` and the ResourceSlices its DRA driver would publish for the sample fleet.

Kept apart on purpose: the DRA driver is still being built. Until ``k8s/`` holds a DeviceClass,
the DRA recipes are checked for their structure only and their scheduling test is skipped, and
the guide says so (``SKIP_NOTE``). Once a DeviceClass exists the test runs, takes each node's
ResourceSlices from ``devplugin --api dra --dry-run`` on the node's fixture host (the driver's
own answer, never a hand-written slice), and the note must go.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .fleet import ROOT, SampleNode, run_tool

K8S_DIR = ROOT / "k8s"
SKIP_NOTE = "the test of this section is skipped"
SLICE_ARGS = ("--api", "dra", "--dry-run", "--output", "json")


def device_classes(k8s_dir: Path = K8S_DIR) -> list[dict[str, Any]]:
    """Every DeviceClass in the manifests under ``k8s_dir`` (templates that do not parse as
    YAML, such as a Helm chart's, are not manifests and are passed over)."""
    found = []
    for path in sorted(p for p in k8s_dir.rglob("*") if p.suffix in (".yaml", ".yml")):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue
        found += [d for d in docs if isinstance(d, dict) and d.get("kind") == "DeviceClass"]
    return found


def _slices_in(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, dict):
        if doc.get("kind") == "ResourceSlice":
            return [doc]
        return [s for v in doc.values() for s in _slices_in(v)]
    if isinstance(doc, list):
        return [s for v in doc for s in _slices_in(v)]
    return []


def resource_slices(node: SampleNode) -> list[dict[str, Any]]:
    """The ResourceSlices edgefd's DRA driver would publish for ``node``."""
    args = [*SLICE_ARGS, "--host-root", str(node.host), f"--node-name={node.name}"]
    try:
        out = run_tool("devplugin", *args)
    except AssertionError as e:
        raise AssertionError(
            "k8s/ ships DeviceClasses, so the guide's DRA recipes must run; this test takes the "
            f"fleet's ResourceSlices from `devplugin {' '.join(SLICE_ARGS)}`, which failed: {e}"
        ) from None
    slices = [s for d in yaml.safe_load_all(out) for s in _slices_in(d)]
    for s in slices:
        s.get("metadata", {}).pop("resourceVersion", None)
        s.get("metadata", {}).pop("uid", None)
    return slices
