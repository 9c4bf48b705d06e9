"""dt-labeller figures on the ~30 KB Raspberry Pi 4 sample blob. A script, not a test.

Prints:
  * median (and best) time to parse the blob with edgefd's walker (aim < 5 ms), and the same
    for the `fdt` package for comparison;
  * median wall time of a whole `python -m edgefd.dt_labeller --dry-run --dtb X` process, as a
    ratio to the floor of any click command of the same venv, `python -c "import click"`,
    started the same way (aim <= 1.3x), and to a bare `python -c pass`;
  * what the tool's own imports cost (`python -X importtime`), biggest first.

Bytecode is compiled first (as an installed package would have it): with
PYTHONDONTWRITEBYTECODE set, every run would otherwise recompile the tool from source.

Usage: .venv/bin/python benchmarks/bench_dt.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measure import BARE, CLICK_FLOOR, compile_sources, time_process  # noqa: E402

from edgefd.dt_labeller.tree import parse_blob  # noqa: E402
from tests.fixturegen.devicetree import compile_dts  # noqa: E402

DTS = ROOT / "samples" / "devicetree" / "rpi4-model-b.dts"
CACHE = ROOT / ".cache"


def time_calls(fn, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def ms(x: float) -> str:
    return f"{x * 1000:.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40, help="process start-ups per variant")
    args = ap.parse_args()

    CACHE.mkdir(exist_ok=True)
    blob = compile_dts(DTS)
    dtb = CACHE / "rpi4-model-b.dtb"
    dtb.write_bytes(blob)
    print(f"blob: {dtb.relative_to(ROOT)}, {len(blob)} bytes, {len(parse_blob(blob).nodes)} nodes")

    parse = time_calls(lambda: parse_blob(blob), 300)
    print(f"parse (edgefd walker): median {ms(statistics.median(parse))}, best {ms(min(parse))}")
    try:
        import fdt

        ref = time_calls(lambda: fdt.parse_dtb(blob), 30)
        print(f"parse (fdt package):   median {ms(statistics.median(ref))}, best {ms(min(ref))}")
    except ImportError:
        print("parse (fdt package):   not installed")

    compile_sources()
    py = sys.executable
    tool = [py, "-m", "edgefd.dt_labeller", "--dry-run", "--dtb", str(dtb)]
    for argv in (BARE, CLICK_FLOOR, tool):
        time_process(argv, 3)  # warm the page cache
    b: list[float] = []
    f: list[float] = []
    t: list[float] = []
    for _ in range(args.runs):  # interleaved, so machine load hits all alike
        b += time_process(BARE, 1)
        f += time_process(CLICK_FLOOR, 1)
        t += time_process(tool, 1)
    mb, mf, mt = statistics.median(b), statistics.median(f), statistics.median(t)
    print(
        f"process: python -c pass {ms(mb)}, python -c 'import click' {ms(mf)}, "
        f"dt-labeller --dry-run {ms(mt)}: {mt / mf:.2f}x the click floor ({mt / mb:.2f}x bare)"
    )

    proc = subprocess.run(
        [py, "-X", "importtime", *tool[1:]], cwd=ROOT, capture_output=True, text=True, check=True
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line.split("|")
        try:
            cumulative = int(parts[1])
        except ValueError:
            continue
        name = parts[2].rstrip()
        if not name.startswith("  ") and not name.strip().startswith(("site", "encodings")):
            rows.append((cumulative, name.strip()))
    print("top-level imports after start-up (cumulative):")
    for cumulative, name in sorted(rows, reverse=True)[:6]:
        print(f"  {cumulative / 1000:7.2f} ms  {name}")


if __name__ == "__main__":
    main()
