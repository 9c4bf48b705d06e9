"""`feature-sink --host-features-dir` (issue 25 item 10): the host's own NFD features.d, read
as well, each file a producer `host:<file>` under the same rules as the pod's producers.

Unit: the producers, the merge order, the reserved prefix, what is refused. Real API server:
a host file's labels are applied, owned as `host:<file>`, kept for the grace when the file
goes, then removed; a symlink planted there is reported and never followed."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from edgefd.feature_sink.desired import read_directory
from tests.feature_sink.peer import F, run_sink, wait_for, write

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


def test_a_missing_host_directory_is_a_usage_error(tmp_path: Path) -> None:
    pod, _ = dirs(tmp_path)
    absent = str(tmp_path / "absent")
    p = run_sink("--dry-run", "--node-name", "n1", "--features-dir", str(pod),
                 "--host-features-dir", absent, "--kubeconfig", "/dev/null")  # fmt: skip
    assert p.returncode == 2
    assert b"--host-features-dir " in p.stderr and b"not an existing directory" in p.stderr


@pytest.mark.realpeer
def test_host_files_labels_applied_owned_kept_then_removed(cluster, sinks, tmp_path) -> None:
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
