"""scripts/e2e as a test: the whole system on a real node, in each way it is installed and
offers devices (device plugin with kustomize, the same with the Helm chart, and DRA with
`--api dra`), each check a test outcome. It runs where it can (root, and the Debian packages the
node needs already there, so a developer's `make test` never installs a container runtime by
surprise); under CI it always runs, installing and building what is missing, and never skips."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from tests.peers.processes import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NEEDS = {"runc": "runc", "buildah": "buildah", "gcc": "gcc", "nsenter": "util-linux"}


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    missing = sorted(pkg for cmd, pkg in NEEDS.items() if shutil.which(cmd) is None)
    if missing:
        return f"Debian packages missing: {' '.join(missing)} (scripts/e2e installs them)"
    return None


# scripts/e2e's modes and the checks each reports (tests/system/e2e.py, checks_dra.py)
MODES: dict[str, tuple[list[str], list[str]]] = {
    "device-plugin": (
        [],
        ["1_daemonset", "2_labels", "3_allocatable", "4_workload", "5_kubelet_restart",
         "6_replug", "7_rolling_update", "8_delete", "9_figures"],
    ),
    "helm": (  # the same checks, with the chart installed by helm instead of kustomize
        ["--helm"],
        ["1_daemonset", "2_labels", "3_allocatable", "4_workload", "5_kubelet_restart",
         "6_replug", "7_rolling_update", "8_delete", "9_figures"],
    ),
    "dra": (
        ["--api", "dra"],
        ["1_daemonset", "2_labels", "3_slice", "4_workload", "5_kubelet_restart", "6_hotplug",
         "7_unprepare", "8_delete", "9_figures"],
    ),
}  # fmt: skip
CASES = [(mode, check) for mode, (_, checks) in MODES.items() for check in checks]


@pytest.fixture(scope="module")
def e2e() -> Callable[[str], dict[str, Any]]:
    """One scripts/e2e run per mode, on first use, shared by that mode's tests."""
    why = _why_not()
    if why and not os.environ.get("CI"):
        pytest.skip(why)
    runs: dict[str, dict[str, Any]] = {}

    def run(mode: str) -> dict[str, Any]:
        if mode not in runs:
            runs[mode] = _run(MODES[mode][0])
        return runs[mode]

    return run


def _run(args: list[str]) -> dict[str, Any]:
    r = subprocess.run(
        [str(REPO_ROOT / "scripts" / "e2e"), *args],
        capture_output=True,
        text=True,
        timeout=3600,  # a cold machine builds the harness groups and the image first
    )
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert lines, f"scripts/e2e printed no result (exit {r.returncode}):\n{r.stderr[-4000:]}"
    result = json.loads(lines[-1])
    result["_stderr"] = r.stderr
    result["_returncode"] = r.returncode
    return result


@pytest.mark.parametrize("mode", MODES)
def test_node_came_up(e2e: Callable[[str], dict[str, Any]], mode: str) -> None:
    result = e2e(mode)
    assert "error" not in result, result.get("error") + result["_stderr"][-3000:]
    assert not result.get("teardown_problems"), result["teardown_problems"]


@pytest.mark.parametrize(("mode", "check"), CASES)
def test_check(e2e: Callable[[str], dict[str, Any]], mode: str, check: str) -> None:
    res = e2e(mode)["checks"].get(check)
    assert res is not None, f"check {check} did not run"
    assert res["ok"], json.dumps(res, indent=1)


@pytest.mark.parametrize("mode", MODES)
def test_exit_status_matches(e2e: Callable[[str], dict[str, Any]], mode: str) -> None:
    result = e2e(mode)
    assert result["_returncode"] == (0 if result["ok"] else 1)
