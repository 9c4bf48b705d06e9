"""dt-labeller's blob walker over every DTB Debian ships for arm64. A script, not a test.

Downloads Debian's arm64 kernel image package (the one `linux-image-arm64` depends on) with
apt-get, extracts its DTBs into .cache/dtb-corpus/ (git-ignored; reused on later runs), then
parses each one and prints: count, failures (must be 0), median and worst parse time per DTB,
and how many labels the default node set yields. As an independent check, each blob's root
`compatible` is compared with what `fdtget` (from dtc's package) reads.

Needs root the first time if the arm64 architecture is not yet known to dpkg (it runs
`dpkg --add-architecture arm64` and `apt-get update`).

Usage: .venv/bin/python benchmarks/bench_dt_corpus.py [--refresh]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from edgefd.dt_labeller.labels import derive  # noqa: E402
from edgefd.dt_labeller.tree import MalformedTree, parse_blob  # noqa: E402

CACHE = ROOT / ".cache"
CORPUS = CACHE / "dtb-corpus"


def sh(*argv: str, cwd: Path | None = None) -> str:
    return subprocess.run(argv, cwd=cwd, check=True, capture_output=True, text=True).stdout


def kernel_package() -> str:
    """The versioned image package that the `linux-image-arm64` metapackage points at."""
    if "arm64" not in sh("dpkg", "--print-foreign-architectures").split():
        print("adding the arm64 architecture to dpkg and updating apt lists ...", flush=True)
        sh("dpkg", "--add-architecture", "arm64")
        sh("apt-get", "update", "-qq")
    for line in sh("apt-cache", "depends", "linux-image-arm64:arm64").splitlines():
        dep = line.strip().removesuffix(":arm64")  # "Depends: linux-image-6.1.0-N-arm64:arm64"
        if dep.startswith("Depends: linux-image-") and dep.endswith("-arm64"):
            return dep.split()[1]
    raise SystemExit("cannot find the kernel image package behind linux-image-arm64")


def fetch_corpus() -> None:
    pkg = kernel_package()
    print(f"downloading {pkg}:arm64 ...", flush=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        t = Path(tmp)
        sh("apt-get", "download", f"{pkg}:arm64", cwd=t)
        (deb,) = t.glob("*.deb")
        sh("dpkg-deb", "-x", str(deb), str(t / "x"))
        dtbs = sorted((t / "x").glob("usr/lib/linux-image-*/**/*.dtb"))
        if not dtbs:
            raise SystemExit(f"{deb.name} has no DTBs under usr/lib/linux-image-*/")
        base = dtbs[0].relative_to(t / "x").parts[:3]  # usr/lib/linux-image-<ver>
        if CORPUS.exists():
            shutil.rmtree(CORPUS)
        for d in dtbs:
            dest = CORPUS / d.relative_to(t / "x" / Path(*base))
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(d, dest)
        (CORPUS / "SOURCE").write_text(f"{deb.name}\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--refresh", action="store_true", help="download the package again")
    args = ap.parse_args()
    CACHE.mkdir(exist_ok=True)
    if args.refresh or not any(CORPUS.rglob("*.dtb")):
        fetch_corpus()
    files = sorted(CORPUS.rglob("*.dtb"))
    source = (CORPUS / "SOURCE").read_text().strip() if (CORPUS / "SOURCE").exists() else "?"
    print(f"corpus: {len(files)} DTBs from {source}")

    times: list[tuple[float, str]] = []
    failures: list[str] = []
    sizes: list[int] = []
    nodes = labels = rejected = 0
    for f in files:
        data = f.read_bytes()
        sizes.append(len(data))
        best = float("inf")
        try:
            for _ in range(3):
                t0 = time.perf_counter()
                tree = parse_blob(data, str(f))
                best = min(best, time.perf_counter() - t0)
        except MalformedTree as e:
            failures.append(f"{f.relative_to(CORPUS)}: {e}")
            continue
        times.append((best, str(f.relative_to(CORPUS))))
        d = derive(tree.nodes)
        nodes += len(tree.nodes)
        labels += len(d.labels)
        rejected += len(d.rejected)

    mismatches = 0
    fdtget = shutil.which("fdtget")
    if fdtget:
        for f in files:
            p = subprocess.run(
                [fdtget, "-t", "s", str(f), "/", "compatible"], capture_output=True, text=True
            )
            theirs = p.stdout.split() if p.returncode == 0 else None
            raw = parse_blob(f.read_bytes()).nodes[0].compatible or b""
            ours = [s.decode() for s in raw.split(b"\0") if s]
            if theirs != ours:
                mismatches += 1
                print(f"  root compatible differs for {f.name}: fdtget {theirs}, ours {ours}")

    secs = sorted(t for t, _ in times)
    worst_t, worst_name = max(times) if times else (0.0, "-")
    print(f"parsed: {len(times)}, failures: {len(failures)}")
    for msg in failures[:20]:
        print(f"  FAIL {msg}")
    if secs:
        print(
            f"parse time per DTB: median {statistics.median(secs) * 1000:.3f} ms, "
            f"worst {worst_t * 1000:.3f} ms ({worst_name}, "
            f"{(CORPUS / worst_name).stat().st_size} bytes)"
        )
        print(
            f"sizes: median {statistics.median(sizes)} bytes, largest {max(sizes)} bytes; "
            f"{nodes} nodes in all"
        )
        print(f"labels (root+cpu+gpu): {labels} in all, {rejected} refused as invalid")
    if fdtget:
        print(f"root compatible cross-check with fdtget: {mismatches} mismatches")
    sys.exit(1 if failures or mismatches else 0)


if __name__ == "__main__":
    main()
