"""Scanner performance figures (a script, not a test): `python benchmarks/bench_scan.py`.

For generated trees of 100, 1,000 and 10,000 devices (PCI: SR-IOV physical functions with 7
virtual functions each; USB: a mix of realistic devices), prints the time of one dry run done in
process (scan both buses, derive, render; best of N) in total and per device, then the
whole-process time of `pci-scan --dry-run` / `usb-scan --dry-run` on the small realistic nodes
next to the floor of any click command of the same venv (`python -c "import click"`) and a bare
`python -c pass`. Targets: linear growth, < 50 us/device, and a ~20-device node within 1.3x the
click floor.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from measure import BARE, CLICK_FLOOR, compile_sources, time_process  # noqa: E402

from edgefd.bus import pci, usb  # noqa: E402
from edgefd.bus.catalogue import load_catalogue  # noqa: E402
from edgefd.core.featuresd import render  # noqa: E402
from edgefd.core.hostroot import HostRoot  # noqa: E402
from edgefd.inventory.inventory import Inventory  # noqa: E402
from edgefd.pci_scan.labels import SPEC as PCI_SPEC  # noqa: E402
from edgefd.scan.config import resolve_config  # noqa: E402
from edgefd.scan.derive import evaluate  # noqa: E402
from edgefd.usb_scan.labels import SPEC as USB_SPEC  # noqa: E402
from tests.fixturegen import build_host  # noqa: E402
from tests.fixturegen.sysfs import synthetic_pci, synthetic_usb  # noqa: E402


def dry_run_seconds(bus: str, root: Path, repeat: int) -> float:
    spec = USB_SPEC if bus == "usb" else PCI_SPEC
    config, warnings = resolve_config(spec.rules, None, None, None)
    cat = load_catalogue()
    buses = (usb.READER, pci.READER)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        snap = Inventory(HostRoot.of(root), buses, catalogue=cat, hold=0.0).scan()
        ev = evaluate(spec, snap.label_scans(), snap.label_devices(), config, cat, buses, warnings)
        render(ev.labels, spec.producer)
        best = min(best, time.perf_counter() - t)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    compile_sources()
    with tempfile.TemporaryDirectory(prefix="edgefd-bench-") as tmp:
        print(
            "in-process dry run (inventory scan of both buses + derive + render), best of",
            args.repeat,
        )
        print(f"{'bus':4} {'devices':>8} {'total ms':>10} {'us/device':>10}")
        for bus, gen in (("pci", synthetic_pci), ("usb", synthetic_usb)):
            for n in sizes:
                root = build_host(gen(n), Path(tmp) / f"{bus}-{n}")
                s = dry_run_seconds(bus, root, args.repeat)
                print(f"{bus:4} {n:>8} {s * 1e3:>10.2f} {s / n * 1e6:>10.1f}")
        print()
        print("whole process, median of", args.repeat * 2)
        bare = statistics.median(time_process(BARE, args.repeat * 2))
        floor = statistics.median(time_process(CLICK_FLOOR, args.repeat * 2))
        print(f"  python -c pass                         {bare * 1e3:7.1f} ms  {bare / floor:.2f}x")
        print(f"  python -c 'import click' (the floor)   {floor * 1e3:7.1f} ms  1.00x")
        for node, tool in (("rpi4-coral", "usb_scan"), ("x86-server", "pci_scan")):
            root = build_host(node, Path(tmp) / node, devicetree=False)
            argv = [sys.executable, "-m", f"edgefd.{tool}", "--host-root", str(root), "--dry-run"]
            s = statistics.median(time_process(argv, args.repeat * 2))
            name = tool.replace("_", "-")
            print(f"  {name} --dry-run on {node:12} {s * 1e3:7.1f} ms  {s / floor:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
