"""The release workflow (.github/workflows/release.yml): checked by actionlint (built from the
Go module proxy with the harness, `scripts/build-harness lint`), and its version gate run as
the runner would run it, since a release must carry one version everywhere."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from tests.peers.processes import REPO_ROOT, harness_binary

WORKFLOWS = REPO_ROOT / ".github" / "workflows"


def actionlint(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(harness_binary("actionlint")), "-no-color", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )


def test_every_workflow_passes_actionlint() -> None:
    files = sorted(WORKFLOWS.glob("*.y*ml"))
    assert [f.name for f in files] == ["release.yml"]
    r = actionlint(*files)
    assert r.returncode == 0, r.stdout + r.stderr


def test_actionlint_refuses_a_broken_workflow(tmp_path: Path) -> None:
    """The checker is not a formality: an unknown context and a job that needs a job that is
    not there are refused."""
    text = (WORKFLOWS / "release.yml").read_text()
    broken = text.replace("needs: [version, image]", "needs: [version, imagez]").replace(
        "${{ github.ref_name }}", "${{ github.ref_nam }}"
    )
    assert broken != text
    bad = tmp_path / ".github" / "workflows" / "release.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(broken)
    r = actionlint(bad)
    assert r.returncode == 1
    assert "imagez" in r.stdout and "ref_nam" in r.stdout


def _version_gate(tag: str, tmp_path: Path) -> tuple[int, str]:
    doc = yaml.safe_load((WORKFLOWS / "release.yml").read_text())
    [step] = [s for s in doc["jobs"]["version"]["steps"] if s.get("id") == "check"]
    out = tmp_path / "output"
    out.write_text("")
    env = {**os.environ, "TAG": tag, "GITHUB_OUTPUT": str(out)}
    r = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    return r.returncode, out.read_text() + r.stdout


def test_the_release_carries_one_version(tmp_path: Path) -> None:
    from edgefd import __version__

    chart = yaml.safe_load((REPO_ROOT / "charts" / "edgefd" / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == __version__
    assert _version_gate(f"v{__version__}", tmp_path) == (0, f"version={__version__}\n")
    code, said = _version_gate("v9.9.9", tmp_path)
    assert code == 1 and "must say one version" in said
