"""Benchmark the device plugin as deployed: a subprocess on a fixture host root.

Prints: Allocate latency (median, p99) over the plugin's unix socket, with only the kubelet's
ListAndWatch stream open and again with 50 more streams held open by other clients (each stream
once held a worker thread, and a few starved Allocate); hot-plug-to-ListAndWatch
latency (device directory removed/added under the root -> the stream's next message);
resident memory; CPU used while idle over a window (no busy polling expected).

Usage: .venv/bin/python benchmarks/bench_devplugin.py [--allocs 2000] [--streams 50] [--plugs 20]
           [--idle 20]
"""

from __future__ import annotations

import argparse
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measure import cpu_seconds, percentile, rss_kib  # noqa: E402

from edgefd.devplugin.api import deviceplugin_pb2 as pb  # noqa: E402
from edgefd.devplugin.api import deviceplugin_pb2_grpc as pb_grpc  # noqa: E402
from edgefd.devplugin.v1beta1.resource import socket_name  # noqa: E402
from tests.devplugin.kubelet import FakeKubelet  # noqa: E402
from tests.fixturegen import HostBuilder, build_host  # noqa: E402

NCS2 = "edgefd.io/ncs2"

# holds N ListAndWatch streams open on a socket; prints "open" once each has its device list
HOLD_STREAMS = """
import sys, time
from pathlib import Path
from tests.devplugin.kubelet import OpenStreams
streams = OpenStreams(Path(sys.argv[1]), int(sys.argv[2]))
deadline = time.monotonic() + 10
while not streams.all_got([("ncs2-1-1-1", "Healthy")]) and time.monotonic() < deadline:
    time.sleep(0.05)
print("open" if streams.all_got([("ncs2-1-1-1", "Healthy")]) else "failed", flush=True)
time.sleep(3600)
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--allocs", type=int, default=2000)
    ap.add_argument("--streams", type=int, default=50)
    ap.add_argument("--plugs", type=int, default=20)
    ap.add_argument("--idle", type=float, default=20.0)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-dp-"))
    host = build_host("rpi4-coral", tmp / "host", devicetree=False)
    pdir = tmp / "dp"
    pdir.mkdir()
    kubelet = FakeKubelet(pdir)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgefd.devplugin",
            "--host-root",
            str(host),
            "--plugin-dir",
            str(pdir),
            "--listen",
            "",
        ],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while kubelet.last(NCS2) is None:
            if time.monotonic() > deadline:
                raise SystemExit("the plugin did not register")
            time.sleep(0.05)
        ch = grpc.insecure_channel("unix:" + str(pdir / socket_name(NCS2)))
        stub = pb_grpc.DevicePluginStub(ch)

        # Allocate latency
        req = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=["ncs2-1-1-1"])]
        )
        for _ in range(50):
            stub.Allocate(req)

        def allocate_latency(what: str) -> None:
            lat = []
            for _ in range(args.allocs):
                t = time.perf_counter()
                stub.Allocate(req, timeout=10)
                lat.append((time.perf_counter() - t) * 1000)
            print(
                f"allocate ({what}): n={args.allocs} median={statistics.median(lat):.3f} ms "
                f"p99={percentile(lat, 0.99):.3f} ms max={max(lat):.3f} ms"
            )

        allocate_latency("the kubelet's stream only")
        # the other clients live in their own process, so their threads do not share this
        # one's interpreter lock with the calls being timed
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_STREAMS, str(pdir / socket_name(NCS2)), str(args.streams)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            if holder.stdout is None or holder.stdout.readline().strip() != "open":
                raise SystemExit(f"{args.streams} streams were not all served")
            allocate_latency(f"{args.streams} more streams open")
        finally:
            holder.kill()
            holder.wait()

        # hot-plug -> ListAndWatch
        msgs: queue.Queue[tuple[float, str]] = queue.Queue()

        def watch() -> None:
            try:
                for m in stub.ListAndWatch(pb.Empty()):
                    msgs.put((time.monotonic(), m.devices[0].health if m.devices else ""))
            except grpc.RpcError:
                pass

        threading.Thread(target=watch, daemon=True).start()
        msgs.get(timeout=5)
        hb = HostBuilder(host)
        plug = []
        for i in range(args.plugs):
            t0 = time.monotonic()
            if i % 2 == 0:
                hb.remove_usb("1-1.1")
                want = "Unhealthy"
            else:
                hb.add_usb({"port": "1-1.1", "vendor": "03e7", "product": "2485"})
                want = "Healthy"
            while True:
                ts, health = msgs.get(timeout=10)
                if health == want:
                    plug.append((ts - t0) * 1000)
                    break
            time.sleep(0.3)
        print(
            f"hotplug->ListAndWatch: n={len(plug)} median={statistics.median(plug):.0f} ms "
            f"p99={percentile(plug, 0.99):.0f} ms max={max(plug):.0f} ms"
        )

        # idle: resident memory and CPU
        time.sleep(1.0)
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(args.idle)
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        print(f"rss: {rss_kib(proc.pid) / 1024:.1f} MiB")
        print(
            f"idle cpu: {(c1 - c0) * 1000:.0f} ms over {t1 - t0:.0f} s "
            f"({100 * (c1 - c0) / (t1 - t0):.2f}% of one core; fixture root: inotify, 10 s rescans)"
        )
        ch.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
        kubelet.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
