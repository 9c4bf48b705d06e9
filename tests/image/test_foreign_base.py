"""scripts/image/foreign_base.py, the arm64 base without emulation, on two small packages built
here with dpkg-deb: what it unpacks, the dpkg database it writes (as dpkg would), what it takes
from the native base (what maintainer scripts made, never an architecture's files or logs) and
which sources it lists for byte-compiling. The real bases are built and run by test_built_image.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "image" / "foreign_base.py"

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")


def deb(tmp: Path, name: str, control: dict[str, str], files: dict[str, str], **ctl: str) -> Path:
    src = tmp / f"src-{name}"
    for path, text in files.items():
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_text(text)
    (src / "DEBIAN").mkdir(parents=True)
    fields = {"Package": name, "Version": "1.0", "Maintainer": "t <t@example.org>",
              "Description": "test", **control}  # fmt: skip
    (src / "DEBIAN/control").write_text("".join(f"{k}: {v}\n" for k, v in fields.items()))
    for member, text in ctl.items():
        (src / "DEBIAN" / member).write_text(text)
        if member == "postinst":
            (src / "DEBIAN" / member).chmod(0o755)
    out = tmp / f"{name}.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", src, out],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    """(the target root after debootstrap's first stage, a native root after its second)."""
    root, native = tmp_path / "root", tmp_path / "native"
    archives = root / "var/cache/apt/archives"
    archives.mkdir(parents=True)
    alpha = deb(
        tmp_path,
        "alpha",
        {"Architecture": "arm64", "Multi-Arch": "same"},
        {"etc/alpha.conf": "x=1\n", "usr/lib/aarch64-linux-gnu/libalpha.so.1": "elf"},
        conffiles="/etc/alpha.conf\n",
        postinst="#!/bin/sh\nupdate-alternatives --install /usr/bin/awk awk /usr/bin/mawk 5\n",
    )
    beta = deb(
        tmp_path,
        "beta",
        {"Architecture": "all"},
        {
            "usr/bin/beta": "#!/bin/sh\n",
            "usr/lib/python3.11/beta.py": "X = 1\n",
            "usr/lib/python3.11/_sysconfigdata__aarch64-linux-gnu.py": "build_time_vars = {}\n",
        },
    )
    for d in (alpha, beta):
        shutil.copy(d, archives / d.name)
    (root / "debootstrap").mkdir()
    (root / "debootstrap/debpaths").write_text(
        "alpha /var/cache/apt/archives/alpha.deb\nbeta /var/cache/apt/archives/beta.deb\n"
    )
    (root / "usr/bin").mkdir(parents=True)
    os.symlink("usr/bin", root / "bin")  # merged /usr, as the first stage leaves it

    info = native / "var/lib/dpkg/info"
    info.mkdir(parents=True)
    (native / "var/lib/dpkg/status").write_text(
        "Package: alpha\nStatus: install ok installed\nVersion: 1.0+b1\n\n"
        "Package: beta\nStatus: install ok installed\nVersion: 1.0\n"
    )
    (info / "alpha:amd64.list").write_text(
        "/.\n/etc\n/etc/alpha.conf\n/usr/lib/x86_64-linux-gnu/libalpha.so.1\n"
    )
    (info / "beta.list").write_text("/.\n/bin/beta-old\n/usr/lib/python3.11/beta.py\n")
    (native / "usr/bin").mkdir(parents=True)
    os.symlink("usr/bin", native / "bin")
    for path, text in {
        "etc/passwd": "root:x:0:0:root:/root:/bin/bash\n",
        "etc/alpha.conf": "x=1\n",
        "etc/ld.so.cache": "cache",
        "var/log/dpkg.log": "log",
        "var/lib/dpkg/diversions": "/bin/sh\n/bin/sh.distrib\ndash\n",
        "usr/bin/beta-old": "owned, through /bin",
        "usr/lib/x86_64-linux-gnu/gconv/gconv-modules.cache": "arch",
        "usr/lib/python3.11/beta.py": "X = 1\n",
        "usr/lib/python3.11/__pycache__/beta.cpython-311.pyc": "pyc",
        "usr/lib/python3.11/_sysconfigdata__x86_64-linux-gnu.py": "build_time_vars = {}\n",
        "usr/lib/python3.11/__pycache__/_sysconfigdata__x86_64-linux-gnu.cpython-311.pyc": "pyc",
        "run/lock/.keep": "",
    }.items():
        (native / path).parent.mkdir(parents=True, exist_ok=True)
        (native / path).write_text(text)
    (native / "etc/alternatives").mkdir()
    os.symlink("/usr/bin/mawk", native / "etc/alternatives/awk")
    os.symlink("/etc/alternatives/awk", native / "usr/bin/awk")
    return root, native


def run(root: Path, native: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, SCRIPT, "--rootfs", root, "--native", native, "--arch", "arm64",
         "--native-arch", "amd64", "--pyc-list", tmp / "pyc.list"],
        capture_output=True, text=True,
    )  # fmt: skip


def test_unpacks_registers_and_configures_like_the_native_base(
    roots: tuple[Path, Path], tmp_path: Path
) -> None:
    root, native = roots
    r = run(root, native, tmp_path)
    assert r.returncode == 0, r.stderr
    # every package unpacked, through the merged-/usr links
    assert (root / "usr/lib/aarch64-linux-gnu/libalpha.so.1").read_text() == "elf"
    assert (root / "usr/bin/beta").exists() and (root / "bin").is_symlink()
    # dpkg's database, as dpkg writes it
    status = (root / "var/lib/dpkg/status").read_text()
    alpha, beta = status.split("\n\n")
    assert alpha.startswith("Package: alpha\nStatus: install ok installed\n")
    assert "Architecture: arm64" in alpha
    assert alpha.rstrip().endswith("Conffiles:\n /etc/alpha.conf " + _md5("x=1\n"))
    assert beta.startswith("Package: beta\nStatus: install ok installed\n")
    info = root / "var/lib/dpkg/info"
    assert (info / "alpha:arm64.list").read_text().splitlines()[:2] == ["/.", "/etc"]
    assert "/usr/lib/python3.11/beta.py" in (info / "beta.list").read_text().splitlines()
    assert os.access(info / "alpha:arm64.postinst", os.X_OK)
    assert (info / "alpha:arm64.conffiles").read_text() == "/etc/alpha.conf\n"
    # what the maintainer scripts made, from the native base
    assert (root / "etc/passwd").read_text().startswith("root:x:0:0:")
    assert os.readlink(root / "usr/bin/awk") == "/etc/alternatives/awk"
    assert os.readlink(root / "etc/alternatives/awk") == "/usr/bin/mawk"
    assert (root / "var/lib/dpkg/diversions").exists() and (root / "run/lock").is_dir()
    assert (info / "format").read_text() == "1\n"
    # never an architecture's files, a cache, a log, bytecode, or a file a package ships
    assert not (root / "usr/lib/x86_64-linux-gnu").exists()
    assert not (root / "etc/ld.so.cache").exists() and not (root / "var/log/dpkg.log").exists()
    assert not (root / "usr/lib/python3.11/__pycache__").exists()
    assert not (root / "usr/bin/beta-old").exists()
    # the sources to byte-compile: those the native base has bytecode of
    assert (tmp_path / "pyc.list").read_text().splitlines() == [
        "/usr/lib/python3.11/_sysconfigdata__aarch64-linux-gnu.py",
        "/usr/lib/python3.11/beta.py",
    ]


def test_refuses_a_native_base_with_other_packages(
    roots: tuple[Path, Path], tmp_path: Path
) -> None:
    root, native = roots
    with (native / "var/lib/dpkg/status").open("a") as f:
        f.write("\nPackage: gamma\nStatus: install ok installed\nVersion: 2\n")
    r = run(root, native, tmp_path)
    assert r.returncode == 1
    assert "gamma (2 / -)" in r.stderr and "Traceback" not in r.stderr
    assert not (root / "var/lib/dpkg/status").exists(), "nothing written on a mismatch"


def _md5(text: str) -> str:
    import hashlib

    return hashlib.md5(text.encode()).hexdigest()
