"""Checks 1-3 and the figures of check 9: the DaemonSet as the runtime runs it, the labels it
writes through the admission policy, and the resources it advertises.

Privileges are read from what the runtime applied (the OCI spec runc was given) and, for the
running containers, from the kernel (``/proc/<pid>/status`` and ``mountinfo``), never from the
manifest, which is only what was asked for.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from tests.helpers import untimed
from tests.peers.pki import decode_jwt

from .context import (
    NAMESPACE,
    OWNERSHIP,
    SPLIT_DS,
    Run,
    keeps_running,
    spec_containers,
    statuses_of,
)
from .kube import Api, KubeError, wait_for

TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
OTHER_NODE = "e2e-other-node"
DAEMONSETS = ("edgefd", SPLIT_DS)  # the one pod's, and split-identity's second
# capability -> its bit in /proc/<pid>/status (linux/capability.h): device-keeper's (the one
# container that adds any, k8s/pod-template.yaml)
CAP_BITS = {"CHOWN": 0, "SYS_PTRACE": 19, "SYS_ADMIN": 21, "MKNOD": 27}


def _manifest_containers(run: Run) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in spec_containers(run.daemonset["spec"]["template"]["spec"])}


def _proc_view(proc: Path) -> dict[str, Any]:
    """What the kernel says about a container's main process (`proc`: its /proc directory
    as the machine reaches it)."""
    status = dict(
        line.split(":", 1) for line in (proc / "status").read_text().splitlines() if ":" in line
    )
    root_opts = next(
        line.split()[5]
        for line in (proc / "mountinfo").read_text().splitlines()
        if line.split()[4] == "/"
    )
    return {
        "uid": int(status["Uid"].split()[1]),  # effective
        "cap_eff": status["CapEff"].strip(),
        "cap_bnd": status["CapBnd"].strip(),
        "no_new_privs": status["NoNewPrivs"].strip() == "1",
        "seccomp_mode": int(status["Seccomp"]),
        "root_read_only": "ro" in root_opts.split(","),
    }


def _runtime_view(info: dict[str, Any]) -> dict[str, Any]:
    spec = info["info"]["runtimeSpec"]
    caps = spec["process"].get("capabilities") or {}
    return {
        "uid": spec["process"]["user"]["uid"],
        "capabilities": sorted({c for s in caps.values() for c in s}),
        "no_new_privs": bool(spec["process"].get("noNewPrivileges")),
        "seccomp": bool(spec.get("linux", {}).get("seccomp")),
        "root_read_only": bool(spec.get("root", {}).get("readonly")),
    }


def _privilege_problems(name: str, want: dict[str, Any], view: dict[str, Any]) -> list[str]:
    """The container runs as its securityContext says: its uid, and no capability but those
    it adds (device-keeper's four; none for the rest)."""
    problems = []
    added = sorted((want.get("capabilities") or {}).get("add") or [])
    mask = sum(1 << CAP_BITS[c] for c in added)
    if view["uid"] != want["runAsUser"]:
        problems.append(f"{name}: runs as uid {view['uid']}, manifest says {want['runAsUser']}")
    if view["capabilities"] != sorted(f"CAP_{c}" for c in added):
        problems.append(f"{name}: capabilities {view['capabilities']}, manifest adds {added}")
    if not (view["root_read_only"] and view["no_new_privs"] and view["seccomp"]):
        problems.append(f"{name}: read-only root / no_new_privs / seccomp not all applied")
    kernel = view.get("kernel")
    if kernel:
        if kernel["uid"] != want["runAsUser"] or int(kernel["cap_eff"], 16) != mask:
            problems.append(
                f"{name}: the kernel says uid {kernel['uid']}, CapEff {kernel['cap_eff']}"
            )
        if int(kernel["cap_bnd"], 16) != mask or not kernel["no_new_privs"]:
            problems.append(f"{name}: bounding set or no_new_privs not as asked")
        if kernel["seccomp_mode"] != 2 or not kernel["root_read_only"]:
            problems.append(f"{name}: seccomp or read-only root missing in the kernel")
    return problems


def _state_problems(run: Run, pod: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """Init containers exited 0, sidecars (init containers with restartPolicy Always) and
    containers running and ready."""
    spec = run.daemonset["spec"]["template"]["spec"]
    statuses = {s["name"]: s for s in statuses_of(pod)}
    states, problems = {}, []
    for c in spec_containers(spec):
        s = statuses.get(c["name"], {})
        if keeps_running(spec, c):
            ok = bool(s.get("ready")) and "running" in s.get("state", {})
            states[c["name"]] = "running, ready" if ok else f"not ready: {s.get('state')}"
        else:
            code = s.get("state", {}).get("terminated", {}).get("exitCode")
            ok, states[c["name"]] = code == 0, f"exited {code}"
        if not ok:
            problems.append(f"{c['name']}: {states[c['name']]}")
    return states, problems


def check_daemonset(run: Run) -> dict[str, Any]:
    """1. DaemonSet Ready; init containers exited 0; sidecars and containers running, each
    as the manifest says."""

    def ready() -> dict[str, Any] | None:
        ds = run.api.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/edgefd")
        st = ds.get("status", {})
        done = (
            st.get("observedGeneration", 0) >= ds["metadata"]["generation"]
            and st.get("desiredNumberScheduled") == 1
            and st.get("numberReady") == 1
            and st.get("updatedNumberScheduled") == 1
        )
        return st if done else None

    _, waited = wait_for("DaemonSet ready", ready, timeout=180, interval=0.2)
    run.figures["ds_create_to_ready_s"] = round(time.monotonic() - run.t_apply, 2)
    pod = run.edgefd_pod()
    run.figures["ds_create_to_container_started_s"] = run.started_since(run.t_apply)
    states, problems = _state_problems(run, pod)
    cri = run.containers_of(pod)
    views: dict[str, Any] = {}
    for name, c in _manifest_containers(run).items():
        if name not in cri:
            problems.append(f"{name}: no container in the runtime")
            continue
        info = run.node.runtime.inspect(cri[name]["id"])
        views[name] = view = _runtime_view(info)
        if cri[name]["state"] == "CONTAINER_RUNNING":
            view["kernel"] = _proc_view(run.node.proc(int(info["info"]["pid"])))
        problems += _privilege_problems(name, c["securityContext"], view)
    return {
        "ok": not problems,
        "problems": problems,
        "waited_s": round(waited, 2),
        "states": states,
        "containers": views,
    }


def check_labels(run: Run) -> dict[str, Any]:
    """2. The Node's labels and ownership annotation, written with the pod-bound token through
    the admission policy, which refuses the same token on another Node."""

    def labelled() -> Any:
        s = run.sampler.first(lambda s: run.expected.items() <= s.labels.items(), run.t_apply)
        return s if s and OWNERSHIP in s.annotations else None

    sample, _ = wait_for("all labels on the Node", labelled, timeout=60, interval=0.1)
    run.figures["ds_create_to_labels_s"] = round(sample.t - run.t_apply, 2)
    node = run.get_node()
    labels = node["metadata"].get("labels", {})
    missing = sorted(k for k, v in run.expected.items() if labels.get(k) != v)
    owned = json.loads(node["metadata"]["annotations"][OWNERSHIP])
    owned_keys = {k for ks in owned.get("producers", {}).values() for k in ks}
    problems = [f"label missing or different: {k}" for k in missing]
    if not set(run.expected) <= owned_keys:
        problems.append(f"not recorded as owned: {sorted(set(run.expected) - owned_keys)}")

    sink = run.containers_of(run.edgefd_pod())["feature-sink"]
    token = run.node.runtime.exec(sink["id"], "cat", TOKEN).strip()
    claims = decode_jwt(token).get("kubernetes.io", {})
    bound = {"pod": claims.get("pod", {}).get("name"), "node": claims.get("node", {}).get("name")}
    if bound["node"] != run.node_name or not bound["pod"]:
        problems.append(f"the sink's token is not bound to its pod and node: {bound}")
    other = {"metadata": {"name": OTHER_NODE, "labels": {"e2e": "other"}}}
    run.api.request("POST", "/api/v1/nodes", other)
    refused = {}
    as_sink = Api(run.cp, token=token)  # the very token the sink uses
    for node_name, key in (
        (OTHER_NODE, "edgefd.io~1e2e"),
        (run.node_name, "node-role.kubernetes.io~1e2e"),
    ):
        patch = [{"op": "add", "path": f"/metadata/labels/{key}", "value": "x"}]
        try:
            as_sink.request(
                "PATCH", f"/api/v1/nodes/{node_name}", patch, "application/json-patch+json"
            )
            refused[node_name] = "ACCEPTED"
            problems.append(f"the sink's token could patch {key} on Node {node_name}")
        except KubeError as e:
            refused[node_name] = str(e).split(": ", 1)[-1][:160]
            if e.status != 403:
                problems.append(f"patch of {node_name}: expected 403, got {e}")
    run.api.request("DELETE", f"/api/v1/nodes/{OTHER_NODE}")
    return {
        "ok": not problems,
        "problems": problems,
        "labels": len(run.expected),
        "token_bound_to": bound,
        "refused": refused,
    }


def check_allocatable(run: Run) -> dict[str, Any]:
    """3. status.allocatable shows every resource the plugin offers on the host tree, as many
    as the tree has devices of it (0 for a resource without one)."""

    want = run.offer.allocatable()
    sample, _ = wait_for(
        "allocatable",
        lambda: run.sampler.first(lambda s: run.allocatable_ok(s.allocatable), run.t_apply),
        timeout=60,
    )
    run.figures["ds_create_to_allocatable_s"] = round(sample.t - run.t_apply, 2)
    node = run.get_node()["status"]["allocatable"]
    alloc = {r: node.get(r, "0") for r in want}
    return {"ok": alloc == want, "allocatable": alloc, "want": want}


def container_memory(run: Run) -> dict[str, float]:
    """Working-set MiB of each running container of edgefd's pod (both pods' with
    split-identity; the kubelet's figure, as the runtime reports it from the container's
    memory cgroup), and their sum as `total`: what the node gives edgefd (issue 33)."""
    ids = {}
    for pod in run.all_edgefd_pods():
        ids.update({c["id"]: name for name, c in run.containers_of(pod).items()})
    stats = run.node.runtime.crictl_json("stats")
    out: dict[str, float] = {}
    for s in stats.get("stats", []):
        name = ids.get(s["attributes"]["id"])
        if name and "memory" in s:  # exited init containers have no stats
            ws = int(s["memory"]["workingSetBytes"]["value"])
            out[name] = round(ws / 2**20, 1)
    if out:
        out["total"] = round(sum(out.values()), 1)
    return out


class MemoryPeaks:
    """The largest working set of each container (and of their sum) seen while the checks
    run: re-plugs, reloads, workloads, DRA claims. Sampled every `interval` seconds by a
    thread of its own; a sample that fails (a container restarting) is skipped."""

    def __init__(self, run: Run, interval: float = 3.0) -> None:
        self._run = run
        self._interval = interval
        self._stop = threading.Event()
        self.peaks: dict[str, float] = {}
        self._thread = threading.Thread(target=self._sample, name="memory-peaks", daemon=True)

    def start(self) -> MemoryPeaks:
        self._thread.start()
        return self

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(timeout=30)
        return dict(sorted(self.peaks.items()))

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                now = container_memory(self._run)
            except Exception:  # a pod between two states: the next sample
                continue
            for name, mib in now.items():
                self.peaks[name] = max(mib, self.peaks.get(name, 0.0))


def edgefd_warnings(events: list[dict[str, Any]], pod_uids: str | set[str], node: str) -> list[str]:
    """The Warning Events about edgefd's pods, one uid or a set (the kubelet's `Unhealthy` for
    a failed probe, `BackOff`, `FailedMount` ...) and those edgefd's own tools posted on its
    Node, one line each. Pure: `events` is what the API listed."""
    out = []
    for e in events:
        if e.get("type") != "Warning":
            continue
        obj = e.get("involvedObject") or {}
        component = e.get("reportingComponent") or (e.get("source") or {}).get("component", "")
        uids = {pod_uids} if isinstance(pod_uids, str) else pod_uids
        on_pod = obj.get("kind") == "Pod" and obj.get("uid") in uids
        by_edgefd = "edgefd" in component or component == "feature-sink"
        on_node = obj.get("kind") == "Node" and obj.get("name") == node and by_edgefd
        ours = on_pod or on_node
        if ours:
            where = f"{obj.get('kind')}/{obj.get('name')}"
            if obj.get("fieldPath"):
                where += f" {obj['fieldPath']}"
            out.append(f"{where}: {e.get('reason')}: {e.get('message')} (x{e.get('count', 1)})")
    return out


def _daemonsets_ready(run: Run) -> bool:
    for name in DAEMONSETS:
        ds = run.api.get_or_none(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{name}")
        st = (ds or {}).get("status", {})
        if ds is not None and st.get("numberReady") != st.get("desiredNumberScheduled"):
            return False
    return True


def check_no_warning_events(run: Run) -> dict[str, Any]:
    """A healthy start of edgefd's pod (both DaemonSets' with split-identity) posts no Warning
    Event (issue 25 item 5): no probe failed (the kubelet records every failure), nothing
    crashed or failed to mount, and the sink reported no problem on the Node. Run it once
    check 1 saw the pod Ready; the kubelet sends Events in batches, so it looks again a few
    seconds later before it concludes."""
    wait_for("edgefd's DaemonSets ready", lambda: _daemonsets_ready(run), timeout=120,
             interval=0.2)  # fmt: skip
    time.sleep(5)
    pods = run.all_edgefd_pods()
    events = []
    for ns in (NAMESPACE, "default"):
        events += run.api.get(f"/api/v1/namespaces/{ns}/events")["items"]
    warnings = edgefd_warnings(events, {p["metadata"]["uid"] for p in pods}, run.node_name)
    # the kubelet's own ConfigMap cache on a node reset under the scenario (edgefd's namespace
    # deleted and made again) can time out once before the volume mounts: the reset's, not
    # edgefd's start; kept in the result, not counted
    kubelet_cache = [w for w in warnings if "failed to sync configmap cache" in w]
    warnings = [w for w in warnings if w not in kubelet_cache]
    names = sorted(p["metadata"]["name"] for p in pods)
    return {"ok": not warnings, "problems": warnings, "pods": names, "events_seen": len(events),
            "kubelet_cache_warnings": kubelet_cache}  # fmt: skip


# the long-running containers and what their start-up line says (core/version.startup_line)
STARTUP = {"bus-scan": "usb-scan: INFO: edgefd ", "feature-sink": "feature-sink: INFO: edgefd ",
           "devplugin": "devplugin: INFO: edgefd "}  # fmt: skip


def check_startup_logs(run: Run) -> dict[str, Any]:
    """At the default level each long-running container's log starts with the line that says
    which build runs, in which mode, with which settings (issue 25 item 1: all four wrote 0
    bytes at start)."""
    problems, first = [], {}
    for container, prefix in STARTUP.items():
        lines = untimed(run.container_log(container)).splitlines()
        first[container] = lines[0][:200] if lines else ""
        if not lines or not lines[0].startswith(prefix) or " starting, mode " not in lines[0]:
            problems.append(f"{container}: no start-up line first: {lines[:2]}")
        bad = [ln for ln in lines if ": DEBUG: " in ln or "Traceback" in ln]
        if bad:
            problems.append(f"{container}: {bad[:3]}")
    return {"ok": not problems, "problems": problems, "first_lines": first}


def check_device_change_logged(run: Run, name: str) -> dict[str, Any]:
    """The re-plug of check 6 is in the default-level logs of the two containers that saw it:
    bus-scan (its labels) and devplugin (its resource), each a line naming the device (that
    it went, or why it cannot be used while it stays: check 6's ``unplugged_reason``)."""
    problems, found = [], {}
    # gone (and back later), or seen only back with another node: a scan that came after
    # the re-plug (a loaded node) sees the re-enumeration, not the absence
    words = ("re-enumerating at", "unplugged from", "gone from", "re-enumerated at")
    if run.facts.get("unplugged_reason"):
        words += (run.facts["unplugged_reason"],)
    for container in ("bus-scan", "devplugin"):
        lines = [ln for ln in run.container_log(container).splitlines() if f"device {name}" in ln]
        gone = [ln for ln in lines if any(w in ln for w in words)]
        found[container] = gone[:2]
        if not gone:
            problems.append(f"{container}: no line says {name} went: {lines[:4]}")
    return {"ok": not problems, "problems": problems, "lines": found}
