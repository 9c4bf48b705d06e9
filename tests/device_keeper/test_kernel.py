"""The grant against the kernel and runc's own device rules: a cgroup gets exactly the filter
runc attaches (v2) or the files runc writes (v1); after `grant`, only the two changed nodes
behave differently, over a spread of (type, major, minor, access). Root only (see conftest)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from edgefd.device_keeper import bpf, cgroupv2, program
from edgefd.device_keeper.grant import SystemdManaged, grant
from edgefd.device_keeper.rules import DeviceNumber, Rule

from .foreign_programs import ALLOW_ALL, DENY_ALL, attach_other
from .probe import SPREAD, changed, probe

pytestmark = pytest.mark.root

OLD, NEW, NEXT = DeviceNumber("c", 189, 4), DeviceNumber("c", 189, 5), DeviceNumber("c", 189, 6)


def _expect(revoked: DeviceNumber, granted: DeviceNumber) -> dict:
    """Revoked: r and w go, and m too (runc allowed `c *:* m`); granted: r and w come (m was
    already allowed by runc's wildcard)."""
    out = {}
    for acc in "rwm":
        out[("c", revoked.major, revoked.minor, acc)] = (True, False)
    for acc in "rw":
        out[("c", granted.major, granted.minor, acc)] = (False, True)
    return out


def _programs(cgroup: Path) -> list[bpf.ProgInfo]:
    fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _, ids = bpf.query(fd)
        infos = []
        for pid in ids:
            pfd = bpf.prog_fd(pid)
            try:
                infos.append(bpf.prog_info(pfd))
            finally:
                os.close(pfd)
        return infos
    finally:
        os.close(fd)


def test_v2_only_the_two_nodes_change(v2_cgroup, runc_filter):
    runc_filter(v2_cgroup)
    procs = [str(v2_cgroup / "cgroup.procs")]
    before = probe(procs, SPREAD)
    assert before[("c", 189, 4, "r")] and not before[("c", 189, 5, "r")]  # runc's program
    runc_prog = _programs(v2_cgroup)
    assert len(runc_prog) == 1 and runc_prog[0].name != program.NAME

    out = grant(str(v2_cgroup), {NEW: "rw"}, {OLD})
    after = probe(procs, SPREAD)
    assert changed(before, after) == _expect(OLD, NEW)

    progs = _programs(v2_cgroup)
    assert [p.name for p in progs] == [program.NAME]  # replaced, not added
    assert out.changed and out.patches[0].prog_id == runc_prog[0].id
    rules, body = program.split(program.unpack(progs[0].insns))
    assert rules == (Rule(OLD, None), Rule(NEW, "rw"))
    assert body == program.unpack(runc_prog[0].insns)  # runc's instructions, unchanged


def test_v2_next_grant_replaces_the_preamble_and_a_reused_minor_comes_back(v2_cgroup, runc_filter):
    runc_filter(v2_cgroup)
    procs = [str(v2_cgroup / "cgroup.procs")]
    grant(str(v2_cgroup), {NEW: "rw"}, {OLD})
    first = probe(procs, SPREAD)
    grant(str(v2_cgroup), {NEXT: "rw"}, {NEW})
    second = probe(procs, SPREAD)
    assert changed(first, second) == _expect(NEW, NEXT)
    progs = _programs(v2_cgroup)
    assert len(progs) == 1
    rules, body = program.split(program.unpack(progs[0].insns))
    assert len(program.unpack(progs[0].insns)) == len(program.build(rules, body))  # one preamble
    assert rules == (Rule(OLD, None), Rule(NEW, None), Rule(NEXT, "rw"))
    # the kernel gives 189:4 to the same device again: allowed again, 189:6 revoked
    grant(str(v2_cgroup), {OLD: "rw"}, {NEXT})
    third = probe(procs, SPREAD)
    # mknod of 189:4 comes back too: runc's `c *:* m` decides it again
    assert changed(second, third) == {**_expect(NEXT, OLD), ("c", 189, 4, "m"): (False, True)}


def test_v2_repeating_a_grant_changes_nothing(v2_cgroup, runc_filter):
    runc_filter(v2_cgroup)
    grant(str(v2_cgroup), {NEW: "rw"}, {OLD})
    ids = [p.id for p in _programs(v2_cgroup)]
    out = grant(str(v2_cgroup), {NEW: "rw"}, {OLD})
    assert not out.changed and [p.id for p in _programs(v2_cgroup)] == ids


def test_v2_dry_run_loads_nothing(v2_cgroup, runc_filter):
    runc_filter(v2_cgroup)
    ids = [p.id for p in _programs(v2_cgroup)]
    out = grant(str(v2_cgroup), {NEW: "rw"}, {OLD}, dry_run=True)
    assert [p.id for p in _programs(v2_cgroup)] == ids
    assert out.text().splitlines()[1:3] == ["deny c 189:4", "allow c 189:5 rw"]


@pytest.mark.parametrize(
    ("name", "insns"),
    [
        ("agent_deny", DENY_ALL),  # a security agent's policy: every device denied
        ("", DENY_ALL),  # unnamed like runc's, but not its shape
        ("other", None),  # runc's very instructions under another name
    ],
)
def test_v2_a_program_that_is_not_the_runtimes_is_left_alone_and_still_denies(
    v2_cgroup, runc_filter, name, insns
):
    """issue 30 (9): the keeper patched every attached program, so a security agent's
    deny-all was bypassed for the granted node. Now only runc's program is extended (the
    revocation holds), the other one is left exactly as it is, the kernel still ANDs it in,
    and the grant says it is blocked instead of claiming success."""
    runc_filter(v2_cgroup)
    [runc] = _programs(v2_cgroup)
    body = program.unpack(runc.insns) if insns is None else insns
    other = attach_other(v2_cgroup, body, name)
    procs = [str(v2_cgroup / "cgroup.procs")]
    before = probe(procs, SPREAD)
    with pytest.raises(cgroupv2.BlockedByOther, match=rf"not granted c 189:5: program {other}"):
        grant(str(v2_cgroup), {NEW: "rw"}, {OLD})
    after = probe(procs, SPREAD)
    assert after[("c", 189, 5, "r")] is False and after[("c", 189, 4, "r")] is False
    progs = {p.id: p for p in _programs(v2_cgroup)}
    assert other in progs and program.unpack(progs[other].insns) == body  # left as it is
    assert progs[other].name == name
    [ours] = [p for p in progs.values() if p.id != other]
    assert ours.name == program.NAME and runc.id not in progs  # runc's was extended
    assert program.split(program.unpack(ours.insns))[0] == (Rule(OLD, None), Rule(NEW, "rw"))
    # nothing opens; where the other program allowed the old node, the revocation holds
    revoked = {k: v for k, v in _expect(OLD, NEW).items() if k[2] == OLD.minor}
    assert changed(before, after) == ({} if insns is DENY_ALL else revoked)


def test_v2_an_allow_all_beside_runcs_shows_the_revocation_holds(v2_cgroup, runc_filter):
    """The other program is not evaluated, so the grant is not claimed even where it would
    pass; what the keeper did to runc's program is in force all the same."""
    runc_filter(v2_cgroup)
    attach_other(v2_cgroup, ALLOW_ALL, "audit")
    procs = [str(v2_cgroup / "cgroup.procs")]
    before = probe(procs, SPREAD)
    with pytest.raises(cgroupv2.BlockedByOther, match="may still deny the node"):
        grant(str(v2_cgroup), {NEW: "rw"}, {OLD})
    assert changed(before, probe(procs, SPREAD)) == _expect(OLD, NEW)


def test_v2_no_runtime_program_at_all_is_refused_with_nothing_changed(v2_cgroup):
    other = attach_other(v2_cgroup, DENY_ALL, "agent_deny")
    with pytest.raises(cgroupv2.GrantRefused, match="no attached device program is the runt"):
        grant(str(v2_cgroup), {NEW: "rw"}, {OLD})
    assert [p.id for p in _programs(v2_cgroup)] == [other]


def test_v2_cgroup_without_a_program_is_refused(v2_cgroup):
    with pytest.raises(cgroupv2.GrantRefused, match="no device program"):
        grant(str(v2_cgroup), {NEW: "rw"}, {OLD})


def test_v2_systemd_scope_is_refused_and_left_alone(v2_cgroup, runc_filter):
    scope = v2_cgroup / "kubepods-besteffort-pod1.slice" / "cri-containerd-abc.scope"
    scope.mkdir(parents=True)
    try:
        runc_filter(scope)
        ids = [p.id for p in _programs(scope)]
        with pytest.raises(SystemdManaged, match="daemon-reload"):
            grant(str(scope), {NEW: "rw"}, {OLD})
        assert [p.id for p in _programs(scope)] == ids
    finally:
        scope.rmdir()
        scope.parent.rmdir()


def test_v1_only_the_two_nodes_change(v1_devices, runc_filter):
    runc_filter(v1_devices, v1=True)
    procs = [str(v1_devices / "cgroup.procs")]
    before = probe(procs, SPREAD)
    assert before[("c", 189, 4, "r")] and not before[("c", 189, 5, "r")]
    grant(str(v1_devices), {NEW: "rw"}, {OLD})
    after = probe(procs, SPREAD)
    # v1 cannot take a node out of runc's `c *:* m` wildcard: mknod of the old node stays
    # allowed, opening it does not
    expect = _expect(OLD, NEW)
    del expect[("c", 189, 4, "m")]
    assert changed(before, after) == expect
    listed = (v1_devices / "devices.list").read_text().split("\n")
    assert "c 189:5 rw" in listed and not any(line.startswith("c 189:4 ") for line in listed)
    assert not grant(str(v1_devices), {NEW: "rw"}, {OLD}).changed  # already so


def test_cli_grant_and_dry_run(v2_cgroup, runc_filter):
    runc_filter(v2_cgroup)
    argv = ["device-keeper", "grant", "--cgroup", str(v2_cgroup), "--allow", "c:189:5"]
    argv += ["--revoke", "c:189:4"]
    dry = subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, check=True)
    assert "deny c 189:4\nallow c 189:5 rw\n" in dry.stdout
    assert [p.name for p in _programs(v2_cgroup)] != [program.NAME]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert "allowed c 189:5 rw, revoked c 189:4" in done.stdout
    assert [p.name for p in _programs(v2_cgroup)] == [program.NAME]
