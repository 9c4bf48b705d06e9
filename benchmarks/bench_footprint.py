"""What each tool costs a small node (a script, not a test): `python benchmarks/bench_footprint.py`.

Issue 33's budget is the whole pod under 96 MiB on a 1-4 GB Raspberry Pi, and one-shot tools
within 1.3x of the floor of any click command. So that a regression shows, this prints, against
the bare interpreter of the same venv measured in the same run:

* one-shot tools (`--dry-run` on the bundled sample nodes): median wall time, and the median
  of its ratios to `python -c "import click"` run just before it each time (measure.py's
  paired_ratios), and peak RSS;
* long-running tools, each as its container runs it (in-cluster API configuration, the sample
  node's /sys, no peer answering, so nothing but the tool itself is measured): import time of
  its CLI module, RSS once it serves /healthz and has idled, and the sum against the budget.

RSS counts the shared libraries each process maps, so the sum is an upper bound of what the
containers' working sets add up to; the real-node e2e reports those (tests/system).
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from measure import (  # noqa: E402
    BARE,
    CLICK_FLOOR,
    compile_sources,
    paired_ratios,
    rss_kib,
    time_process,
)

from tests.fixturegen import build_host  # noqa: E402

BUDGET_MIB = 96.0

# A pod's way to the API server, pointed at a directory of ours (the tools read the real
# service-account path, which this machine does not have).
IN_CLUSTER = """
import sys
from edgefd.kube import incluster
incluster.SERVICE_ACCOUNT_DIR = sys.argv.pop(1)
from edgefd.{module}.cli import main
sys.argv[0] = "{tool}"
main()
"""


# A child's ru_maxrss starts at its parent's size at fork (this script's, tens of MiB), so a
# process reports its own peak (VmHWM) as it exits.
PEAK = """
import atexit, runpy, sys
out = sys.argv[1]
def peak():
    with open("/proc/self/status") as st, open(out, "w") as fh:
        fh.write(next(ln.split()[1] for ln in st if ln.startswith("VmHWM:")))
atexit.register(peak)
mode, target, *rest = sys.argv[2:]
if mode == "-c":
    sys.argv = ["-c", *rest]
    exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
else:
    sys.argv = [target, *rest]
    runpy.run_module(target, run_name="__main__", alter_sys=True)
"""


def peak_rss_mib(argv: list[str]) -> float:
    """Peak RSS (VmHWM) of one run of `argv` = [python, -c CODE | -m MODULE, args...]."""
    with tempfile.NamedTemporaryFile() as out:
        wrapped = [argv[0], "-c", PEAK, out.name, *argv[1:]]
        subprocess.run(wrapped, cwd=REPO, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)  # fmt: skip
        return int(Path(out.name).read_text()) / 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthz(port: int, proc: subprocess.Popen, timeout: float = 60) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"exited {proc.returncode} before serving /healthz")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return time.monotonic() - t0
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"no /healthz on :{port} within {timeout:g} s")


def idle_rss(argv: list[str], port: int, env: dict[str, str], idle: float) -> tuple[float, float]:
    """(seconds to /healthz, RSS MiB after `idle` seconds more) of a long-running tool."""
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        up = wait_healthz(port, proc)
        time.sleep(idle)
        return up, rss_kib(proc.pid) / 1024
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def long_running(tmp: Path, root: Path, idle: float) -> list[tuple[str, list[str], int, dict]]:
    """Each container's process, as its manifest starts it (k8s/pod-template.yaml), on the
    sample node."""
    sa = tmp / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("benchmark")
    (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    features = tmp / "features.d"
    features.mkdir()
    kubelet = tmp / "kubelet"
    for d in ("device-plugins", "plugins_registry", "plugins", "pod-resources"):
        (kubelet / d).mkdir(parents=True)
    env = {**os.environ, "NODE_NAME": "bench-node", "KUBERNETES_SERVICE_HOST": "127.0.0.1",
           "KUBERNETES_SERVICE_PORT": "1"}  # fmt: skip
    py = sys.executable

    def in_cluster(module: str, tool: str) -> list[str]:
        return [py, "-c", IN_CLUSTER.format(module=module, tool=tool), str(sa)]

    host = ["--host-root", str(root)]
    out = []
    for name, argv in (
        ("bus-scan", [py, "-m", "edgefd.usb_scan", *host, "--watch", "--also", "pci-scan",
                      "--features-dir", str(features)]),
        ("feature-sink", [*in_cluster("feature_sink", "feature-sink"), "--node-name",
                          "bench-node", "--features-dir", str(features)]),
        ("devplugin", [py, "-m", "edgefd.devplugin", *host, "--plugin-dir",
                       str(kubelet / "device-plugins")]),
        ("devplugin --api dra", [*in_cluster("devplugin", "devplugin"), *host, "--api", "dra",
                                 "--kubelet-dir", str(kubelet), "--cdi-dir", str(tmp / "cdi")]),
        ("device-keeper", [py, "-m", "edgefd.device_keeper", "serve", *host, "--kubelet-dir",
                           str(kubelet), "--cri-socket", str(tmp / "cri.sock"), "--state-dir",
                           str(tmp / "keeper"), "--dry-run"]),
    ):  # fmt: skip
        port = free_port()
        out.append((name, [*argv, "--listen", f"127.0.0.1:{port}"], port, env))
    return out


def import_ms(module: str, n: int) -> float:
    return statistics.median(time_process([sys.executable, "-c", f"import {module}"], n)) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=15, help="runs per one-shot median")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds idle before RSS is read")
    args = ap.parse_args()
    compile_sources()
    bare_ms = statistics.median(time_process(BARE, args.runs)) * 1e3
    floor_ms = statistics.median(time_process(CLICK_FLOOR, args.runs)) * 1e3
    bare_rss = peak_rss_mib(BARE)
    print(f"python -c pass: {bare_ms:.1f} ms, {bare_rss:.1f} MiB; "
          f"python -c 'import click' (the floor): {floor_ms:.1f} ms, "
          f"{peak_rss_mib(CLICK_FLOOR):.1f} MiB")  # fmt: skip
    print(f"\none-shot, --dry-run on the sample nodes (median of {args.runs} runs, each after "
          "a run of the floor; target 1.3x)")  # fmt: skip
    print(f"  {'tool':32} {'ms':>7} {'x floor':>8} {'peak MiB':>9}")
    with tempfile.TemporaryDirectory(prefix="edgefd-footprint-") as t:
        tmp = Path(t)
        pi = build_host("rpi4-coral", tmp / "rpi4-coral")
        x86 = build_host("x86-server", tmp / "x86-server", devicetree=False)
        for tool, module, root in (
            ("dt-labeller", "dt_labeller", pi),
            ("usb-scan", "usb_scan", pi),
            ("pci-scan", "pci_scan", x86),
        ):
            argv = [sys.executable, "-m", f"edgefd.{module}", "--host-root", str(root), "--dry-run"]
            times, ratios = paired_ratios(argv, CLICK_FLOOR, args.runs)
            ms = statistics.median(times) * 1e3
            rss = peak_rss_mib(argv)
            ratio = statistics.median(ratios)
            print(f"  {tool + ' on ' + root.name:32} {ms:7.1f} {ratio:7.2f}x {rss:9.1f}")

        print(f"\nlong-running, idle {args.idle:g} s after /healthz (in-cluster, no peer)")
        print(f"  {'container':22} {'import ms':>9} {'x bare':>7} {'up s':>6} {'RSS MiB':>8}")
        total = 0.0
        for name, argv, port, env in long_running(tmp, pi, args.idle):
            module = "edgefd." + name.split()[0].replace("-", "_").replace("bus_scan", "usb_scan")
            imp = import_ms(module + ".cli", max(5, args.runs // 3))
            up, rss = idle_rss(argv, port, env, args.idle)
            print(f"  {name:22} {imp:9.1f} {imp / bare_ms:6.2f}x {up:6.2f} {rss:8.1f}")
            if name != "devplugin --api dra":
                total += rss
        print(f"\n  pod (bus-scan, feature-sink, devplugin, device-keeper): {total:.1f} MiB RSS, "
              f"budget {BUDGET_MIB:g} MiB ({total / BUDGET_MIB:.2f}x)")  # fmt: skip
    print(f"(this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
