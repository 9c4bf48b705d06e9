"""feature-sink figures against the harness's real kube-apiserver. A script, not a test.

Prints:
  * latency from a feature-file change to the label being visible on the Node, timestamped by
    a watch on the Node (median, p99; aim p99 < 500 ms);
  * API requests and writes of an idle sink (measured, then extrapolated to an hour; aim 0
    writes; one open watch on its Node, and the safety resync's GET);
  * resident memory (RSS) of the running sink and its start-up time, and how much of that the
    `kubernetes` import takes.

Usage: .venv/bin/python benchmarks/bench_sink.py [--changes N] [--idle-seconds S]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measure import percentile, rss_kib, scrape  # noqa: E402

from tests.helpers import free_port  # noqa: E402

F = "feature.node.kubernetes.io"


def metrics(port: int) -> dict[str, float]:
    return scrape(port, timeout=3)


def total(m: dict[str, float], prefix: str) -> float:
    return sum(v for k, v in m.items() if k.startswith(prefix))


def write(d: Path, name: str, labels: dict[str, str]) -> None:
    tmp = d / f".{name}.tmp"
    tmp.write_text("".join(f"{k}={v}\n" for k, v in labels.items()))
    os.replace(tmp, d / name)


def start_sink(kubeconfig: str, node: str, fdir: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "edgefd.feature_sink", "--kubeconfig", kubeconfig,
            "--node-name", node, "--features-dir", str(fdir), "--listen", f"127.0.0.1:{port}",
            *extra,
        ],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return proc, port


def wait_synced(port: int, timeout: float = 30) -> float:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if metrics(port).get('edgefd_sink_syncs_total{result="success"}', 0) >= 1:
                return time.monotonic()
        except OSError:
            pass
        time.sleep(0.005)
    raise SystemExit("sink never synced")


def bench_latency(core, kubeconfig: str, changes: int, tmp: Path) -> None:
    import kubernetes

    node = new_node(core)
    fdir = tmp / "lat"
    fdir.mkdir()
    write(fdir, "bench", {f"{F}/seq": "0"})
    proc, port = start_sink(kubeconfig, node, fdir)
    try:
        wait_synced(port)
        seen: dict[str, float] = {}
        stop = threading.Event()

        def watch() -> None:
            w = kubernetes.watch.Watch()
            rv = core.read_node(node).metadata.resource_version
            while not stop.is_set():
                for ev in w.stream(
                    core.list_node,
                    field_selector=f"metadata.name={node}",
                    resource_version=rv,
                    timeout_seconds=5,
                ):
                    obj = ev["object"]
                    rv = obj.metadata.resource_version
                    v = (obj.metadata.labels or {}).get(f"{F}/seq")
                    if v is not None and v not in seen:
                        seen[v] = time.monotonic()
                    if stop.is_set():
                        w.stop()
                        break

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        time.sleep(0.5)
        sent: dict[str, float] = {}
        for i in range(1, changes + 1):
            sent[str(i)] = time.monotonic()
            write(fdir, "bench", {f"{F}/seq": str(i)})
            deadline = time.monotonic() + 5
            while str(i) not in seen and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(0.05)
        stop.set()
        lat = [(seen[k] - sent[k]) * 1000 for k in sent if k in seen]
        print(f"change -> label visible (watch), {len(lat)}/{changes} changes:")
        print(
            f"  median {statistics.median(lat):.0f} ms   p90 {percentile(lat, 0.90):.0f} ms   "
            f"p99 {percentile(lat, 0.99):.0f} ms   max {max(lat):.0f} ms  "
            "(includes the 100 ms debounce quiet window)"
        )
        m = metrics(port)
        patches = m.get('edgefd_sink_api_writes_total{resource="nodes",verb="PATCH"}', 0)
        print(f"  node PATCHes sent: {patches:.0f}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


def bench_idle(core, kubeconfig: str, seconds: float, tmp: Path) -> None:
    for resync in ("3600s", "10s"):  # the default, and a short one that shows up in a minute
        node = new_node(core)
        fdir = tmp / f"idle-{resync}"
        fdir.mkdir()
        write(fdir, "usb-scan", {f"{F}/usb-{i}": "true" for i in range(20)})
        proc, port = start_sink(kubeconfig, node, fdir, "--resync-interval", resync)
        try:
            wait_synced(port)
            time.sleep(1)
            m0 = metrics(port)
            time.sleep(seconds)
            m1 = metrics(port)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
        req = total(m1, "edgefd_sink_api_requests_total") - total(
            m0, "edgefd_sink_api_requests_total"
        )
        wr = total(m1, "edgefd_sink_api_writes_total") - total(m0, "edgefd_sink_api_writes_total")
        scale = 3600 / seconds
        print(
            f"idle, resync {resync}: {req:.0f} requests / {wr:.0f} writes in {seconds:.0f} s "
            f"-> {req * scale:.0f} requests, {wr * scale:.0f} writes per hour "
            f"(expected {3600 / float(resync[:-1]):.0f} resync GETs per hour, plus a watch "
            "renewal every 30-60 min)"
        )


def bench_footprint(core, kubeconfig: str, tmp: Path) -> None:
    node = new_node(core)
    fdir = tmp / "rss"
    fdir.mkdir()
    write(fdir, "usb-scan", {f"{F}/usb-{i}": "true" for i in range(50)})
    t0 = time.monotonic()
    proc, port = start_sink(kubeconfig, node, fdir)
    try:
        t1 = wait_synced(port)
        time.sleep(1)
        rss = rss_kib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    print(f"start-up to first successful sync (50 labels): {(t1 - t0) * 1000:.0f} ms")
    print(f"resident memory of the running sink: {rss / 1024:.1f} MiB")

    def run_time(code: str) -> float:
        best = 1e9
        for _ in range(3):
            s = time.monotonic()
            subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
            best = min(best, time.monotonic() - s)
        return best * 1000

    bare = run_time("pass")
    cli = run_time("import edgefd.feature_sink.cli")
    k8s = run_time("import kubernetes.client, kubernetes.config")
    full = run_time(
        "import edgefd.feature_sink.cli, edgefd.feature_sink.nodeapi, kubernetes.config"
    )
    print(
        f"import times (best of 3, incl. {bare:.0f} ms interpreter start): feature_sink.cli "
        f"{cli - bare:.0f} ms, kubernetes.client+config {k8s - bare:.0f} ms, everything "
        f"{full - bare:.0f} ms"
    )
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import kubernetes.client"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stderr
    cum = [int(line.split("|")[1]) for line in out.splitlines() if line.endswith("| kubernetes")]
    if cum:
        print(f"python -X importtime: kubernetes cumulative {cum[-1] / 1000:.0f} ms")


def new_node(core) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    return name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--changes", type=int, default=200)
    ap.add_argument("--idle-seconds", type=float, default=60)
    args = ap.parse_args()

    import kubernetes.client as k8s

    from tests.peers.apiserver import KubeAPIServer

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        apiserver = KubeAPIServer(tmp / "apiserver").start()
        try:
            core = k8s.CoreV1Api(apiserver.admin_api())
            kubeconfig = str(apiserver.kubeconfig)
            bench_footprint(core, kubeconfig, tmp)
            bench_latency(core, kubeconfig, args.changes, tmp)
            bench_idle(core, kubeconfig, args.idle_seconds, tmp)
        finally:
            apiserver.stop()


if __name__ == "__main__":
    main()
