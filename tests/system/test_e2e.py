"""scripts/e2e as a test: the whole system on a real node, each of the issue's checks a test
outcome. It runs where it can (root, and the Debian packages the node needs already there, so
a developer's `make test` never installs a container runtime by surprise); under CI it always
runs, installing and building what is missing, and never skips."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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


@pytest.fixture(scope="module")
def e2e_result() -> dict[str, Any]:
    why = _why_not()
    if why and not os.environ.get("CI"):
        pytest.skip(why)
    r = subprocess.run(
        [str(REPO_ROOT / "scripts" / "e2e")],
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


def test_node_came_up(e2e_result: dict[str, Any]) -> None:
    assert "error" not in e2e_result, e2e_result.get("error") + e2e_result["_stderr"][-3000:]
    assert not e2e_result.get("teardown_problems"), e2e_result["teardown_problems"]


@pytest.mark.parametrize(
    "check",
    [
        "1_daemonset",
        "2_labels",
        "3_allocatable",
        "4_workload",
        "5_kubelet_restart",
        "6_replug",
        "7_rolling_update",
        "8_delete",
        "9_figures",
    ],
)
def test_check(e2e_result: dict[str, Any], check: str) -> None:
    res = e2e_result["checks"].get(check)
    assert res is not None, f"check {check} did not run"
    assert res["ok"], json.dumps(res, indent=1)


def test_exit_status_matches(e2e_result: dict[str, Any]) -> None:
    assert e2e_result["_returncode"] == (0 if e2e_result["ok"] else 1)
