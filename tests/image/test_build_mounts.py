"""An interrupted image build leaves no mount behind (issue 46 item 9): debootstrap's second
stage mounted the host's /proc and /sys under .cache/image/…/rootfs, in this machine's mount
namespace, and a build killed there left them for the next `rm -rf` of the checkout to walk
into. Now every step that mounts runs in a mount namespace of its own (scripts/lib/mounts),
a signal ends the step under way at once, and a build first takes down what an older one left.

The real scripts run, in a copy of the checkout's scripts in a temporary directory, with a
stand-in for debootstrap that mounts as the real one does (its first stage in a container:
a tmpfs on /dev and proc; its second stage, run through chroot in a small stand-in rootfs:
proc and sysfs) and then waits to be interrupted; buildah is a stand-in that fails, so no
image is made. Root only (mount, unshare, chroot).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.image.conftest import HOST_ARCH, ROOT, skip_or_fail

SCRIPTS = (
    "scripts/image/python-base",
    "scripts/build-image",
    "scripts/lib/venv",
    "scripts/lib/phase",
    "scripts/lib/mounts",
    "scripts/lib/apt-ensure",
)

FIRST_STAGE = """#!/bin/bash
# stand-in for `debootstrap --foreign ... SUITE TARGET MIRROR`: the stand-in rootfs, then, as
# debootstrap does in a container, a tmpfs on /dev and proc mounted, and a wait
set -e
target=${@: -2:1}
mkdir -p "$target"
cp -a "$STANDIN_ROOTFS/." "$target"
if [[ $STANDIN_MOUNT == first ]]; then
  mount -t tmpfs nodev "$target/dev"
  mount -t proc proc "$target/proc"
  echo $$ >"$STANDIN_DIR/mounted"
  exec sleep 600
fi
"""

SECOND_STAGE = """#!/bin/bash
# stand-in for /debootstrap/debootstrap --second-stage, in the chroot: proc and sysfs, a wait
if [[ $STANDIN_MOUNT == second ]]; then
  mount -t proc proc /proc && mount -t sysfs sysfs /sys || exit 1
  echo $$ >/mounted
  exec sleep 600
fi
"""


def _mounts_under(path: Path) -> list[str]:
    """Mount points at or under `path` in this (the test's, the host's) mount namespace."""
    prefix = str(path.resolve())
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            out.append(point)
    return out


def _copy_with_libraries(binary: str, rootfs: Path) -> None:
    path = shutil.which(binary)
    assert path, binary
    files = {os.path.realpath(path): "/bin/" + binary}
    ldd = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
    for line in ldd.splitlines():
        lib = next((w for w in line.split() if w.startswith("/")), None)
        if lib:
            files[os.path.realpath(lib)] = lib
    for real, at in files.items():
        dest = rootfs / at.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(real, dest)


@pytest.fixture
def checkout(tmp_path: Path) -> Iterator[Path]:
    """A checkout holding the image scripts (its .venv the real one's), with the stand-ins
    on PATH; every mount the test makes under it, and every stand-in left waiting, go after."""
    if os.geteuid() != 0:
        skip_or_fail("needs root (mount, unshare, chroot): run `sudo make test`")
    co = tmp_path / "checkout"
    for s in SCRIPTS:
        (co / s).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / s, co / s)
    (co / ".venv").symlink_to(ROOT / ".venv")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "debootstrap").write_text(FIRST_STAGE)
    (bin_ / "buildah").write_text("#!/bin/sh\nexit 1\n")  # nothing cached, nothing made
    for f in bin_.iterdir():
        f.chmod(0o755)
    rootfs = tmp_path / "standin-rootfs"
    for b in ("bash", "mount", "sleep"):
        _copy_with_libraries(b, rootfs)
    for d in ("proc", "sys", "dev", "debootstrap"):
        (rootfs / d).mkdir(exist_ok=True)
    (rootfs / "debootstrap/debootstrap").write_text(SECOND_STAGE)
    (rootfs / "debootstrap/debootstrap").chmod(0o755)
    (tmp_path / "standin").mkdir()
    try:
        yield co
    finally:
        for point in reversed(_mounts_under(tmp_path)):
            subprocess.run(["umount", "-l", point], check=False)


def _work(co: Path) -> Path:
    return co / ".cache/image" / f"base-{HOST_ARCH}"


def _env(co: Path, mount: str) -> dict[str, str]:
    tmp = co.parent
    return {
        **os.environ,
        "PATH": f"{tmp / 'bin'}:{os.environ['PATH']}",
        "BUILDAH_ROOT": str(tmp / "storage"),
        "BUILDAH_RUNROOT": str(tmp / "run"),
        "EDGEFD_CACHE_DIR": str(tmp / "shared"),
        "STANDIN_ROOTFS": str(tmp / "standin-rootfs"),
        "STANDIN_DIR": str(tmp / "standin"),
        "STANDIN_MOUNT": mount,
    }


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        if proc.poll() is not None:
            raise AssertionError(f"python-base ended first: {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)
    raise AssertionError(f"the stand-in never mounted ({path})")


def _sigint_default() -> None:  # pragma: no cover - runs in the child, before exec
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize(
    ("stage", "sig", "whole_group"),
    [
        ("first", signal.SIGINT, True),  # Ctrl-C: the terminal signals the whole group
        ("second", signal.SIGTERM, False),  # `timeout`, `kill`: the script alone
        ("second", signal.SIGKILL, False),  # no trap runs at all
    ],
    ids=["first-stage-sigint", "second-stage-sigterm", "second-stage-sigkill"],
)
def test_an_interrupted_debootstrap_leaves_no_mount_in_the_checkout(
    checkout: Path, stage: str, sig: signal.Signals, whole_group: bool
) -> None:
    marker = checkout.parent / "standin/mounted" if stage == "first" else None
    proc = subprocess.Popen(
        [str(checkout / "scripts/image/python-base"), HOST_ARCH],
        env=_env(checkout, stage),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # Ctrl-C as at a terminal: a run started in the background of a non-interactive
        # shell (`make test &`, nohup) inherits SIGINT ignored, and bash cannot trap a signal
        # ignored on entry
        preexec_fn=_sigint_default if sig == signal.SIGINT else None,
    )
    pid = 0
    try:
        pid = _wait_for(marker or _work(checkout) / "rootfs/mounted", proc)
        # the stand-in holds its mounts now: none of them is in this namespace, so rm -rf of
        # the checkout is already safe
        assert _mounts_under(checkout) == []
        if whole_group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)  # at once, not when debootstrap would finish
        assert proc.returncode != 0, err
        if sig != signal.SIGKILL:
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not _alive(pid), "the step under way was left running"
        assert _mounts_under(checkout) == []
        shutil.rmtree(checkout / ".cache")  # what `git clean -xdf` or `rm -rf` does
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if pid and _alive(pid):  # the stand-in a SIGKILL left waiting in its namespace
            os.kill(pid, signal.SIGKILL)


def test_a_build_first_takes_down_what_an_interrupted_one_left(
    checkout: Path, tmp_path: Path
) -> None:
    """An older version's interrupted run left mounts in this namespace, under the work
    directory the next run removes: a bind (through which rm -rf would delete what it
    shows), a tmpfs with another inside, a name with a space. Both python-base and
    build-image take every one down before anything else."""
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep").write_text("not the build's to remove\n")
    for script in ("python-base", "build-image"):
        rootfs = _work(checkout) / "rootfs"
        for d in ("mnt", "sys", "dir with space"):
            (rootfs / d).mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", str(precious), str(rootfs / "mnt")], check=True)
        subprocess.run(["mount", "-t", "tmpfs", "t", str(rootfs / "sys")], check=True)
        (rootfs / "sys/fs/cgroup").mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "t", str(rootfs / "sys/fs/cgroup")], check=True)
        subprocess.run(["mount", "-t", "tmpfs", "t", str(rootfs / "dir with space")], check=True)
        assert len(_mounts_under(checkout)) == 4
        argv = [HOST_ARCH] if script == "python-base" else ["--arch", HOST_ARCH]
        path = checkout / "scripts" / ("image/" if script == "python-base" else "") / script
        r = subprocess.run(
            [str(path), *argv], env=_env(checkout, "none"), capture_output=True, text=True
        )
        # the stand-in buildah (python-base) or a checkout that is no git repository
        # (build-image) ends each run later on; the sweep came first
        assert r.returncode != 0
        assert _mounts_under(checkout) == [], r.stderr
        assert r.stderr.count("(left by an interrupted build)") >= 3, r.stderr
        assert (precious / "keep").read_text() == "not the build's to remove\n", script
        shutil.rmtree(checkout / ".cache")
