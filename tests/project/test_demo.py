"""The README's first command and its documented CI pipeline keep working."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_whole_pipeline_on_sample_node() -> None:
    proc = subprocess.run(["scripts/demo"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # every stage shows up, with the sample node's real outcome
    assert "beta.devicetree.org/arm-cortex-a72=4" in out
    assert "feature.node.kubernetes.io/usb-fe_1a6e_089a.present=true" in out
    assert "edgefd.io/edgetpu.present=true" in out
    assert "/metadata/annotations/edgefd.io~1owned-labels" in out
    assert "edgefd.io/coral-usb: 1 healthy, 0 unhealthy; socket " in out
    assert "coral-usb-2-1: Healthy" in out
    assert "Traceback" not in out + proc.stderr


def test_readme_ci_pipeline(tmp_path: Path) -> None:
    """`usb-scan --dry-run | feature-sink --dry-run --features -`, as the README shows."""
    host = tmp_path / "host"
    subprocess.run(
        [sys.executable, "-m", "tests.fixturegen", "rpi4-coral", str(host)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    pipeline = (
        f"set -o pipefail; usb-scan --host-root {host} --dry-run | "
        "feature-sink --dry-run --features - --node-name ci-node"
    )
    proc = subprocess.run(
        ["bash", "-c", pipeline], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "add     feature.node.kubernetes.io/usb-fe_1a6e_089a.present=true" in proc.stdout
    assert "Traceback" not in proc.stderr
