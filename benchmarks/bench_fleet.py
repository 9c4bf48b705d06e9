"""What a fleet of feature-sinks costs one API server: N simulated nodes (N real feature-sink
processes, forked from one preloaded parent: see fleet.py) against the harness's real
kube-apiserver + etcd on this machine. A script, not a test.

Prints, per node: idle API requests an hour; a fleet-wide change (every node's feature file
rewritten at once) until every Node shows it (p50/p99/max); drift repair (p50/p99/max, one
node at a time and the whole fleet at once); kube-apiserver and etcd CPU seconds an hour idle
and during the change; sink memory. Then back-pressure (flapping producers, a writer fighting
over a label, the API server's own 429s under a tight priority level), the kubelets' own
traffic on the same Nodes as the yardstick, and the NodeFeature mode with the real nfd-master
as the single writer.

Usage: python3 benchmarks/bench_fleet.py [--nodes 200] [--idle-seconds 120] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet import (
    ROOT,
    Kubelets,
    NodeWatch,
    Sinks,
    Zygote,
    cpu_seconds,
    memory_kib,
    total,
    write_features,
)
from measure import percentile, rss_kib

F = "feature.node.kubernetes.io"
SEQ = f"{F}/bench-seq"
TPU = "edgefd.io/edgetpu.present"
SELECTOR = "bench.edgefd.io/fleet"
KUBELET_ANNOTATIONS = {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}
REPORT: dict[str, Any] = {}


def labels(seq: int) -> dict[str, str]:
    return {
        f"{F}/usb-fe_1a6e_089a.present": "true",
        TPU: "true",
        "edgefd.io/edgetpu.count": "1",
        SEQ: str(seq),
    }


def say(text: str) -> None:
    print(text, flush=True)


def load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def dist(values: list[float], unit: str = "ms", scale: float = 1000.0) -> str:
    if not values:
        return "none"
    v = [x * scale for x in values]
    return (
        f"p50 {statistics.median(v):.0f} {unit}, p99 {percentile(v, 0.99):.0f} {unit}, "
        f"max {max(v):.0f} {unit} (n={len(v)})"
    )


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        from edgefd.kube.client import connect
        from tests.peers.apiserver import KubeAPIServer

        self.args = args
        self.tmp = tmp
        self.n = args.nodes
        self.api = KubeAPIServer(tmp / "apiserver").start(controller_manager=False)
        self.admin = connect(self.api.kubeconfig, 30, qps=1000, burst=1000)
        self.api.ensure_service_account("edgefd", "fleet")
        self.admin.request(
            "POST", "clusterrolebindings",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "bind",
            {"metadata": {"name": "fleet"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "cluster-admin"},
             "subjects": [{"kind": "ServiceAccount", "name": "fleet", "namespace": "edgefd"}]},
            "application/json",
        )  # fmt: skip
        # one service-account token for every sink: not system:masters, so priority and
        # fairness applies to the fleet as it would to real sinks
        token = self.api.mint_token("edgefd", "fleet", expiration_seconds=4 * 3600)
        self.kubeconfig = self.api.kubeconfig_for_token(token)
        self.pool = ThreadPoolExecutor(8)
        self.zygote = Zygote()

    # -- helpers

    def baseline(self, seconds: float) -> None:
        """The API server's and etcd's own CPU a second with the Nodes but no sink (their
        informers, leader loops, compaction): subtracted from every window below."""
        c0, t0 = self.cpu(), time.monotonic()
        time.sleep(seconds)
        c1, el = self.cpu(), time.monotonic() - t0
        self.base = {k: (c1[k] - c0[k]) / el for k in c1}
        say(f"baseline, no sink, {seconds:.0f} s: apiserver {self.base['apiserver']:.3f}, etcd "
            f"{self.base['etcd']:.3f} CPU s/s ({load()})")  # fmt: skip
        REPORT["baseline_cpu_per_s"] = self.base

    def attributable(
        self, c0: dict[str, float], c1: dict[str, float], el: float
    ) -> dict[str, float]:
        """CPU seconds of a window beyond the baseline."""
        return {k: max(0.0, c1[k] - c0[k] - self.base.get(k, 0.0) * el) for k in c1}

    def cpu(self) -> dict[str, float]:
        return {
            "apiserver": cpu_seconds(self.api.apiserver_pid),
            "etcd": cpu_seconds(self.api.etcd_pid),
        }

    def new_nodes(self, prefix: str, n: int) -> list[str]:
        names = [f"{prefix}-{i:04d}" for i in range(n)]

        def create(name: str) -> None:
            body = {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": name, "labels": {SELECTOR: prefix, "kubernetes.io/hostname": name},
                "annotations": KUBELET_ANNOTATIONS}}  # fmt: skip
            self.admin.request("POST", "nodes", "/api/v1/nodes", "create", body, "application/json")

        list(self.pool.map(create, names))
        return names

    def patch_label(self, node: str, key: str, value: str | None) -> None:
        self.admin.request(
            "PATCH", "nodes", f"/api/v1/nodes/{node}", "patch",
            {"metadata": {"labels": {key: value}}}, "application/merge-patch+json",
        )  # fmt: skip

    def sink_requests(self, sinks: Sinks) -> dict[str, float]:
        out: dict[str, float] = {}
        for m in sinks.all_metrics().values():
            for verb in ("GET", "LIST", "WATCH", "PATCH", "PUT", "POST"):
                out[verb] = out.get(verb, 0) + total(
                    m, "edgefd_sink_api_requests_total", f'"{verb}"'
                )
        return out

    def per_hour(self, value: float, seconds: float) -> float:
        return value / self.n * 3600 / seconds

    # -- phases

    def standalone_memory(self) -> None:
        """One sink started on its own, as on a real node."""
        import subprocess

        node = self.new_nodes("solo", 1)[0]
        d = self.tmp / "solo"
        d.mkdir()
        write_features(d, labels(0))
        proc = subprocess.Popen(
            [sys.executable, "-m", "edgefd.feature_sink", "--kubeconfig", self.kubeconfig,
             "--node-name", node, "--features-dir", str(d), "--listen", ""],
            cwd=ROOT, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(8)
        rss = rss_kib(proc.pid)
        proc.terminate()
        proc.wait(20)
        say(f"one sink started on its own: {rss / 1024:.1f} MiB resident (a real node's cost)")
        REPORT["standalone_rss_mib"] = round(rss / 1024, 1)

    def start_fleet(self, nodes: list[str], *extra: str) -> Sinks:
        sinks = Sinks(self.zygote, self.tmp / f"sinks-{nodes[0]}")
        t0 = time.monotonic()
        for i, node in enumerate(nodes):
            sinks.start(node, self.kubeconfig, labels(0), *extra)
            if i % 20 == 19:
                time.sleep(0.5)  # a rollout, not a thundering herd
        seen = self.watch.when(nodes, SEQ, "0", t0, 300)
        say(f"started {len(nodes)} sinks; every Node labelled after {time.monotonic() - t0:.1f} s"
            f" ({len(seen)}/{len(nodes)}), {load()}")  # fmt: skip
        time.sleep(10)
        mem = [memory_kib(p) for p in sinks.pids.values()]
        pss = statistics.mean(m["Pss"] for m in mem) / 1024
        private = statistics.mean(m["Private"] for m in mem) / 1024
        say(f"  sink memory in the fleet (forked, code shared): PSS {pss:.1f} MiB, private "
            f"{private:.1f} MiB per process")  # fmt: skip
        REPORT.setdefault("memory", {})[nodes[0]] = {
            "pss_mib": round(pss, 1),
            "private_mib": round(private, 1),
        }
        return sinks

    def idle(
        self, sinks: Sinks, seconds: float, key: str, extra_pids: dict[str, int] | None = None
    ) -> None:
        pids = dict(extra_pids or {})
        r0, c0 = self.sink_requests(sinks), self.cpu()
        s0 = sum(cpu_seconds(p) for p in sinks.pids.values())
        x0 = {k: cpu_seconds(p) for k, p in pids.items()}
        srv0 = self.server_requests()
        say(f"idle for {seconds:.0f} s ({load()}) ...")
        t0 = time.monotonic()
        time.sleep(seconds)
        el = time.monotonic() - t0
        r1, c1 = self.sink_requests(sinks), self.cpu()
        add = self.attributable(c0, c1, el)
        s1 = sum(cpu_seconds(p) for p in sinks.pids.values())
        srv1 = self.server_requests()
        sent = {k: r1.get(k, 0) - r0.get(k, 0) for k in r1}
        out = {
            "seconds": seconds,
            "sink_requests": sum(sent.values()),
            "server_requests_nodes": srv1 - srv0,
            "requests_per_node_hour": round(self.per_hour(sum(sent.values()), seconds), 3),
            "apiserver_cpu_s_per_node_hour": round(
                self.per_hour(c1["apiserver"] - c0["apiserver"], seconds), 4
            ),
            "etcd_cpu_s_per_node_hour": round(self.per_hour(c1["etcd"] - c0["etcd"], seconds), 4),
            "apiserver_cpu_s_per_node_hour_beyond_baseline": round(
                self.per_hour(add["apiserver"], el), 4
            ),
            "etcd_cpu_s_per_node_hour_beyond_baseline": round(self.per_hour(add["etcd"], el), 4),
            "sink_cpu_s_per_node_hour": round(self.per_hour(s1 - s0, seconds), 3),
        }  # fmt: skip
        for k, p in pids.items():
            out[f"{k}_cpu_s_per_node_hour"] = round(
                self.per_hour(cpu_seconds(p) - x0[k], seconds), 4
            )
        open_watches = sum(
            self.api.metric_sum("apiserver_longrunning_requests", verb="WATCH", resource=r)
            for r in ("nodes", "nodefeatures")
        )
        say(f"  sinks sent {out['sink_requests']:.0f} requests ({sent}); the API server counted "
            f"{out['server_requests_nodes']:.0f} non-watch Node requests; {open_watches:.0f} "
            f"watches on nodes/nodefeatures open; CPU s/node/hour: apiserver "
            f"{out['apiserver_cpu_s_per_node_hour']} "
            f"({out['apiserver_cpu_s_per_node_hour_beyond_baseline']} beyond its baseline), etcd "
            f"{out['etcd_cpu_s_per_node_hour']} "
            f"({out['etcd_cpu_s_per_node_hour_beyond_baseline']}), sink "
            f"{out['sink_cpu_s_per_node_hour']}"
            + "".join(f", {k} {out[f'{k}_cpu_s_per_node_hour']}" for k in pids))  # fmt: skip
        REPORT.setdefault("idle", {})[key] = out

    def server_requests(self) -> float:
        return sum(
            self.api.metric_sum("apiserver_request_total", resource=r, verb=v)
            for r in ("nodes", "nodefeatures")
            for v in ("GET", "LIST", "PATCH", "UPDATE", "POST")
        )

    def fleet_change(self, sinks: Sinks, nodes: list[str], seq: int, key: str,
                     extra_pids: dict[str, int] | None = None,
                     timeout: float = 120) -> list[float]:  # fmt: skip
        r0, c0 = self.sink_requests(sinks), self.cpu()
        x0 = {k: cpu_seconds(p) for k, p in (extra_pids or {}).items()}
        written: dict[str, float] = {}
        t0 = time.monotonic()
        for node in nodes:
            write_features(sinks.fdirs[node], labels(seq))
            written[node] = time.monotonic()
        seen = self.watch.when(nodes, SEQ, str(seq), t0, timeout)
        done = time.monotonic()
        time.sleep(1)
        window = time.monotonic() - t0
        r1, c1 = self.sink_requests(sinks), self.cpu()
        lat = [seen[n] - written[n] for n in seen]
        sent = {k: r1.get(k, 0) - r0.get(k, 0) for k in r1}
        cpu = self.attributable(c0, c1, window)
        cpu.update({k: cpu_seconds(p) - x0[k] for k, p in (extra_pids or {}).items()})
        per = ", ".join(
            f"{k} {v:.2f} s ({v / len(nodes) * 1e3:.1f} ms/node)" for k, v in cpu.items()
        )
        say(f"  change {seq}: {len(seen)}/{len(nodes)} Nodes in {done - t0:.2f} s; {dist(lat)}; "
            f"requests {sent}; CPU beyond the baseline in the {window:.1f} s window: {per}; "
            f"{load()}")  # fmt: skip
        REPORT.setdefault("changes", {}).setdefault(key, []).append({
            "latencies_s": lat, "all_in_s": done - t0, "requests": sent, "cpu_s": cpu,
            "window_s": window})  # fmt: skip
        return lat

    def drift(self, sinks: Sinks, nodes: list[str], fleet_wide: bool) -> list[float]:
        t0 = time.monotonic()
        if fleet_wide:  # `kubectl label nodes --all edgefd.io/edgetpu.present-`
            list(self.pool.map(lambda n: self.patch_label(n, TPU, None), nodes))
        else:
            for n in nodes:
                self.patch_label(n, TPU, None)
                time.sleep(0.1)
        gone = self.watch.when(nodes, TPU, None, t0, 60)
        back = {}
        for n, t in gone.items():
            again = self.watch.when([n], TPU, "true", t, 30)
            if n in again:
                back[n] = again[n] - t
        lat = list(back.values())
        say(f"  drift repair, {'the whole fleet at once' if fleet_wide else 'one node at a time'}: "
            f"{len(back)}/{len(nodes)} repaired; {dist(lat)}")  # fmt: skip
        REPORT.setdefault("drift", {})["fleet" if fleet_wide else "single"] = lat
        return lat

    def rates(self, sinks: Sinks, seconds: float) -> tuple[float, dict[str, float]]:
        """Scrape every sink each second for `seconds`: the most requests any one sink sent
        in one second, and each sink's total over the time."""
        prev = {
            n: total(m, "edgefd_sink_api_requests_total") for n, m in sinks.all_metrics().items()
        }
        first = dict(prev)
        peak = 0.0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.monotonic()
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t)))
            now = {
                n: total(m, "edgefd_sink_api_requests_total")
                for n, m in sinks.all_metrics().items()
            }
            peak = max([peak] + [now[n] - prev.get(n, now[n]) for n in now])
            prev = now
        return peak, {n: prev[n] - first[n] for n in prev}

    def flapping(self, sinks: Sinks, nodes: list[str], rounds: int = 30) -> None:
        """Every producer rewrites its file every 50 ms, `rounds` times, fleet-wide."""
        import threading

        result: dict[str, Any] = {}
        scraper = threading.Thread(
            target=lambda: result.update(zip(("peak", "sent"), self.rates(sinks, 6), strict=True))
        )
        scraper.start()
        for k in range(rounds):
            t = time.monotonic()
            for node in nodes:
                write_features(sinks.fdirs[node], {**labels(1000 + k), "edgefd.io/flap": str(k)})
            time.sleep(max(0.0, 0.05 - (time.monotonic() - t)))
        scraper.join()
        seen = self.watch.when(nodes, SEQ, str(1000 + rounds - 1), 0, 60)
        sent = list(result["sent"].values())
        say(f"  flapping producers ({rounds} rewrites 50 ms apart per node, "
            f"{rounds * len(nodes)} in all, a write each unbounded): requests per sink mean "
            f"{statistics.mean(sent):.1f}, max {max(sent):.0f}; most from one sink in one "
            f"second: {result['peak']:.0f} (limit 5/s, burst 10); final state on "
            f"{len(seen)}/{len(nodes)} Nodes")  # fmt: skip
        REPORT["flapping"] = {
            "mean": statistics.mean(sent),
            "max": max(sent),
            "peak_1s": result["peak"],
        }

    def fight(self, sinks: Sinks, nodes: list[str], seconds: float = 20) -> None:
        """Another writer (a buggy controller) removes an owned label from 20 Nodes within
        milliseconds of every repair."""
        import threading

        nodes = nodes[:20]
        flips = [0]
        stop = threading.Event()

        def adversary() -> None:
            while not stop.is_set():
                todo = [n for n in nodes if self.watch.labels.get(n, {}).get(TPU) == "true"]
                list(self.pool.map(lambda n: self.patch_label(n, TPU, None), todo))
                flips[0] += len(todo)
                time.sleep(0.02)

        holds0 = sum(
            total(m, "edgefd_sink_repair_holds_total") for m in sinks.all_metrics().values()
        )
        threading.Thread(target=adversary, daemon=True).start()
        peak, sent = self.rates(sinks, seconds)
        stop.set()
        sent = {n: sent[n] for n in nodes}
        holds = (
            sum(total(m, "edgefd_sink_repair_holds_total") for m in sinks.all_metrics().values())
            - holds0
        )
        writes = list(sent.values())
        say(f"  a writer fighting over a label on {len(nodes)} Nodes for {seconds:.0f} s: it "
            f"removed it {flips[0]} times; sink requests per node mean "
            f"{statistics.mean(writes):.1f}, max {max(writes):.0f}; "
            f"most from one sink in one second: {peak:.0f}; repairs held back {holds:.0f} "
            "times")  # fmt: skip
        t0 = time.monotonic()
        back = self.watch.when(nodes, TPU, "true", None, 90)
        say(f"  ... the fight over, every Node repaired after {time.monotonic() - t0:.1f} s "
            f"({len(back)}/{len(nodes)})")  # fmt: skip
        REPORT["fight"] = {"flips": flips[0], "mean": statistics.mean(writes), "max": max(writes),
                           "peak_1s": peak, "holds": holds}  # fmt: skip

    def throttled(self, sinks: Sinks, nodes: list[str], seq: int) -> None:
        """The API server's own back-pressure: the fleet's account in a priority level with
        a few seats that rejects the excess (429 + Retry-After), then a fleet-wide change."""
        flow = "/apis/flowcontrol.apiserver.k8s.io/v1"
        self.admin.request("POST", "plc", f"{flow}/prioritylevelconfigurations", "plc", {
            "metadata": {"name": "edgefd-bench"},
            "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": 2, "lendablePercent": 0, "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"}}}}, "application/json")  # fmt: skip
        self.admin.request("POST", "fs", f"{flow}/flowschemas", "fs", {
            "metadata": {"name": "edgefd-bench"},
            "spec": {"priorityLevelConfiguration": {"name": "edgefd-bench"},
                     "matchingPrecedence": 10,
                     "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                         "name": "fleet", "namespace": "edgefd"}}],
                         "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                                            "resources": ["*"], "clusterScope": True,
                                            "namespaces": ["*"]}]}]}},
            "application/json")  # fmt: skip
        time.sleep(3)
        rej0 = self.api.metric_sum(
            "apiserver_flowcontrol_rejected_requests_total", flow_schema="edgefd-bench"
        )
        th0 = sum(
            total(m, "edgefd_sink_api_throttled_total", 'by="server"')
            for m in sinks.all_metrics().values()
        )
        seats = self.api.metric_sum(
            "apiserver_flowcontrol_nominal_limit_seats", priority_level="edgefd-bench"
        )
        lat = self.fleet_change(sinks, nodes, seq, "throttled", timeout=300)
        rej = (
            self.api.metric_sum(
                "apiserver_flowcontrol_rejected_requests_total", flow_schema="edgefd-bench"
            )
            - rej0
        )
        th = (
            sum(
                total(m, "edgefd_sink_api_throttled_total", 'by="server"')
                for m in sinks.all_metrics().values()
            )
            - th0
        )
        say(f"  with the fleet in a priority level of {seats:.0f} seats rejecting the excess: the "
            f"API server answered {rej:.0f} requests with 429, the sinks waited out Retry-After "
            f"{th:.0f} times; {len(lat)}/{len(nodes)} Nodes converged ({dist(lat)})")  # fmt: skip
        REPORT["throttled"] = {"seats": seats, "rejected": rej, "waited": th}
        self.admin.request("DELETE", "fs", f"{flow}/flowschemas/edgefd-bench", "fs")
        self.admin.request(
            "DELETE", "plc", f"{flow}/prioritylevelconfigurations/edgefd-bench", "plc"
        )

    def kubelets(self, sinks: Sinks, nodes: list[str], seconds: float = 60) -> None:
        k = Kubelets(self.admin, nodes)
        k.create()
        r0, c0 = self.sink_requests(sinks), self.cpu()
        say(
            f"the kubelets' own traffic for these {len(nodes)} Nodes for {seconds:.0f} s "
            f"({load()}) ..."
        )
        k.run(seconds)
        r1, c1 = self.sink_requests(sinks), self.cpu()
        el = k.elapsed
        add = self.attributable(c0, c1, el)
        out = {
            "requests_per_node_hour": round(self.per_hour(k.requests, el), 1),
            "apiserver_cpu_s_per_node_hour": round(self.per_hour(add["apiserver"], el), 3),
            "etcd_cpu_s_per_node_hour": round(self.per_hour(add["etcd"], el), 3),
            "sink_requests_meanwhile": sum(r1.values()) - sum(r0.values()),
        }  # fmt: skip
        say(f"  kubelets: {out['requests_per_node_hour']} requests/node/hour (Lease every 10 s, "
            f"status every 5 min); CPU s/node/hour beyond the baseline: apiserver "
            f"{out['apiserver_cpu_s_per_node_hour']},"
            f" etcd {out['etcd_cpu_s_per_node_hour']}; the sinks, watching their Nodes change "
            f"status, sent {out['sink_requests_meanwhile']:.0f} requests meanwhile")  # fmt: skip
        REPORT["kubelets"] = out

    def nodefeature_mode(self, seconds: float) -> None:
        from tests.peers.nfd import NFDMaster, install_nfd_crds

        install_nfd_crds(self.api)
        nodes = self.new_nodes("nf", self.n)
        master_node = self.new_nodes("nfd-master", 1)[0]
        master = NFDMaster(self.api, self.tmp / "nfd-master", master_node).start()
        try:
            sinks = self.start_fleet(nodes, "--mode", "nodefeature", "--namespace", "edgefd")
            pids = {"nfd-master": master.proc.pid}
            self.idle(sinks, seconds, "nodefeature", pids)
            for seq in (1, 2):
                self.fleet_change(sinks, nodes, seq, "nodefeature", pids)
            updates = master.metric("nfd_master_node_updates_total")
            say(f"  nfd-master made {updates:.0f} Node updates in all")
            say(
                "  by construction, idle: a watch renewal every 30-60 min and the hourly resync "
                "GET: about 2.3 requests per sink an hour (none within the idle windows above)"
            )
            REPORT["nfd_master_node_updates"] = updates
            sinks.stop()
        finally:
            master.stop()

    def run(self) -> None:
        say(f"fleet of {self.n} nodes, {os.cpu_count()} cores, {load()}")
        self.watch = NodeWatch(self.admin, SELECTOR).start()
        self.standalone_memory()
        say("== node mode (each sink patches its own Node)")
        nodes = self.new_nodes("fleet", self.n)
        self.baseline(min(60.0, self.args.idle_seconds))
        sinks = self.start_fleet(nodes)
        self.idle(sinks, self.args.idle_seconds, "node")
        for seq in (1, 2, 3):
            self.fleet_change(sinks, nodes, seq, "node")
            time.sleep(3)
        self.drift(sinks, nodes[:50], fleet_wide=False)
        time.sleep(3)
        self.drift(sinks, nodes, fleet_wide=True)
        time.sleep(3)
        self.kubelets(sinks, nodes)
        say("== back-pressure")
        self.flapping(sinks, nodes)
        time.sleep(3)
        self.fight(sinks, nodes)
        time.sleep(3)
        self.throttled(sinks, nodes, 4)
        sinks.stop()
        say("== nodefeature mode (nfd-master the single writer)")
        self.nodefeature_mode(self.args.idle_seconds / 2)
        say(load())

    def close(self) -> None:
        if hasattr(self, "watch"):
            self.watch.stop()
        self.zygote.stop()
        self.api.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--idle-seconds", type=float, default=120)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as d:
        bench = Bench(args, Path(d))
        try:
            bench.run()
        finally:
            bench.close()
    if args.json:
        args.json.write_text(json.dumps(REPORT, indent=1))


if __name__ == "__main__":
    main()
