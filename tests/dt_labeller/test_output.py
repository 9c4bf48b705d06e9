"""What a dt-labeller run leaves behind (output.py), through the real command: the feature file
with exactly the bytes a dry run prints, left untouched when the labels did not change, and the
JSON inventory (the source, each visited node with its labels or why it was not counted, the
origins of each label, the refused ones, the feature file written or not)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.helpers import feature_files

from .command import RPI4_LABELS, host_with_blob, run, run_bytes


def test_dry_run_prints_exactly_the_bytes_it_would_write(rpi4_blob: bytes, tmp_path: Path) -> None:
    root = host_with_blob(tmp_path / "root", rpi4_blob)
    fd = tmp_path / "fd"
    dry = run_bytes("--dry-run", "--host-root", str(root), "--features-dir", str(fd))
    assert dry.returncode == 0
    assert not fd.exists()
    write = run("--host-root", str(root), "--features-dir", str(fd), "--create-features-dir")
    assert write.returncode == 0
    assert (fd / "dt-labeller").read_bytes() == dry.stdout


def test_unchanged_labels_do_not_rewrite_the_file(rpi4_blob: bytes, tmp_path: Path) -> None:
    root = host_with_blob(tmp_path / "root", rpi4_blob)
    fd = tmp_path / "fd"
    fd.mkdir(exist_ok=True)  # a producer makes no features.d
    assert run("--host-root", str(root), "--features-dir", str(fd)).returncode == 0
    before = os.stat(fd / "dt-labeller")
    os.utime(fd / "dt-labeller", ns=(before.st_atime_ns, before.st_mtime_ns - 10**9))
    before = os.stat(fd / "dt-labeller")
    p = run("--host-root", str(root), "--features-dir", str(fd), "-v")
    assert p.returncode == 0
    assert "unchanged" in p.stderr
    after = os.stat(fd / "dt-labeller")
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert feature_files(fd) == ["dt-labeller"]


def test_json_inventory(rpi4_blob: bytes, tmp_path: Path) -> None:
    dtb = tmp_path / "x.dtb"
    dtb.write_bytes(rpi4_blob)
    fd = tmp_path / "fd"
    fd.mkdir(exist_ok=True)  # a producer makes no features.d
    p = run("-o", "json", "--dtb", str(dtb), "--features-dir", str(fd))
    assert p.returncode == 0
    inv = json.loads(p.stdout)
    assert inv["labels"] == RPI4_LABELS
    assert inv["source"] == {"path": str(dtb), "form": "blob"}
    assert inv["feature_file"] == {"path": str(fd / "dt-labeller"), "written": True}
    visited = {v["path"]: v for v in inv["visited"]}
    assert set(visited) == {"/", "/gpu", *(f"/cpus/cpu@{i}" for i in range(4))}
    assert visited["/gpu"] == {
        "path": "/gpu",
        "compatible": ["brcm,bcm2711-vc5"],
        "status": "okay",
        "counted": True,
        "labels": ["beta.devicetree.org/brcm-bcm2711-vc5"],
    }
    assert inv["origins"]["beta.devicetree.org/arm-cortex-a72"] == [
        f"/cpus/cpu@{i}" for i in range(4)
    ]
    assert inv["rejected"] == []


def test_json_inventory_lists_rejections_and_uncounted_nodes(
    jetson_blob: bytes, tmp_path: Path
) -> None:
    dtb = tmp_path / "j.dtb"
    dtb.write_bytes(jetson_blob)
    inv = json.loads(run("--dry-run", "-o", "json", "--dtb", str(dtb)).stdout)
    (rej,) = inv["rejected"]
    assert rej["node"] == "/"
    assert rej["key"] == "beta.devicetree.org/nvidia-p3449-0000-b00+p3448-0000-b00"
    notes = {v["path"]: v.get("note") for v in inv["visited"] if not v["counted"]}
    assert notes == {
        "/cpus/cpu@3": 'status is "fail"; not counted',
        "/host1x/gpu@57000000": 'status is "disabled"; not counted',
    }


def test_a_write_right_after_another_producers_ends_with_its_trailing_event(
    rpi4_blob: bytes, tmp_path: Path
) -> None:
    """Another producer's file renamed into features.d just before: NFD's tick may swallow
    this write, so dt-labeller sends the trailing event (IN_ATTRIB) before it exits.

    "Just before" is what the directory's mtime says, and a run's start-up on a loaded
    machine can take longer than a tick: the other producer's rename is therefore dated a
    minute ahead (a future mtime counts as recent, edgefd.core.nudge), so the run sees it
    within a tick however long it takes to get there (issue 46 item 9: this test skipped
    itself when the machine was busy)."""
    import select
    import time

    from edgefd.core.publish import STAGING, write_atomic
    from edgefd.runtime.inotify import IN_ATTRIB, Inotify

    root = host_with_blob(tmp_path / "root", rpi4_blob)
    fd = tmp_path / "fd"
    fd.mkdir()
    write_atomic(fd / "usb-scan", b"a.io/x=1\n", staging=fd / STAGING)
    ahead = time.time() + 60
    os.utime(fd, (ahead, ahead))
    with Inotify() as ino:
        ino.add_watch(fd, IN_ATTRIB)
        assert run("--host-root", str(root), "--features-dir", str(fd)).returncode == 0
        ready, _, _ = select.select([ino.fileno()], [], [], 0)  # already there: no waiting
        assert ready and [e.name for e in ino.read()] == ["dt-labeller"]
