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


SAMPLES = REPO / "samples" / "devicetree"
# What each board's sample must give: the labels a Pi 5, a ROCK 5B and an AGX Orin get. The
# Orin's first root string ("nvidia,p3737-0000+p3701-0000") is refused ('+'), the others kept;
# the RK3588's NPU cores are counted only when `npu` nodes are visited (`--dt-node npu`).
DT = "beta.devicetree.org/"
SAMPLE_LABELS = {
    "rpi5-model-b": {
        DT + "raspberrypi-5-model-b": "1",
        DT + "brcm-bcm2712": "1",
        DT + "arm-cortex-a76": "4",
        DT + "brcm-2712-v3d": "1",
        DT + "brcm-bcm2712-vc6": "1",
    },
    "rk3588-rock-5b": {
        DT + "radxa-rock-5b": "1",
        DT + "rockchip-rk3588": "1",
        DT + "arm-cortex-a55": "4",
        DT + "arm-cortex-a76": "4",
        DT + "rockchip-rk3588-mali": "1",
        DT + "arm-mali-valhall-csf": "1",
    },
    "tegra234-agx-orin-devkit": {
        DT + "nvidia-p3701-0000": "1",
        DT + "nvidia-tegra234": "1",
        DT + "arm-cortex-a78ae": "12",
        DT + "nvidia-ga10b": "1",
    },
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
