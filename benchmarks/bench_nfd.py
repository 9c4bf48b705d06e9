"""A Coral plugged and re-enumerated 0.3 s apart, against the real nfd-worker v0.19.0 and the
harness's kube-apiserver. A script, not a test (tests/core/test_nfd_worker.py asserts it).

Prints, for usb-scan's writer (staging directory, trailing event) and for the write of before
issue 34 (temp file in features.d, no trailing event): per-trial latency from the second write
to the final labels in the worker's NodeFeature (p50, max), and the trials not within 2 s
(waited for up to --limit seconds; the worker's own re-scan is every 60 s).

Usage: .venv/bin/python benchmarks/bench_nfd.py [--trials N] [--limit S] [--only fixed|before]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--limit", type=float, default=8.0)
    ap.add_argument("--only", choices=("fixed", "before"))
    args = ap.parse_args()

    from tests.core.nfd_trials import run_trials, write_before, write_fixed
    from tests.peers.apiserver import KubeAPIServer
    from tests.peers.nfd import NFDWorkerDaemon, install_nfd_crds

    writers = {"fixed": write_fixed, "before": write_before}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        apiserver = KubeAPIServer(tmp / "apiserver").start(controller_manager=False)
        try:
            install_nfd_crds(apiserver)
            for name, make in writers.items():
                if args.only and name != args.only:
                    continue
                fdir = tmp / name / "features.d"
                fdir.mkdir(parents=True)
                worker = NFDWorkerDaemon(apiserver, tmp / name, fdir, node=f"bench-{name}")
                worker.start()
                try:
                    figures = run_trials(worker, fdir, make, args.trials, limit=args.limit)
                finally:
                    worker.stop()
                shown = ", ".join("-" if x is None else f"{x:.2f}" for x in figures.latencies)
                print(f"{name}: {figures.text()}\n  per trial (s): {shown}", flush=True)
        finally:
            apiserver.stop()


if __name__ == "__main__":
    main()
