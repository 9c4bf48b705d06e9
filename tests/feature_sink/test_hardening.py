"""Issue 11 against the real kube-apiserver: what the sink must never do, tried as an attacker
and as a clumsy operator would (the sink runs as a subprocess, as in test_realpeer.py)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from edgefd.feature_sink.ownership import ANNOTATION, decode
from tests.feature_sink.peer import Cluster, run_sink, wait_for, write
from tests.feature_sink.test_budget import published_size

pytestmark = pytest.mark.realpeer

F = "feature.node.kubernetes.io"
SECRET = "s3cr3t"


def once(cluster: Cluster, node: str, fdir: Path, *extra: str) -> Any:
    return run_sink(
        "--once",
        "--kubeconfig",
        cluster.kubeconfig,
        "--node-name",
        node,
        "--features-dir",
        str(fdir),
        "--api-timeout",
        "5",
        *extra,
    )


def messages(cluster: Cluster, node: str, reason: str | None = None) -> list[str]:
    return [e.message for e in cluster.events(node) if reason is None or e.reason == reason]


# -- item 3: the node name never leaves its URL segment ---------------------------------------


def test_node_name_cannot_reach_another_object(cluster, fdir, monkeypatch):
    core = cluster.core
    victim = f"victim-{uuid.uuid4().hex[:8]}"
    core.create_namespaced_config_map("default", {"metadata": {"name": victim}, "data": {}})
    write(fdir, "usb-scan", {f"{F}/usb": "true"})

    def versions() -> tuple[str, str]:
        ns = core.read_namespace("kube-system").metadata
        cm = core.read_namespaced_config_map(victim, "default").metadata
        return ns.resource_version, cm.resource_version

    before = versions()
    for name in ("../namespaces/kube-system", f"../namespaces/default/configmaps/{victim}"):
        p = once(cluster, name, fdir)
        assert p.returncode == 2, p.stderr
        assert b"is not a valid Node name" in p.stderr
    # below the command line too: every URL segment is escaped, whatever reaches the client
    from edgefd.feature_sink import nodeapi

    api = nodeapi.connect(cluster.kubeconfig, 5)
    ops = [{"op": "add", "path": "/metadata/labels", "value": {f"{F}/usb": "true"}}]
    for name in ("../namespaces/kube-system", f"../namespaces/default/configmaps/{victim}"):
        with pytest.raises(nodeapi.ApiNotFound):
            api.patch_node(name, ops)
        with pytest.raises(nodeapi.ApiNotFound):
            api.get_node(name)
    with pytest.raises(nodeapi.EdgefdError):
        api.patch_node("..", ops)
    body = {"metadata": {"name": victim}, "data": {"hijacked": "1"}}
    with pytest.raises(nodeapi.EdgefdError):  # a PUT that, unescaped, lands on the ConfigMap
        api.replace_nodefeature("../../../../api/v1/namespaces/default/configmaps", body)
    assert versions() == before
    # and were the escaping ever lost, what is read back must still be that Node: the sync
    # reads before it writes, so it stops there
    monkeypatch.setattr(nodeapi, "quote", lambda segment: segment)
    with pytest.raises(nodeapi.ApiRefused, match="not Node"):
        api.get_node(f"../namespaces/default/configmaps/{victim}")
    assert versions() == before
    assert f"{F}/usb" not in (core.read_namespace("kube-system").metadata.labels or {})


# -- item 2: a features.d file's content is never published ------------------------------------


def test_symlinks_fifos_and_refused_lines_never_reach_events_or_logs(cluster, fdir, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text(f"team.example.com/owner={SECRET}-value\n")
    (fdir / "leak").symlink_to(secret)
    os.mkfifo(fdir / "pipe")
    (fdir / "bad").write_text(
        f"root:$6${SECRET}Hash/xyz:19000:0:99999:7:::\n"
        f"example.com/token=eyJ{SECRET}+/==\n"
        f"node-role.kubernetes.io/{SECRET}=\n"
        f"# +{SECRET}-directive\n"
        f"# +expiry-time={SECRET}\n"
        f"{F}/good=1\n"
    )
    write(fdir, "other", {f"{F}/good": f"{SECRET}-override"})  # an override names lines only
    node = cluster.new_node()
    p = once(cluster, node, fdir)  # default log level, as in a pod
    assert p.returncode == 0, p.stderr
    labels = cluster.labels(node)
    assert "team.example.com/owner" not in labels
    assert labels[f"{F}/good"] == f"{SECRET}-override"  # a valid label is published, as asked
    stderr = p.stderr.decode()
    events = messages(cluster, node)
    assert (
        "leak: is a symlink; not read" in events and "pipe: not a regular file; not read" in events
    )
    assert any(m.startswith("bad:1: label refused: key ") for m in events)
    assert any(m.startswith("bad:3: label refused: namespace node-role.") for m in events)
    for text in [stderr, *events]:
        assert SECRET not in text, text
    assert "bad:4: unknown directive" in stderr and "bad:5: expiry-time is not" in stderr


def test_events_per_sync_are_bounded(cluster, fdir):
    (fdir / "junk").write_text("".join(f"bad key {i}\n" for i in range(14)))
    node = cluster.new_node()
    assert once(cluster, node, fdir).returncode == 0
    assert len(messages(cluster, node, "LabelRejected")) == 10
    assert once(cluster, node, fdir).returncode == 0  # the rest at the next sync, none twice
    got = messages(cluster, node, "LabelRejected")
    assert len(got) == 14 and len(set(got)) == 14


# -- item 1: ownership claims are vetted ----------------------------------------------------


def test_forged_ownership_claims_are_dropped_never_acted_on(cluster, fdir):
    theirs = {"node-role.kubernetes.io/control-plane": "", "team.example.com/owner": "alice"}
    node = cluster.new_node(theirs)
    forged = json.dumps(
        {"v": 1, "producers": {"usb-scan": ["kubernetes.io/hostname", *theirs, f"{F}/mine"]}}
    )
    cluster.core.patch_node(
        node, {"metadata": {"annotations": {ANNOTATION: forged}, "labels": {f"{F}/mine": "1"}}}
    )
    write(fdir, "usb-scan", {f"{F}/usb": "true"})  # lists none of the claimed keys
    p = once(cluster, node, fdir, "--deny-namespace", "team.example.com")
    assert p.returncode == 0, p.stderr
    labels = cluster.labels(node)
    assert labels["kubernetes.io/hostname"] == node
    assert {k: labels[k] for k in theirs} == theirs
    assert f"{F}/mine" not in labels and labels[f"{F}/usb"] == "true"  # its own: removed, added
    assert cluster.ownership(node).producers == {"usb-scan": {f"{F}/usb"}}
    dropped = " ".join(messages(cluster, node, "OwnershipClaimDropped"))
    assert "kubernetes.io/hostname" in dropped and "never writable" in dropped
    assert "denied by configuration (team.example.com)" in dropped


def test_an_untrusted_annotation_blocks_every_write_until_removed(cluster, fdir):
    node = cluster.new_node({f"{F}/usb": "old"})
    cluster.core.patch_node(
        node, {"metadata": {"annotations": {ANNOTATION: '{"v":2,"producers":{}}'}}}
    )
    write(fdir, "usb-scan", {f"{F}/usb": "new", f"{F}/pci": "true"})
    rv = cluster.node(node).metadata.resource_version
    p = once(cluster, node, fdir)
    assert p.returncode == 1, p.stderr
    assert b"no supported format version" in p.stderr and b"writes nothing" in p.stderr
    assert cluster.node(node).metadata.resource_version == rv  # not even the annotation
    assert messages(cluster, node, "OwnershipUntrusted")
    dry = run_sink(
        "--dry-run",
        "--kubeconfig",
        cluster.kubeconfig,
        "--node-name",
        node,
        "--features-dir",
        str(fdir),
    )
    assert dry.returncode == 1 and dry.stdout == b""
    # a person removes it: the sink starts over, adopting nothing it would overwrite
    cluster.core.patch_node(node, {"metadata": {"annotations": {ANNOTATION: None}}})
    assert once(cluster, node, fdir).returncode == 0
    labels = cluster.labels(node)
    assert labels[f"{F}/usb"] == "old" and labels[f"{F}/pci"] == "true"


# -- item 6: a budget instead of one 422 for everybody --------------------------------------


def test_producers_over_the_budget_are_refused_the_others_still_land(cluster, fdir):
    for j in range(5):  # each file under 64 KiB; their keys alone are over 256 KiB together
        text = "".join(f"{F}/p{j}-k{i:05d}-padding-padding=1\n" for i in range(1000))
        assert len(text) < 65536
        (fdir / f"p{j}").write_text(text)
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    node = cluster.new_node()
    p = once(cluster, node, fdir)
    assert p.returncode == 0, p.stderr
    labels = cluster.labels(node)
    assert labels[f"{F}/usb"] == "true"
    applied = {j for j in range(5) if f"{F}/p{j}-k00000-padding-padding" in labels}
    assert len(applied) == 1
    over = messages(cluster, node, "LabelBudgetExceeded")
    assert len(over) == 4 and all("--label-budget" in m for m in over)
    own = decode(cluster.node(node).metadata.annotations[ANNOTATION])
    assert published_size(labels, own) <= 128 * 1024


# -- item 10: in-place rewrites, a vanishing directory -------------------------------------


def test_a_producer_rewriting_its_file_in_place_does_not_make_labels_flap(cluster, sinks, fdir):
    labels = {f"{F}/k{i:02d}": "true" for i in range(20)}
    text = "".join(f"{k}={v}\n" for k, v in labels.items())
    path = fdir / "usb-scan"
    path.write_text(text)
    node = cluster.new_node()
    s = sinks(node, fdir)  # default --settle 1s, --debounce 100ms
    wait_for(lambda: len([k for k in cluster.labels(node) if k.startswith(F)]) == 20)
    stop = threading.Event()
    seen: list[dict[str, str]] = []

    def sample() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):
                seen.append({k: v for k, v in cluster.labels(node).items() if k.startswith(F)})
            time.sleep(0.03)

    sampler = threading.Thread(target=sample)
    sampler.start()
    syncs_before = s.metric("edgefd_sink_syncs_total", result="success")
    try:
        for _ in range(8):  # truncate, pause, half, pause, all but a cut last line, the rest
            with open(path, "r+") as f:
                f.truncate(0)
                f.flush()
                time.sleep(0.2)
                f.write(text[: len(text) // 2])
                f.flush()
                time.sleep(0.2)
                f.write(text[len(text) // 2 : -3])
                f.flush()
                time.sleep(0.2)
                f.write(text[-3:])
            time.sleep(0.3)
    finally:
        stop.set()
        sampler.join()
    assert s.metric("edgefd_sink_syncs_total", result="success") > syncs_before + 8  # it read
    assert len(seen) > 50
    flaps = [x for x in seen if x != labels]
    assert not flaps, flaps[:3]
    assert s.metric("edgefd_sink_api_writes_total", resource="nodes", verb="PATCH") == 1


def test_features_dir_vanishing_at_run_time_keeps_every_label(cluster, sinks, fdir):
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    node = cluster.new_node()
    s = sinks(node, fdir, "--removal-grace", "1s")
    wait_for(lambda: cluster.labels(node).get(f"{F}/usb") == "true")
    away = fdir.with_name("features.d.away")
    fdir.rename(away)
    wait_for(
        lambda: s.metric("edgefd_sink_sync_failures_total", reason="features_dir") >= 2,
        20,
        "failed syncs while the directory is gone",
    )
    assert cluster.labels(node).get(f"{F}/usb") == "true"  # longer than the grace: kept
    assert not cluster.ownership(node).missing  # and no producer counted as gone
    assert "is gone (unmounted?); every label is kept" in s.tail()
    away.rename(fdir)
    write(fdir, "usb-scan", {f"{F}/usb": "true", f"{F}/back": "1"})
    wait_for(lambda: cluster.labels(node).get(f"{F}/back") == "1", 30, "synced again")
    assert s.proc.poll() is None


def test_a_file_left_empty_is_read_again_once_quiet(cluster, sinks, fdir):
    """The settle rule only delays a removal: the sink comes back by itself (not at the next
    resync, an hour away here) and applies the file as it is."""
    path = fdir / "usb-scan"
    path.write_text(f"{F}/usb=true\n")
    node = cluster.new_node()
    sinks(node, fdir, "--resync-interval", "1h")
    wait_for(lambda: cluster.labels(node).get(f"{F}/usb") == "true")
    with open(path, "r+") as f:
        f.truncate(0)  # a producer that truncates and then dies
    gone_at = time.monotonic()
    wait_for(lambda: f"{F}/usb" not in cluster.labels(node), 15, "removal once quiet")
    assert time.monotonic() - gone_at >= 0.9  # not before --settle (1 s)
