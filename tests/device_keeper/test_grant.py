"""One grant on one cgroup, the one code path of `device-keeper grant` and of the service, on
stand-in directories (the kernel's answer is test_kernel.py, root only): which cgroup version
a directory is, a systemd scope refused before anything is written, a dry run that writes
nothing and says what it would, and the kernel's refusals as one error with a hint."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from edgefd.core.errors import BadInput
from edgefd.device_keeper import cgroupv1, grant
from edgefd.device_keeper.grant import GrantFailed, SystemdManaged
from edgefd.device_keeper.rules import DeviceNumber

OLD, NEW = DeviceNumber("c", 189, 4), DeviceNumber("c", 189, 5)


def v1_dir(d: Path, listed: str = "c 189:4 rw\nc *:* m\n") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "devices.list").write_text(listed)
    for f in ("devices.allow", "devices.deny"):
        (d / f).write_text("")
    return d


def test_the_version_is_told_by_the_directorys_files(tmp_path: Path) -> None:
    assert grant.version(str(v1_dir(tmp_path / "v1"))) == "v1"
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2/cgroup.controllers").write_text("")
    assert grant.version(str(tmp_path / "v2")) == "v2"
    with pytest.raises(BadInput, match="no such cgroup directory"):
        grant.version(str(tmp_path / "missing"))
    with pytest.raises(BadInput, match="neither a cgroup v2 directory"):
        grant.version(str(tmp_path))


@pytest.mark.parametrize(
    ("path", "scope"),
    [
        ("/sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope", True),
        ("/sys/fs/cgroup/system.slice/crio-abc.scope/", True),
        ("/sys/fs/cgroup/kubepods/besteffort/pod1/abc", False),
        ("/sys/fs/cgroup/kubepods/pod1/abc.scope", False),  # a scope, but in no slice
        ("abc.scope", False),
    ],
)
def test_a_systemd_scope_is_a_scope_in_a_slice(path: str, scope: bool) -> None:
    assert grant.systemd_scope(path) is scope


def test_a_systemd_scope_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    cg = v1_dir(tmp_path / "kubepods-pod1.slice" / "cri-containerd-abc.scope")
    with pytest.raises(SystemdManaged, match="daemon-reload would undo"):
        grant.grant(str(cg), {NEW: "rw"}, {OLD})
    assert (cg / "devices.allow").read_text() == (cg / "devices.deny").read_text() == ""


def test_a_dry_run_writes_nothing_and_says_what_it_would(tmp_path: Path) -> None:
    cg = v1_dir(tmp_path / "cg")
    out = grant.grant(str(cg), {NEW: "rw"}, {OLD}, dry_run=True)
    assert (out.version, out.applied, out.changed) == ("v1", False, True)
    assert out.text() == "devices.deny: c 189:4 rwm\ndevices.allow: c 189:5 rw\n"
    assert out.as_json()["allow"] == ["c 189:5 rw"] and out.as_json()["revoke"] == ["c 189:4"]
    assert (cg / "devices.allow").read_text() == ""
    done = grant.grant(str(cg), {NEW: "rw"}, {OLD})
    assert done.applied and (cg / "devices.allow").read_text() == "c 189:5 rw"


@pytest.mark.parametrize(
    ("error", "kind", "message"),
    [
        (PermissionError(errno.EPERM, "Operation not permitted"), GrantFailed, "parent devices"),
        (FileNotFoundError(errno.ENOENT, "No such file"), BadInput, "the cgroup went away"),
        (OSError(errno.EINVAL, "Invalid argument"), GrantFailed, "Invalid argument$"),
    ],
)
def test_the_kernels_refusal_is_one_error_with_a_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: OSError, kind: type, message: str
) -> None:
    def refused(cgroup: str, writes: list) -> None:
        raise error

    monkeypatch.setattr(cgroupv1, "apply", refused)
    with pytest.raises(kind, match=message) as e:
        grant.grant(str(v1_dir(tmp_path / "cg")), {NEW: "rw"}, {OLD})
    if kind is GrantFailed:
        assert e.value.exit_code == 4


def _bpf(call: str, err: int, detail: str = "") -> OSError:
    from edgefd.device_keeper.bpf import BpfError

    return BpfError(call, err, detail)


VERIFIER = "; verifier: BPF program is too large. Processed 1000001 insn"


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        # a capability missing: 4, with what is needed
        (_bpf("BPF_PROG_QUERY", errno.EPERM), 4, "needs CAP_SYS_ADMIN"),
        (_bpf("BPF_PROG_GET_FD_BY_ID", errno.EPERM), 4, "needs CAP_SYS_ADMIN"),
        (_bpf("BPF_PROG_LOAD", errno.EPERM), 4, "needs CAP_SYS_ADMIN"),
        (_bpf("BPF_PROG_ATTACH", errno.EPERM), 4, "needs CAP_SYS_ADMIN"),
        (_bpf("BPF_PROG_LOAD", errno.ENOMEM), 4, "Cannot allocate memory$"),
        # the verifier's no is not a capability: the program cannot be extended, 1
        (_bpf("BPF_PROG_LOAD", errno.EACCES, VERIFIER), 1, "cannot be extended: .*too large"),
        (_bpf("BPF_PROG_LOAD", errno.EINVAL, "; verifier: invalid"), 1, "cannot be extended"),
        (_bpf("BPF_PROG_LOAD", errno.E2BIG), 1, "cannot be extended"),
        (
            _bpf("BPF_OBJ_GET_INFO_BY_FD", errno.EPERM, " (instructions withheld)"),
            1,
            "constant blinding",
        ),
        # the cgroup removed under the grant: 3, as a missing directory
        (_bpf("BPF_PROG_QUERY", errno.ENOENT), 3, "the cgroup went away"),
        (OSError(errno.ENODEV, "No such device"), 3, "the cgroup went away"),
        # the programs replaced under every attempt: 1
        (_bpf("BPF_PROG_ATTACH", errno.ENOENT), 1, "changed under every attempt"),
    ],
)
def test_each_kernel_refusal_has_its_documented_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: OSError, code: int, message: str
) -> None:
    """issue 30 (9): the verifier's EACCES read as a missing capability (4, "needs
    CAP_SYS_ADMIN"), a cgroup removed under the grant as a refused write (4: ENOENT from
    BPF_PROG_QUERY, ENODEV from a v1 file) instead of 3, and so on; each errno as the
    table in docs/failure-modes.md says."""
    from edgefd.core.errors import EdgefdError
    from edgefd.device_keeper import cgroupv2

    def refused(*args: object) -> None:
        raise error

    monkeypatch.setattr(cgroupv2, "apply", refused)
    monkeypatch.setattr(cgroupv1, "apply", refused)
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("")
    cg = v1_dir(tmp_path / "v1") if error.errno == errno.ENODEV else v2
    with pytest.raises(EdgefdError, match=message) as e:
        grant.grant(str(cg), {NEW: "rw"}, {OLD})
    assert e.value.exit_code == code
    if code != 4:
        assert "CAP_" not in str(e.value)
