"""`device-keeper serve --dry-run` (dryrun.py): a one-shot that says what a keeper starting now
would grant and revoke, from devplugin's decisions, the kubelet's answer and the runtime's
containers, and changes nothing; no decisions, or no kubelet, is one line with its code."""

from __future__ import annotations

import json

import pytest

from edgefd.inventory.decisions import Decisions, write

from .peers import peers
from .pods import handout
from .test_cli import _run


@pytest.mark.root
def test_dry_run_says_what_it_would_do_now_and_changes_nothing(
    tmp_path, v2_cgroups, runc_filter, standin, serve
):
    """A one-shot: each device devplugin hands out, caught up as a keeper starting now would:
    a holder given the boot node would be allowed the device's node and lose the boot one;
    nothing is written (cgroup, path, ledger); exit 0."""
    import os

    from .pods import NAME
    from .probe import probe

    cg = v2_cgroups()
    runc_filter(cg)
    made = {"detector": (cg, standin(NAME, "189:4", cgroups=[cg]))}
    kubelet_dir, cri_sock = peers(serve, tmp_path, made)
    write(tmp_path / "decisions.json", Decisions(1.0, (handout(number="c:189:5"),)))
    argv = ["serve", "--dry-run", "--host-root", "/", "--kubelet-dir", str(kubelet_dir),
            "--cri-socket", cri_sock, "--decisions", str(tmp_path / "decisions.json"),
            "--state-dir", str(tmp_path / "state")]  # fmt: skip
    r = _run(*argv)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{NAME} (edgefd.io/coral-usb, DRA node1/{NAME}) c 189:5 at ")
    assert "ns/detector/app (detector): would allow c 189:5, would revoke c 189:4 (v2:" in r.stdout
    [doc] = json.loads(_run(*argv, "-o", "json").stdout)
    assert doc["containers"][0]["revoked"] == ["c 189:4"]
    nodes = [("c", 189, 4, "r"), ("c", 189, 5, "r")]
    assert probe([str(cg / "cgroup.procs")], nodes) == {nodes[0]: True, nodes[1]: False}
    pid = made["detector"][1].pid
    assert os.stat(f"/proc/{pid}/root/dev/edgefd/{NAME}").st_rdev == os.makedev(189, 4)
    assert not (tmp_path / "state").exists()


def test_dry_run_without_decisions_or_a_kubelet_is_one_line(tmp_path):
    base = ["serve", "--dry-run", "--host-root", str(tmp_path)]
    r = _run(*base, "--decisions", str(tmp_path / "none.json"))
    assert r.returncode == 3 and r.stderr.count("\n") == 1, r.stderr
    assert "no decisions there (is devplugin running with --decisions?)" in r.stderr
    write(tmp_path / "d.json", Decisions(1.0, (handout(),)))
    r = _run(*base, "--decisions", str(tmp_path / "d.json"))
    assert r.returncode == 5 and r.stderr.count("\n") == 1, r.stderr
    assert "no pod-resources socket (is the kubelet running?)" in r.stderr
