"""What the node should carry (desired.py): features.d read and merged with NFD's rules, every
label checked, each file a producer (the host's own features.d too, as `host:<file>`), a file
caught mid-rewrite *settling* instead of losing its labels, a vanished directory a fault rather
than "every producer's file is gone". Pure units first (in memory, or a tmp_path features.d,
the plan applied with the JSON Patch test applier); then the same rules held by the running
sink against the real kube-apiserver."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from edgefd.feature_sink.desired import (
    FeaturesDirGone,
    check_producer_name,
    read_directory,
    read_stream,
)
from edgefd.feature_sink.namespaces import sink_policy
from edgefd.feature_sink.patch import NodeView
from edgefd.feature_sink.sync import plan_node
from tests.feature_sink.jsonpatch import apply_patch
from tests.feature_sink.peer import wait_for, write
from tests.feature_sink.states import NOW, RULES, F, desired_of

# -- merging the files ---------------------------------------------------------------------


def test_desired_later_file_wins_and_owns_the_key():
    d = desired_of({"a-usb": f"{F}/x=1\n{F}/a=yes\n", "b-pci": f"{F}/x=2\n"})
    assert d.producers == {"a-usb": {f"{F}/a": "yes"}, "b-pci": {f"{F}/x": "2"}}
    assert d.labels == {f"{F}/a": "yes", f"{F}/x": "2"}
    assert any("overrides" in w for w in d.warnings)


def test_desired_rejects_invalid_and_privileged_with_file_and_line():
    d = desired_of(
        {
            "dt": "# header\nbeta.devicetree.org/nvidia-p3449-0000-b00+p3448=1\n"
            "node-role.kubernetes.io/control-plane=\n"
            f"{F}/kernel=4.9.140-tegra+\n"
            "kubernetes.io/arch=arm64\n"
            "example.com/other=1\n"
            "edgefd.io/ok=1\n"
        }
    )
    assert d.labels == {"edgefd.io/ok": "1"}
    by_key = {r.key: r for r in d.rejected}
    assert by_key["beta.devicetree.org/nvidia-p3449-0000-b00+p3448"].source == "dt:2"
    assert by_key["node-role.kubernetes.io/control-plane"].source == "dt:3"
    assert "never writable" in by_key["node-role.kubernetes.io/control-plane"].reason
    assert "'+'" in by_key[f"{F}/kernel"].reason
    assert "reserved" in by_key["kubernetes.io/arch"].reason
    assert "--allow-namespace" in by_key["example.com/other"].reason


def test_desired_skipped_file_is_not_present(tmp_path: Path):
    (tmp_path / "big").write_bytes(b"a/b=1\n" * 20000)
    (tmp_path / "ok").write_text(f"{F}/ok=1\n")
    (tmp_path / ".ok.tmp").write_text(f"{F}/tmp=1\n")
    d = read_directory(tmp_path)
    assert d.present == {"ok"}
    assert d.labels == {f"{F}/ok": "1"}
    assert any("65536" in w for w in d.warnings)


def test_stream_is_one_non_authoritative_producer():
    d = read_stream(f"{F}/usb-fe_1a6e_089a.present=true\n".encode())
    assert d.producers == {"stdin": {f"{F}/usb-fe_1a6e_089a.present": "true"}}
    assert not d.authoritative


def test_unqualified_keys_get_nfd_namespace_before_merge():
    d = desired_of(
        {"a": "gpu=1\n", "b": f"{F}/gpu=2\nvendor.example/x\n"},
        sink_policy(allowed=["vendor.example"]),
    )
    assert d.labels == {f"{F}/gpu": "2", "vendor.example/x": "true"}
    assert d.producers["a"] == {}


# -- producer names ------------------------------------------------------------------------


def test_producer_names_follow_the_file_name_rules():
    assert check_producer_name("usb-scan") is None
    assert check_producer_name("stdin") is None
    assert check_producer_name("ünïcode name") is None
    for bad in ("", ".x", "a/b", "a\x00b", "a\tb", "a\udcffb", "é" * 128):
        assert check_producer_name(bad) is not None, bad


def test_a_features_file_with_an_unusable_name_is_not_read():
    d = desired_of({"ok": f"{F}/a=1\n", "bad\x1bname": f"{F}/b=1\n"})
    assert d.labels == {f"{F}/a": "1"} and d.present == {"ok"}
    assert d.warnings == (
        "'bad\\x1bname': file name contains control characters or bytes "
        "that are not UTF-8; not read",
    )


# -- settling: a producer rewriting its file in place (issue 11, item 10) ---------------------

T0 = NOW


def at(path: Path, when: datetime) -> None:
    os.utime(path, (when.timestamp(), when.timestamp()))


def sync(n: NodeView, d, now: datetime) -> NodeView:
    plan = plan_node(n, d, now, RULES)
    if not plan.write:
        return n
    doc = {"metadata": {"labels": n.labels, "annotations": n.annotations, "resourceVersion": "1"}}
    md = apply_patch(doc, plan.write)["metadata"]
    return NodeView(n.name, md.get("labels"), md.get("annotations"), "1")


@pytest.fixture
def applied(tmp_path: Path) -> tuple[Path, NodeView]:
    f = tmp_path / "usb-scan"
    f.write_text(f"{F}/a=true\n{F}/b=true\n")
    at(f, T0 - timedelta(minutes=1))
    n = sync(NodeView("n1", {}, {}, "1"), read_directory(tmp_path, now=T0, settle=1.0), T0)
    assert n.labels == {f"{F}/a": "true", f"{F}/b": "true"}
    return f, n


def test_an_empty_read_right_after_a_change_removes_nothing_until_quiet(applied, tmp_path):
    f, n = applied
    f.write_text("")  # truncated: the producer is about to write
    at(f, T0)
    d = read_directory(tmp_path, now=T0 + timedelta(seconds=0.2), settle=1.0)
    assert d.settling == {"usb-scan"}
    assert d.recheck_at == T0 + timedelta(seconds=1)
    assert sync(n, d, T0).labels == n.labels
    # still empty once quiet: the producer really has nothing to say
    quiet = read_directory(tmp_path, now=T0 + timedelta(seconds=1), settle=1.0)
    assert not quiet.settling and quiet.recheck_at is None
    assert sync(n, quiet, T0).labels == {}


def test_an_unterminated_last_line_is_not_taken_while_fresh(applied, tmp_path):
    f, n = applied
    f.write_text(f"{F}/a=true\n{F}/b=tr")  # caught mid-write
    at(f, T0)
    d = read_directory(tmp_path, now=T0, settle=1.0)
    assert sync(n, d, T0).labels == n.labels  # no b=tr, no removal
    # a file that ends without a newline for good is read as NFD reads it
    later = read_directory(tmp_path, now=T0 + timedelta(seconds=5), settle=1.0)
    assert sync(n, later, T0).labels == {f"{F}/a": "true", f"{F}/b": "tr"}


def test_a_fresh_file_still_adds_and_changes_at_once(applied, tmp_path):
    f, n = applied
    f.write_text(f"{F}/a=false\n{F}/c=true\n")
    at(f, T0)
    after = sync(n, read_directory(tmp_path, now=T0, settle=1.0), T0)
    assert after.labels == {f"{F}/a": "false", f"{F}/b": "true", f"{F}/c": "true"}
    quiet = sync(after, read_directory(tmp_path, now=T0 + timedelta(seconds=2), settle=1.0), T0)
    assert quiet.labels == {f"{F}/a": "false", f"{F}/c": "true"}


def test_settle_zero_is_the_old_behaviour(applied, tmp_path):
    f, n = applied
    f.write_text("")
    at(f, T0)
    assert sync(n, read_directory(tmp_path, now=T0, settle=0.0), T0).labels == {}


def test_a_vanished_directory_is_a_fault_not_an_empty_directory(tmp_path):
    with pytest.raises(FeaturesDirGone, match="every label is kept"):
        read_directory(tmp_path / "gone")
    (tmp_path / "file").write_text("")
    with pytest.raises(FeaturesDirGone, match="no longer a directory"):
        read_directory(tmp_path / "file")


# -- the host's own features.d (--host-features-dir, issue 25 item 10) -----------------------

LATER = datetime.now(UTC) + timedelta(seconds=5)  # every file has settled


def dirs(tmp_path: Path) -> tuple[Path, Path]:
    pod, host = tmp_path / "pod", tmp_path / "host"
    pod.mkdir()
    host.mkdir()
    return pod, host


def test_host_files_are_producers_of_their_own(tmp_path: Path) -> None:
    pod, host = dirs(tmp_path)
    write(pod, "usb-scan", {f"{F}/usb": "true", f"{F}/both": "pod"})
    write(host, "usb-scan", {f"{F}/rack": "r1"})  # the same file name: another producer
    write(host, "zz", {f"{F}/both": "host"})
    d = read_directory(pod, now=LATER, host=host)
    assert d.producers == {
        "usb-scan": {f"{F}/usb": "true"},
        "host:usb-scan": {f"{F}/rack": "r1"},
        "host:zz": {f"{F}/both": "host"},  # read after the pod's files: NFD's later file wins
    }
    assert d.present == {"usb-scan", "host:usb-scan", "host:zz"}
    assert any("host:zz:1: overrides the value set at usb-scan:2" in w for w in d.warnings)
    # without the option the host's files are not read at all
    assert set(read_directory(pod, now=LATER).producers) == {"usb-scan"}


def test_the_pod_directory_cannot_pose_as_the_host(tmp_path: Path) -> None:
    pod, host = dirs(tmp_path)
    write(pod, "host:zz", {f"{F}/forged": "true"})
    d = read_directory(pod, now=LATER, host=host)
    assert d.producers == {}
    assert d.warnings == ("host:zz: names starting with 'host:' are the host's files; not read",)


def test_host_files_are_read_as_carefully_as_the_pods(tmp_path: Path) -> None:
    pod, host = dirs(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text(f"{F}/leaked=yes\n")
    os.symlink(secret, host / "leak")
    write(host, "bad", {"node-role.kubernetes.io/master": "", f"{F}/ok": "1"})
    d = read_directory(pod, now=LATER, host=host)
    assert d.producers == {"host:bad": {f"{F}/ok": "1"}}
    assert "host:leak: is a symlink; not read" in d.warnings
    assert [(r.source, r.key) for r in d.rejected] == [
        ("host:bad:1", "node-role.kubernetes.io/master")
    ]


# -- the same rules held by the running sink, against the real API server --------------------


@pytest.mark.realpeer
def test_host_files_labels_applied_owned_kept_then_removed(cluster, sinks, tmp_path) -> None:
    """A host file's labels are applied, owned as `host:<file>`, kept for the grace when the
    file goes, then removed; a symlink planted there is reported and never followed."""
    pod, host = dirs(tmp_path)
    write(pod, "usb-scan", {f"{F}/usb": "true"})
    write(host, "rack", {f"{F}/rack": "r1"})
    os.symlink(tmp_path / "nowhere", host / "leak")
    node = cluster.new_node()
    s = sinks(node, pod, "--host-features-dir", str(host), "--removal-grace", "2s")
    wait_for(lambda: cluster.labels(node).get(f"{F}/rack") == "r1", 20, "host label")
    own = cluster.ownership(node)
    assert own.producers == {"usb-scan": {f"{F}/usb"}, "host:rack": {f"{F}/rack"}}
    reasons = {e.reason for e in cluster.events(node)}
    assert "FeatureFileProblem" in reasons  # the symlink, reported as for the pod's files
    (host / "rack").unlink()
    wait_for(lambda: f"{F}/rack" not in cluster.labels(node), 20, "removal after grace")
    assert cluster.labels(node)[f"{F}/usb"] == "true"
    assert "host:rack's file is gone" in s.tail()


@pytest.mark.realpeer
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


@pytest.mark.realpeer
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
