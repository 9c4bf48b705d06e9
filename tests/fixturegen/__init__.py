"""Build fixture host roots from small declarative node descriptions.

A node description (YAML, `tests/fixtures/nodes/*.yaml`) lists the hardware of one node:
`usb:` devices by port path, `pci:` functions by address, `platform:` (SoC) devices by sysfs
name (tests/fixturegen/platform.py), and optionally `devicetree: {dts: ...}`.
`build_host()` turns it into a directory that looks like that node's `/` to every edgefd tool
(`--host-root`), so tests, benchmarks and the README demo all run on the same realistic trees.

    python -m tests.fixturegen tests/fixtures/nodes/rpi4-coral.yaml /tmp/rpi4
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .sysfs import HostBuilder, write_pci, write_usb

__all__ = ["NODES_DIR", "REPO_ROOT", "HostBuilder", "build_host", "load_description"]

REPO_ROOT = Path(__file__).resolve().parents[2]
NODES_DIR = REPO_ROOT / "tests" / "fixtures" / "nodes"


def load_description(desc_or_path: Mapping[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    """A description mapping, from a mapping, a file path, or a bare node name (`rpi4-coral`)."""
    if isinstance(desc_or_path, Mapping):
        return dict(desc_or_path)
    path = Path(desc_or_path)
    if not path.exists() and (NODES_DIR / f"{path}.yaml").exists():
        path = NODES_DIR / f"{path}.yaml"
    import yaml

    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a node description must be a mapping")
    data.setdefault("_source", str(path))
    return data


def _write_devicetree(desc: Mapping[str, Any], root: Path) -> None:
    dt = desc["devicetree"]
    dts = Path(dt["dts"])
    if not dts.is_absolute():
        src = Path(desc.get("_source", REPO_ROOT))
        candidates = [REPO_ROOT / dts, src.parent / dts]
        dts = next((c for c in candidates if c.exists()), candidates[0])
    # lazy: another module, and only node descriptions with a devicetree need it
    from .devicetree import compile_dts, expand_dtb

    blob = compile_dts(dts)
    fw = root / "sys" / "firmware"
    fw.mkdir(parents=True, exist_ok=True)
    (fw / "fdt").write_bytes(blob)
    expand_dtb(blob, fw / "devicetree" / "base")
    proc = root / "proc"
    proc.mkdir(parents=True, exist_ok=True)
    link = proc / "device-tree"
    if not link.is_symlink():
        os.symlink("../sys/firmware/devicetree/base", link)


def _write_smaps(root: Path, page_size: int) -> None:
    """The kernel's page size where the scanners read it: `/proc/self/smaps`, whose first
    mapping (the executable's) is backed by base pages (Documentation/filesystems/proc.rst)."""
    kb = page_size // 1024
    smaps = root / "proc" / "self" / "smaps"
    smaps.parent.mkdir(parents=True, exist_ok=True)
    smaps.write_text(
        "aaaab0a10000-aaaab0a2c000 r-xp 00000000 b3:02 1310 /usr/bin/python3.11\n"
        f"Size:                {max(kb, 112)} kB\nKernelPageSize:      {kb} kB\n"
        f"MMUPageSize:         {kb} kB\nRss:                  {kb * 4} kB\n"
    )


def build_host(
    desc_or_path: Mapping[str, Any] | str | os.PathLike[str],
    dest: Path,
    *,
    devicetree: bool = True,
) -> Path:
    """Write the node described by `desc_or_path` under `dest`; return `dest` (the host root).

    `devicetree=False` skips the devicetree part (tests of the bus scanners do not need it).
    """
    desc = load_description(desc_or_path)
    root = Path(dest)
    root.mkdir(parents=True, exist_ok=True)
    for d in ("sys/bus/usb/devices", "sys/bus/pci/devices", "dev"):
        if d.split("/")[2:3] == ["usb"] and "usb" not in desc:
            continue
        if d.split("/")[2:3] == ["pci"] and "pci" not in desc:
            continue
        (root / d).mkdir(parents=True, exist_ok=True)
    # every Linux has the platform bus (its devices may be few on a PC, never none)
    (root / "sys/bus/platform/devices").mkdir(parents=True, exist_ok=True)
    builder = HostBuilder(root)
    if desc.get("usb"):
        write_usb(builder, desc["usb"])
    if desc.get("pci"):
        write_pci(builder, desc["pci"])
    if desc.get("platform"):
        from .platform import write_platform  # lazy: only SoC descriptions have a platform bus

        write_platform(builder, desc["platform"])
    if devicetree and desc.get("devicetree"):
        _write_devicetree(desc, root)
    elif not desc.get("devicetree"):
        # a machine without a devicetree still has /sys/firmware (ACPI, DMI): an empty or
        # missing /sys/firmware means sysfs is not there, which dt-labeller reports as an error
        (root / "sys" / "firmware" / "acpi").mkdir(parents=True, exist_ok=True)
    if desc.get("page_size"):
        _write_smaps(root, int(desc["page_size"]))
    if desc.get("hostname"):
        (root / "etc").mkdir(exist_ok=True)
        (root / "etc" / "hostname").write_text(str(desc["hostname"]) + "\n")
    return root
