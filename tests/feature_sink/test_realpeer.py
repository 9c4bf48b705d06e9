"""feature-sink end to end against a real kube-apiserver (tests/peers harness): the scenarios
an operator lives through (labels applied and removed, unowned labels untouched, refused
labels reported, conflicts, hand edits, a burst of changes, the removal grace, restarts, kill
-9, the API server down and back, --once and --dry-run exit codes, a stream, nodefeature mode,
a least-privilege token under the admission policy), each across every module of the sink.

The sink runs as a subprocess (`python -m edgefd.feature_sink`) with short intervals; the tests
look at the Node through the admin client and at the sink through its /metrics endpoint.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid

import pytest

from edgefd.core.notices import CONFIG_RELOAD_FAILED, NoticeBoard
from edgefd.feature_sink.notices import BURST
from edgefd.feature_sink.ownership import ANNOTATION
from tests.feature_sink.peer import (
    ROOT,
    SINK_SA,
    F,
    run_sink,
    wait_for,
    write,
)

pytestmark = pytest.mark.realpeer


def test_labels_applied_unowned_untouched_stale_removed(cluster, sinks, fdir):
    node = cluster.new_node({"example.com/team": "edge", f"{F}/manual": "x"})
    write(fdir, "usb-scan", {f"{F}/usb-fe_1a6e_089a.present": "true", f"{F}/old": "1"})
    write(fdir, "pci-scan", {f"{F}/pci-0302_10de.present": "true"})
    s = sinks(node, fdir)
    wait_for(lambda: cluster.labels(node).get(f"{F}/old") == "1", what="labels applied")
    labels = cluster.labels(node)
    assert labels[f"{F}/usb-fe_1a6e_089a.present"] == "true"
    assert labels[f"{F}/pci-0302_10de.present"] == "true"
    own = cluster.ownership(node)
    assert own.producers == {
        "usb-scan": {f"{F}/usb-fe_1a6e_089a.present", f"{F}/old"},
        "pci-scan": {f"{F}/pci-0302_10de.present"},
    }
    # the producer's file no longer lists a label: it goes; unowned labels stay
    write(fdir, "usb-scan", {f"{F}/usb-fe_1a6e_089a.present": "true"})
    wait_for(lambda: f"{F}/old" not in cluster.labels(node), what="stale label removed")
    labels = cluster.labels(node)
    assert labels["example.com/team"] == "edge" and labels[f"{F}/manual"] == "x"
    assert labels["kubernetes.io/hostname"] == node
    assert s.metric("edgefd_sink_owned_labels") == 2
    assert s.stop() == 0
    # SIGTERM removed nothing
    assert f"{F}/pci-0302_10de.present" in cluster.labels(node)


def test_rejected_labels_refused_reported_once_as_event(cluster, sinks, fdir):
    node = cluster.new_node()
    (fdir / "dt-labeller").write_text(
        "beta.devicetree.org/brcm-bcm2711=1\n"
        "node-role.kubernetes.io/control-plane=\n"
        f"{F}/kernel=4.9.140-tegra+\n"
    )
    s = sinks(node, fdir)
    wait_for(lambda: "beta.devicetree.org/brcm-bcm2711" in cluster.labels(node))
    s.wait_synced(4, timeout=30)  # several resyncs (every 2 s)
    labels = cluster.labels(node)
    assert "node-role.kubernetes.io/control-plane" not in labels
    assert f"{F}/kernel" not in labels
    evs = wait_for(
        lambda: [e for e in cluster.events(node) if e.reason == "LabelRejected"] or None,
        what="LabelRejected events",
    )
    assert len(evs) == 2, [e.message for e in evs]  # one per refused label, not per resync
    msgs = " ".join(e.message for e in evs)
    assert "dt-labeller:2" in msgs and "never writable" in msgs and "dt-labeller:3" in msgs
    assert all(e.type == "Warning" and (e.count or 1) == 1 for e in evs)
    assert s.metric("edgefd_sink_rejected_labels") == 2
    assert "refused" in s.tail()


def notice_dirs(tmp_path, *writers):
    """The sink's --notice-dir with a directory per writer, as the pod mounts them."""
    root = tmp_path / "notices"
    for w in writers:
        (root / w).mkdir(parents=True)
    return root


def test_another_tools_notice_is_a_warning_event_once_and_again_after_it_clears(
    cluster, sinks, fdir, tmp_path
):
    """Issue 32 item 1: a tool with no right to post Events (devplugin, the scanners) leaves
    its failed reload as a notice in its own directory; the sink posts it on its Node once
    (not at every resync), naming the writer by that directory, and a recurrence after it
    cleared again."""
    node = cluster.new_node()
    notices = notice_dirs(tmp_path, "bus-scan", "devplugin")
    (fdir / "usb-scan").write_text("feature.node.kubernetes.io/usb-fe_1a6e_089a.present=true\n")
    s = sinks(node, fdir, "--notice-dir", str(notices))
    s.wait_synced(1, timeout=30)
    board = NoticeBoard(notices / "devplugin", "devplugin")
    board.post(CONFIG_RELOAD_FAILED, "configuration reload failed: c.yaml:2:3: bad; kept")

    def reload_events():
        return [e for e in cluster.events(node) if e.reason == CONFIG_RELOAD_FAILED] or None

    (ev,) = wait_for(reload_events, what="the notice's Event")  # the directory is watched
    assert ev.type == "Warning" and ev.source.component == "feature-sink"
    assert ev.message == (
        'edgefd\'s devplugin left this notice: "configuration reload failed: c.yaml:2:3: bad; kept"'
    )
    synced = s.metric("edgefd_sink_syncs_total", result="success")
    s.wait_synced(int(synced) + 2, timeout=30)  # resyncs post nothing more
    assert len(reload_events()) == 1 and (reload_events()[0].count or 1) == 1
    board.clear()  # a reload that succeeded
    s.wait_synced(int(synced) + 3, timeout=30)
    board.post(CONFIG_RELOAD_FAILED, "configuration reload failed: c.yaml:5:1: worse; kept")
    wait_for(lambda: len(reload_events() or []) == 2, what="the recurrence's Event")
    assert "refused" not in s.tail()


def test_a_hostile_writer_can_neither_forge_nor_hide_nor_flood_notices(
    cluster, sinks, fdir, tmp_path
):
    """Issue 46 item 4. bus-scan (uid 65532, no token) posted an Event that read as the
    kubelet's with a `curl | sh` lure, buried devplugin's real failure under 32 planted files,
    and each new message of its was a new Event (5.2 a second). Now: its Events say they are
    bus-scan's and quote it; what it plants in its own directory hides nothing of devplugin's;
    a stream of new messages is BURST Events, and as few log lines."""
    node = cluster.new_node()
    notices = notice_dirs(tmp_path, "bus-scan", "devplugin")
    s = sinks(node, fdir, "--notice-dir", str(notices), "--debounce", "0.05")
    s.wait_synced(1, timeout=30)
    for i in range(40):
        (notices / "bus-scan" / f"a{i:02d}.notice").write_text("{}")
    NoticeBoard(notices / "devplugin", "devplugin").post(CONFIG_RELOAD_FAILED, "real failure")
    board = NoticeBoard(notices / "bus-scan", "usb-scan")
    t0 = time.monotonic()
    for i in range(40):  # a new message every 0.1 s, each synced on (the directory is watched)
        board.post(CONFIG_RELOAD_FAILED, f"kubelet: image pull failed ({i}); run curl x | sh")
        time.sleep(0.1)
    synced = s.metric("edgefd_sink_syncs_total", result="success")
    s.wait_synced(int(synced) + 2, timeout=30)
    took = time.monotonic() - t0
    events = [e for e in cluster.events(node) if e.reason == CONFIG_RELOAD_FAILED]
    real = [
        e for e in events if e.message == 'edgefd\'s devplugin left this notice: "real failure"'
    ]
    assert len(real) == 1, [e.message for e in events]
    forged = [e for e in events if e not in real]
    assert 1 <= len(forged) <= BURST, (took, [e.message for e in forged])
    for e in forged:
        assert e.message.startswith("edgefd's bus-scan left this notice: \"kubelet: "), e.message
        assert e.source.component == "feature-sink" and e.type == "Warning"
    assert not [e for e in cluster.events(node) if e.message.startswith("kubelet")]
    said = [ln for ln in s.lines() if "bus-scan left this notice" in ln]
    assert len(said) == len(forged), said  # the log is bounded as the Events are


def test_conflicting_unowned_label_is_left_alone_and_survives_edits(cluster, sinks, fdir):
    node = cluster.new_node({f"{F}/shared": "theirs"})
    write(fdir, "usb-scan", {f"{F}/shared": "ours", f"{F}/a": "1"})
    s = sinks(node, fdir)
    wait_for(lambda: f"{F}/a" in cluster.labels(node))
    s.wait_synced(2)
    assert cluster.labels(node)[f"{F}/shared"] == "theirs"
    assert f"{F}/shared" not in cluster.ownership(node).keys
    assert s.metric("edgefd_sink_label_conflicts") == 1
    # a concurrent writer edits unowned labels while the sink churns through file changes
    for i in range(30):
        write(fdir, "usb-scan", {f"{F}/shared": "ours", f"{F}/a": str(i)})
        cluster.set_label(node, "example.com/manual", str(i))
        time.sleep(0.02)
    wait_for(lambda: cluster.labels(node).get(f"{F}/a") == "29")
    s.wait_synced(int(s.metric("edgefd_sink_syncs_total", result="success")) + 1)
    labels = cluster.labels(node)
    assert labels["example.com/manual"] == "29"
    assert labels[f"{F}/shared"] == "theirs"


def test_hand_edit_of_owned_label_is_repaired_on_resync(cluster, sinks, fdir):
    node = cluster.new_node()
    write(fdir, "pci-scan", {f"{F}/pci-0302_10de.present": "true"})
    sinks(node, fdir)
    wait_for(lambda: f"{F}/pci-0302_10de.present" in cluster.labels(node))
    cluster.set_label(node, f"{F}/pci-0302_10de.present", "false")
    wait_for(lambda: cluster.labels(node)[f"{F}/pci-0302_10de.present"] == "true", 10)
    cluster.set_label(node, f"{F}/pci-0302_10de.present", None)
    wait_for(lambda: cluster.labels(node).get(f"{F}/pci-0302_10de.present") == "true", 10)


def test_burst_of_1000_changes_bounded_writes(cluster, sinks, fdir):
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/n": "start"})
    s = sinks(node, fdir, "--resync-interval", "1h")
    wait_for(lambda: cluster.labels(node).get(f"{F}/n") == "start")
    before = s.metric("edgefd_sink_api_writes_total", resource="nodes", verb="PATCH")
    server_before = cluster.node_patches_total()
    t0 = time.monotonic()
    for i in range(1000):
        write(fdir, f"p{i % 20}", {f"{F}/n{i % 20}": str(i)})
    write(fdir, "usb-scan", {f"{F}/n": "end"})
    # (a bound of its own: on a loaded machine 1000 file writes and their syncs take seconds)
    wait_for(lambda: cluster.labels(node).get(f"{F}/n") == "end", 30)
    # the sink is busy from the first change until the last one is applied: on a loaded
    # machine it applies the burst after the files were written, so the window ends there
    busy = time.monotonic() - t0
    time.sleep(1)
    writes = s.metric("edgefd_sink_api_writes_total", resource="nodes", verb="PATCH") - before
    server_writes = cluster.node_patches_total() - server_before
    # one write per 500 ms latency cap while busy, plus the trailing one (a write per change
    # would be a thousand)
    bound = busy / 0.5 + 3
    assert 1 <= writes <= bound, (writes, busy)
    assert server_writes >= writes  # the server saw them (and nothing hidden from our count)
    assert server_writes <= bound + 2
    labels = cluster.labels(node)
    assert all(labels[f"{F}/n{k}"] == str(980 + k) for k in range(20))


def test_removal_grace_period(cluster, sinks, fdir):
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    write(fdir, "pci-scan", {f"{F}/pci": "true"})
    sinks(node, fdir, "--removal-grace", "3s")
    wait_for(lambda: f"{F}/usb" in cluster.labels(node))
    (fdir / "usb-scan").unlink()
    gone_at = time.monotonic()
    wait_for(lambda: "usb-scan" in cluster.ownership(node).missing, 5, "missing clock recorded")
    time.sleep(1.5)
    assert f"{F}/usb" in cluster.labels(node)  # kept while the producer is away
    wait_for(lambda: f"{F}/usb" not in cluster.labels(node), 10, "removal after grace")
    assert time.monotonic() - gone_at >= 2.9
    assert cluster.labels(node)[f"{F}/pci"] == "true"
    assert "usb-scan" not in cluster.ownership(node).producers


def test_producer_back_within_grace_keeps_label_without_flap(cluster, sinks, fdir):
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    sinks(node, fdir, "--removal-grace", "30s")
    wait_for(lambda: f"{F}/usb" in cluster.labels(node))
    (fdir / "usb-scan").unlink()
    wait_for(lambda: "usb-scan" in cluster.ownership(node).missing)
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    wait_for(lambda: not cluster.ownership(node).missing)
    assert cluster.labels(node)[f"{F}/usb"] == "true"


def test_restart_does_not_flap_labels(cluster, sinks, fdir):
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    write(fdir, "pci-scan", {f"{F}/pci": "true"})
    s = sinks(node, fdir)
    wait_for(lambda: f"{F}/pci" in cluster.labels(node))
    s.wait_synced(2)
    assert s.stop() == 0
    rv = cluster.node(node).metadata.resource_version
    labels = cluster.labels(node)
    # restart with one producer's file missing (its init container has not rewritten it yet)
    (fdir / "usb-scan").unlink()
    s2 = sinks(node, fdir, "--removal-grace", "1h")
    s2.wait_synced(3)
    after = cluster.node(node)
    assert after.metadata.labels == labels
    # exactly one write: recording when the producer went missing; no label changed
    assert s2.metric("edgefd_sink_api_writes_total", resource="nodes", verb="PATCH") == 1
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    wait_for(lambda: not cluster.ownership(node).missing)
    assert s2.stop() == 0
    rv = cluster.node(node).metadata.resource_version
    s3 = sinks(node, fdir)
    s3.wait_synced(3)
    assert cluster.node(node).metadata.resource_version == rv  # no write at all
    assert s3.metric("edgefd_sink_api_writes_total", resource="nodes", verb="PATCH") == 0


def test_api_down_at_start_then_up_converges(cluster, sinks, fdir, kube_apiserver):
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    kube_apiserver.stop_apiserver()
    try:
        s = sinks(node, fdir)
        wait_for(
            lambda: s.metric("edgefd_sink_sync_failures_total", reason="unreachable") >= 2,
            20,
            "failed syncs while the API is down",
        )
        assert s.proc.poll() is None
    finally:
        kube_apiserver.start_apiserver()
    wait_for(lambda: cluster.labels(node).get(f"{F}/usb") == "true", 30, "convergence")
    assert s.proc.poll() is None


def test_api_restart_mid_run_converges_without_losing_labels(cluster, sinks, fdir, kube_apiserver):
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    s = sinks(node, fdir)
    wait_for(lambda: f"{F}/usb" in cluster.labels(node))
    kube_apiserver.stop_apiserver()
    try:
        write(fdir, "pci-scan", {f"{F}/pci": "true"})  # a change while the API is down
        wait_for(lambda: s.metric("edgefd_sink_sync_failures_total", reason="unreachable") >= 1, 20)
    finally:
        kube_apiserver.start_apiserver()
    wait_for(lambda: f"{F}/pci" in cluster.labels(node), 30, "change applied after restart")
    assert cluster.labels(node)[f"{F}/usb"] == "true"
    assert s.proc.poll() is None
    wait_for(lambda: _get(s.port, "/readyz")[0] == 200, 10, "ready again")


def _get(port: int, path: str) -> tuple[int, str]:
    import urllib.error

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_kill_9_during_syncs_leaves_consistent_state(cluster, sinks, fdir):
    node = cluster.new_node()
    for round_ in range(6):
        labels = {f"{F}/k{i}": str(round_) for i in range(round_ * 10, round_ * 10 + 60)}
        write(fdir, "usb-scan", labels)
        s = sinks(node, fdir)
        time.sleep(0.9 + 0.15 * round_)  # interpreter start-up ~0.8 s: kill around the sync
        s.stop(signal.SIGKILL)
        # the patch is atomic: the annotation and the labels always agree
        own = cluster.ownership(node)
        on_node = {k for k in cluster.labels(node) if k.startswith(F)}
        assert on_node == set(own.keys), round_
    s = sinks(node, fdir)
    wait_for(
        lambda: {k: v for k, v in cluster.labels(node).items() if k.startswith(F)} == labels,
        20,
        "converged after the kills",
    )


def test_once_exit_codes(cluster, fdir, kube_apiserver):
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    common = ["--kubeconfig", cluster.kubeconfig, "--features-dir", str(fdir), "--api-timeout", "3"]
    ok = run_sink("--once", "--node-name", node, *common)
    assert ok.returncode == 0, ok.stderr
    assert cluster.labels(node)[f"{F}/usb"] == "true"
    missing = run_sink("--once", "--node-name", "no-such-node-" + uuid.uuid4().hex[:6], *common)
    assert missing.returncode == 1, missing.stderr
    assert b"not found" in missing.stderr
    kube_apiserver.stop_apiserver()
    try:
        down = run_sink("--once", "--node-name", node, *common)
    finally:
        kube_apiserver.start_apiserver()
    assert down.returncode == 5, down.stderr


def test_dry_run_against_live_node_and_with_api_down(cluster, fdir, kube_apiserver):
    node = cluster.new_node({f"{F}/manual": "x"})
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    rv = cluster.node(node).metadata.resource_version
    common = ["--kubeconfig", cluster.kubeconfig, "--features-dir", str(fdir), "--api-timeout", "3"]
    p = run_sink("--dry-run", "-o", "json", "--node-name", node, *common)
    assert p.returncode == 0, p.stderr
    ops = json.loads(p.stdout)
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": rv}
    assert {"op": "add", "path": f"/metadata/labels/{F}~1usb", "value": "true"} in ops
    assert cluster.node(node).metadata.resource_version == rv  # nothing written
    # the printed patch is exactly what the API server would accept
    cluster.core.patch_node(node, ops, _content_type="application/json-patch+json")
    assert cluster.labels(node)[f"{F}/usb"] == "true"
    assert f"{F}/usb" in cluster.ownership(node).keys
    again = run_sink("--dry-run", "-o", "json", "--node-name", node, *common)
    assert json.loads(again.stdout) == [] and b"no changes" in again.stderr
    kube_apiserver.stop_apiserver()
    try:
        down = run_sink("--dry-run", "--node-name", node, *common)
    finally:
        kube_apiserver.start_apiserver()
    assert down.returncode == 0, down.stderr
    assert b"Node with no labels" in down.stderr
    assert down.stdout.decode().split() == ["add", f"{F}/usb=true"]


def test_features_from_stdin(cluster, fdir):
    node = cluster.new_node()
    write(fdir, "pci-scan", {f"{F}/pci": "true"})
    common = ["--kubeconfig", cluster.kubeconfig, "--node-name", node, "--api-timeout", "3"]
    assert run_sink("--once", "--features-dir", str(fdir), *common).returncode == 0
    stream = f"{F}/usb-fe_1a6e_089a.present=true\n".encode()
    p = run_sink("--once", "--features", "-", *common, stdin=stream)
    assert p.returncode == 0, p.stderr
    labels = cluster.labels(node)
    assert labels[f"{F}/usb-fe_1a6e_089a.present"] == "true"
    assert labels[f"{F}/pci"] == "true"  # the stream is one producer; it removes nobody else's
    assert cluster.ownership(node).producers["stdin"] == {f"{F}/usb-fe_1a6e_089a.present"}


def test_nodefeature_mode(cluster, fdir, nodefeature_crd, kube_apiserver):
    import kubernetes.client as k8s

    custom = k8s.CustomObjectsApi(kube_apiserver.admin_api())
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true", f"{F}/old": "1"})
    (fdir / "bad").write_text("node-role.kubernetes.io/x=\n")
    common = [
        "--kubeconfig", cluster.kubeconfig, "--node-name", node, "--features-dir", str(fdir),
        "--mode", "nodefeature", "--namespace", "default", "--api-timeout", "3",
    ]  # fmt: skip

    def get() -> dict:
        return custom.get_namespaced_custom_object(
            "nfd.k8s-sigs.io", "v1alpha1", "default", "nodefeatures", node
        )

    p = run_sink("--once", *common)
    assert p.returncode == 0, p.stderr
    obj = get()
    assert obj["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] == node
    assert obj["spec"]["labels"] == {f"{F}/usb": "true", f"{F}/old": "1"}
    assert f"{F}/usb" not in cluster.labels(node)  # the Node itself is nfd-master's business
    rv = obj["metadata"]["resourceVersion"]
    assert run_sink("--once", *common).returncode == 0
    assert get()["metadata"]["resourceVersion"] == rv  # nothing changed: no write
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    assert run_sink("--once", *common).returncode == 0
    assert get()["spec"]["labels"] == {f"{F}/usb": "true"}
    # an object of that name the sink did not create is never overwritten
    other = cluster.new_node()
    custom.create_namespaced_custom_object(
        "nfd.k8s-sigs.io", "v1alpha1", "default", "nodefeatures",
        {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
         "metadata": {"name": other}, "spec": {"labels": {"a/b": "c"}}},
    )  # fmt: skip
    common[3] = other
    refused = run_sink("--once", *common)
    assert refused.returncode == 1 and b"not created by feature-sink" in refused.stderr


def test_least_privilege_token_with_repo_rbac_and_admission_policy(cluster, fdir, kube_apiserver):
    """The sink works with exactly the rights k8s/rbac.yaml grants, under the node-restriction
    admission policy of k8s/admission-policy.yaml, using a pod-bound token."""
    import kubernetes.utils
    import yaml

    api = kube_apiserver.admin_api()
    kube_apiserver.ensure_service_account("edgefd", SINK_SA)
    for manifest in ("rbac.yaml", "admission-policy.yaml"):
        for doc in yaml.safe_load_all((ROOT / "k8s" / manifest).read_text()):
            if not doc or doc.get("kind") in ("Namespace", "ServiceAccount"):
                continue
            try:
                kubernetes.utils.create_from_dict(api, doc)
            except kubernetes.utils.FailToCreateError as e:
                if any(getattr(x, "status", None) != 409 for x in e.api_exceptions):
                    raise
    node = cluster.new_node({"example.com/keep": "1"})
    other = cluster.new_node()
    token = kube_apiserver.mint_pod_token("edgefd", SINK_SA, f"edgefd-{node}", node)
    kc = kube_apiserver.kubeconfig_for_token(token)
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    (fdir / "dt").write_text("node-role.kubernetes.io/worker=\n")
    common = ["--kubeconfig", kc, "--features-dir", str(fdir), "--api-timeout", "5"]

    def once(name: str) -> subprocess.CompletedProcess:
        return run_sink("--once", "--node-name", name, *common)

    # The same token cannot label another node: refused (exit 1, not retried as unreachable).
    # The API server loads a new policy within seconds; until then a fresh node is labelled.
    def denied_on_fresh_node() -> tuple[str, subprocess.CompletedProcess] | None:
        other = cluster.new_node()
        r = once(other)
        return (other, r) if r.returncode == 1 else None

    other, denied = wait_for(denied_on_fresh_node, 30, "policy denial")
    assert b"403" in denied.stderr and b"may not modify Node" in denied.stderr, denied.stderr
    assert f"{F}/usb" not in cluster.labels(other)
    # its own node: labels applied through the policy, Event posted with the events Role
    p = once(node)
    assert p.returncode == 0, p.stderr
    assert cluster.labels(node)[f"{F}/usb"] == "true"
    assert cluster.labels(node)["example.com/keep"] == "1"
    assert any(e.reason == "LabelRejected" for e in cluster.events(node))
    # and later changes (replace, remove, annotation rewrite) pass it too
    write(fdir, "usb-scan", {f"{F}/usb": "false", f"{F}/new": "1"})
    assert once(node).returncode == 0
    write(fdir, "usb-scan", {f"{F}/new": "1"})
    assert once(node).returncode == 0
    labels = cluster.labels(node)
    assert f"{F}/usb" not in labels and labels[f"{F}/new"] == "1"

    # Forged claims on the user's labels (issue 22, items 4 and 13): keys without a namespace,
    # which the policy forbids the token to touch, and a foreign namespace, which it allows.
    # Trusted, they would make every sync fail with 403 (the whole patch refused) or remove
    # the user's label; dropped, the sync succeeds and both stay.
    theirs = {"team": "a", "zone": "b", "team.example.com/owner": "alice"}
    cluster.core.patch_node(node, {"metadata": {"labels": theirs}})
    own = json.loads(cluster.node(node).metadata.annotations[ANNOTATION])
    own["producers"]["usb-scan"] = sorted([*own["producers"]["usb-scan"], *theirs])
    cluster.core.patch_node(node, {"metadata": {"annotations": {ANNOTATION: json.dumps(own)}}})
    for _ in range(2):  # and again: no sync fails, none needs to write
        p = once(node)
        assert p.returncode == 0, p.stderr
        assert b"claim dropped" in p.stderr or _ == 1
    labels = cluster.labels(node)
    assert theirs.items() <= labels.items() and labels[f"{F}/new"] == "1"
    assert not set(theirs) & cluster.ownership(node).keys
