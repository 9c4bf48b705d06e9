"""dt-labeller as a real process (`python -m edgefd.dt_labeller`) over generated host roots: the
sample devicetrees, a host root holding a blob where the kernel puts it, and the labels the
Raspberry Pi 4 sample must give."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RPI4_DTS = REPO / "samples" / "devicetree" / "rpi4-model-b.dts"
JETSON_DTS = REPO / "tests" / "fixtures" / "dt" / "jetson-nano-like.dts"

RPI4_LABELS = {
    "beta.devicetree.org/raspberrypi-4-model-b": "1",
    "beta.devicetree.org/brcm-bcm2711": "1",
    "beta.devicetree.org/arm-cortex-a72": "4",
    "beta.devicetree.org/brcm-bcm2711-vc5": "1",
}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgefd.dt_labeller", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def run_bytes(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "edgefd.dt_labeller", *args],
        cwd=REPO,
        capture_output=True,
        timeout=60,
    )


def host_with_blob(root: Path, blob: bytes) -> Path:
    (root / "sys" / "firmware").mkdir(parents=True, exist_ok=True)
    (root / "sys" / "firmware" / "fdt").write_bytes(blob)
    return root
