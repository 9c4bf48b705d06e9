"""Measuring helpers every benchmark shares: process timing against a bare interpreter,
percentiles, and /proc readings of a running tool.

Benchmarks print figures; they are not timed tests. Timing a CLI means timing what a user
waits for, so processes are started the same way as the bare `python3 -c pass` they are
compared with, after the sources are byte-compiled (this environment sets
PYTHONDONTWRITEBYTECODE, so stale .pyc files would otherwise be recompiled on every run).
"""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# sys.executable is the venv's real interpreter, not a shell shim (pyenv's shims cost ~30 ms)
BARE = [sys.executable, "-c", "pass"]
# the floor of any click command in this venv: every edgefd tool starts by importing click
CLICK_FLOOR = [sys.executable, "-c", "import click"]


def compile_sources() -> None:
    import click

    compileall.compile_dir(ROOT / "tools", quiet=1)
    # the floor is measured with compiled bytecode too (a fresh venv may not have click's)
    compileall.compile_dir(Path(click.__file__).parent, quiet=1)


def time_process(argv: list[str], n: int) -> list[float]:
    """Wall-clock seconds of `n` runs of `argv` (stdout/stderr discarded; failure raises)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(
            argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        out.append(time.perf_counter() - t0)
    return out


def paired_ratios(argv: list[str], baseline: list[str], n: int) -> tuple[list[float], list[float]]:
    """(`argv`'s times, its time over `baseline`'s run just before it) for `n` pairs, the two
    run in turn: this machine's speed drifts by tens of percent within a minute, and a
    ratio of two medians taken a minute apart measured the drift; a pair's two runs see the
    same machine."""
    times, ratios = [], []
    for _ in range(n):
        [base] = time_process(baseline, 1)
        [t] = time_process(argv, 1)
        times.append(t)
        ratios.append(t / base)
    return times, ratios


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in [0, 1]."""
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def scrape(port: int, timeout: float = 10) -> dict[str, float]:
    """A tool's /metrics on a loopback port, sample -> value ({} when it does not answer)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time consumed so far by `pid`."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
