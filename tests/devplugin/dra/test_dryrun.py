"""What `devplugin --api dra --dry-run` prints (dryrun.py), through the command: the
ResourceSlice a first publish would write for the host, from one scan, touching neither the
API server, the kubelet nor any file (no socket made)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.devplugin.dra.hardware import expected_devices
from tests.fixturegen import build_host

ROOT = Path(__file__).resolve().parents[3]


def test_dry_run_prints_the_slice(tmp_path: Path) -> None:
    host = build_host("x86-server", tmp_path / "host", devicetree=False)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgefd.devplugin",
            "--api",
            "dra",
            "--dry-run",
            f"--host-root={host}",
            "--node-name=edge-1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert obj["kind"] == "ResourceSlice" and obj["spec"]["nodeName"] == "edge-1"
    assert {d["name"] for d in obj["spec"]["devices"]} == set(expected_devices("x86-server"))
    assert not list(tmp_path.glob("**/*.sock"))
