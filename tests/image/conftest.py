"""Fixtures for the image tests: the built archives, their extracted roots, the sample inputs.

The image is built by `scripts/build-image` itself (cached: seconds when nothing changed). What
cannot run here skips, except under CI (env CI set), where it fails: root (buildah with chroot
isolation, debootstrap, chroot), and for arm64 a kernel with binfmt_misc.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.image.codepaths import Inputs
from tests.image.rootfs import ImageRoot

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "scripts" / "build-image"
OCI = ROOT / "scripts" / "image" / "oci.py"
HOST_ARCH = subprocess.run(
    ["dpkg", "--print-architecture"], capture_output=True, text=True, check=False
).stdout.strip()


MARKER = (
    "image: builds the container image (scripts/build-image) and runs it without an engine;"
    " arm64 under qemu"
)


def pytest_configure(config: pytest.Config) -> None:
    # also in setup.cfg's [tool:pytest] markers; here too so the marker is known wherever
    # these tests are collected (setup.cfg is being reorganised)
    config.addinivalue_line("markers", MARKER)


def skip_or_fail(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI: image tests must run)")
    pytest.skip(why)


def load_script(path: Path) -> ModuleType:
    """A module from scripts/image/ (scripts, not a package), loaded by path once."""
    name = "edgefd_scripts_" + path.stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look their module up while the class is made
        spec.loader.exec_module(mod)
    return sys.modules[name]


def load_oci() -> ModuleType:
    return load_script(OCI)


class Builds:
    """One `scripts/build-image` run per session: `--arch all` when arm64 can run here."""

    def __init__(self) -> None:
        self._archives: dict[str, Path] | None = None
        self._error: str | None = None
        self.no_arm64 = ""  # why arm64 was not built
        self.seconds = 0.0

    def foreign_ok(self) -> str | None:
        r = subprocess.run(
            [str(ROOT / "scripts/image/binfmt-ensure"), "arm64"], capture_output=True, text=True
        )
        return None if r.returncode == 0 else (r.stderr.strip() or "binfmt-ensure failed")

    def archives(self) -> dict[str, Path]:
        """'amd64', 'arm64' (per-architecture archives) and 'index' (both), as built."""
        if self._archives is None and self._error is None:
            if os.geteuid() != 0:
                self._error = (
                    "needs root (buildah with chroot isolation, debootstrap, chroot):"
                    " run `sudo make test`"
                )
            else:
                self._build()
        if self._error:
            skip_or_fail(self._error)
        assert self._archives is not None
        return self._archives

    def _build(self) -> None:
        import time

        why_not_arm64 = self.foreign_ok() if HOST_ARCH != "arm64" else None
        arch = "all" if why_not_arm64 is None else HOST_ARCH
        t = time.monotonic()
        r = subprocess.run([str(BUILD), "--arch", arch], capture_output=True, text=True)
        self.seconds = time.monotonic() - t
        if r.returncode != 0:
            pytest.fail(f"scripts/build-image --arch {arch} failed:\n{r.stderr[-3000:]}")
        self.no_arm64 = why_not_arm64 or ""
        self._archives = {}
        for p in map(Path, r.stdout.split()):
            name = p.name.split(".")[0]  # edgefd-amd64, edgefd-arm64, edgefd (the index)
            self._archives[name.removeprefix("edgefd-") if "-" in name else "index"] = p


@pytest.fixture(scope="session")
def builds() -> Builds:
    return Builds()


@pytest.fixture(scope="session")
def archive(builds: Builds):
    """archive(arch) -> the per-architecture OCI archive (skips arm64 where it cannot run)."""

    def get(arch: str) -> Path:
        archives = builds.archives()
        if arch not in archives:
            skip_or_fail(
                f"no {arch} image: {builds.no_arm64} (qemu-user-static runs it: a kernel with"
                " binfmt_misc, `modprobe binfmt_misc`)"
            )
        return archives[arch]

    return get


@pytest.fixture(scope="session")
def image_root(archive) -> Iterator:
    """image_root(arch) -> ImageRoot of that image, extracted once per session."""
    oci = load_oci()
    made: dict[str, ImageRoot] = {}
    # short: the device plugin's unix sockets live under it (107-byte limit)
    base = Path(tempfile.mkdtemp(prefix="efimg-", dir="/tmp"))

    def get(arch: str) -> ImageRoot:
        if arch not in made:
            dest = base / arch
            im = oci.extract(archive(arch), dest, arch)
            made[arch] = ImageRoot(dest, im.config)
        return made[arch]

    yield get
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def inputs() -> Iterator[Inputs]:
    """The sample nodes and blob, readable by the image's non-root user."""
    base = Path(tempfile.mkdtemp(prefix="efin-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield Inputs.make(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
