"""Finish a Debian root filesystem for a foreign architecture without running any of its code.

    python foreign_base.py --rootfs R --native N --arch arm64 --native-arch amd64 --pyc-list F

Used by scripts/image/python-base for an architecture the machine cannot run natively, after
`debootstrap --foreign` has downloaded the packages into R (and unpacked the essential ones).
Installing them the usual way (debootstrap's second stage) runs dpkg and every maintainer
script of the target under qemu: about 15 minutes for arm64 on 2 cores. Instead:

1. every downloaded package is unpacked into R (dpkg-deb and tar of this machine);
2. dpkg's database is written as dpkg would after installing them: `status` (each control
   stanza with `Status: install ok installed` and its conffiles' checksums) and `info/`
   (file lists, checksums, conffiles, maintainer scripts);
3. what the maintainer scripts create is taken from N, the same Debian release with the same
   packages made natively for this machine's architecture (its scripts really ran): every path
   of N that no package ships (the accounts, /bin/sh and /usr/bin/awk alternatives, the CA
   bundle, debconf's database, dpkg's diversions...), except what belongs to an architecture
   (anything under N's multiarch directory, ld.so.cache, bytecode) and what a clean image
   leaves out (package lists, logs, caches);
4. the Python sources whose bytecode N holds are listed in F, for python-base to compile with
   N's interpreter (the same Python release; bytecode is the same on every architecture).

The dynamic loader finds the libraries in the multiarch directories without ld.so.cache.
Refuses (exit 1) when N and R do not hold the same packages.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
# Never taken from the native root: kernel file systems, scratch, dpkg's per-package records
# (written from the target's own packages), and what a clean image leaves out.
SKIP_PREFIXES = (
    "dev/",
    "proc/",
    "sys/",
    "tmp/",
    "debootstrap/",
    "var/lib/dpkg/info/",
    "var/lib/dpkg/status",
    "var/lib/dpkg/available",
    "var/lib/dpkg/lock",
    "var/lib/dpkg/arch",  # the foreign architectures dpkg knows: none here
    "var/cache/apt/",
    "var/lib/apt/lists/",
    "var/log/",
    "etc/ld.so.cache",
)
PYC = re.compile(r"^(?P<dir>.*)/__pycache__/(?P<name>[^/]+)\.cpython-\d+\.pyc$")


@dataclass(frozen=True)
class Package:
    name: str
    deb: Path
    control: str  # the control stanza, without the trailing newline
    members: dict[str, bytes]  # the control archive's other files: md5sums, conffiles, postinst...
    paths: list[str]  # as dpkg lists them: "/.", "/usr", "/usr/bin/x", ...

    def field(self, key: str) -> str:
        m = re.search(rf"^{re.escape(key)}: *(.*)$", self.control, re.M)
        return m.group(1).strip() if m else ""

    def info_name(self, arch: str) -> str:
        """dpkg names the records of a Multi-Arch: same package after its architecture too."""
        same = self.field("Multi-Arch") == "same" and self.field("Architecture") != "all"
        return f"{self.name}:{arch}" if same else self.name


def _tar(cmd: list[str]) -> tarfile.TarFile:
    data = subprocess.run(cmd, check=True, capture_output=True).stdout
    return tarfile.open(fileobj=io.BytesIO(data))


def read_package(root: Path, name: str, deb: Path) -> Package:
    with _tar(["dpkg-deb", "--ctrl-tarfile", str(deb)]) as t:
        members = {
            m.name.removeprefix("./"): t.extractfile(m).read()  # type: ignore[union-attr]
            for m in t.getmembers()
            if m.isfile()
        }
    control = members.pop("control").decode().rstrip("\n")
    with _tar(["dpkg-deb", "--fsys-tarfile", str(deb)]) as t:
        paths = ["/" + n.removeprefix(".").strip("/") for n in t.getnames()]
    paths = ["/." if p == "/" else p for p in paths]
    return Package(name, deb, control, members, paths)


def unpack(root: Path, pkg: Package) -> None:
    tar = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(pkg.deb)], stdout=subprocess.PIPE)
    subprocess.run(
        ["tar", "-C", str(root), "--keep-directory-symlink", "-xpf", "-"],
        stdin=tar.stdout,
        check=True,
    )
    if tar.wait() != 0:
        raise SystemExit(f"foreign_base: dpkg-deb failed on {pkg.deb}")


def status_stanza(root: Path, pkg: Package) -> str:
    lines = pkg.control.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Package:")) + 1
    lines.insert(at, "Status: install ok installed")
    conffiles = pkg.members.get("conffiles", b"").decode().split()
    if conffiles:
        lines.append("Conffiles:")
        for c in conffiles:  # with the checksum dpkg records: MD5
            digest = hashlib.md5((root / c.lstrip("/")).read_bytes()).hexdigest()
            lines.append(f" {c} {digest}")
    return "\n".join(lines) + "\n"


def write_database(root: Path, pkgs: list[Package], arch: str) -> None:
    admin = root / "var/lib/dpkg"
    info = admin / "info"
    info.mkdir(parents=True, exist_ok=True)
    for pkg in pkgs:
        base = pkg.info_name(arch)
        (info / f"{base}.list").write_text("\n".join(pkg.paths) + "\n")
        for member, data in pkg.members.items():
            dest = info / f"{base}.{member}"
            dest.write_bytes(data)
            if member in ("preinst", "postinst", "prerm", "postrm", "config"):
                dest.chmod(0o755)
    (info / "format").write_text("1\n")  # the layout of info/ (dpkg >= 1.16.0, multiarch)
    stanzas = [status_stanza(root, p) for p in sorted(pkgs, key=lambda p: p.name)]
    (admin / "status").write_text("\n".join(stanzas))
    (admin / "available").touch()


def canonical(path: str, aliases: dict[str, str]) -> str:
    """A path as found walking the tree: /bin/sh is /usr/bin/sh where /bin is a link to usr/bin."""
    first, _, rest = path.lstrip("/").partition("/")
    return f"{aliases.get(first, first)}/{rest}".rstrip("/") if rest else aliases.get(first, first)


def native_packages(native: Path) -> dict[str, str]:
    """Package name -> version, from the native root's dpkg status."""
    out = {}
    for stanza in (native / "var/lib/dpkg/status").read_text().split("\n\n"):
        m = re.search(r"^Package: (\S+)$", stanza, re.M)
        v = re.search(r"^Version: (\S+)$", stanza, re.M)
        if m and v and "Status: install ok installed" in stanza:
            out[m.group(1)] = v.group(1)
    return out


def same_release(a: str, b: str) -> bool:
    """Versions equal but for a binary-only rebuild suffix (+bN), which differs by architecture."""
    return re.sub(r"\+b\d+$", "", a) == re.sub(r"\+b\d+$", "", b)


def script_made(native: Path, native_arch: str) -> list[str]:
    """Paths (relative, as walked) in the native root that no package ships."""
    aliases = {
        p.name: os.readlink(p).strip("/")
        for p in native.iterdir()
        if p.is_symlink() and os.readlink(p).strip("/") == f"usr/{p.name}"
    }
    owned: set[str] = set()
    for lst in (native / "var/lib/dpkg/info").glob("*.list"):
        owned.update(canonical(p, aliases) for p in lst.read_text().splitlines())
    triplet = TRIPLETS[native_arch]
    found = []
    for dirpath, dirnames, filenames in os.walk(native):
        rel_dir = os.path.relpath(dirpath, native)
        keep_dirs = []
        for name in [*dirnames, *filenames]:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            is_dir = name in dirnames and not (native / rel).is_symlink()
            key = rel + "/" if is_dir else rel
            if key.startswith(SKIP_PREFIXES) or triplet in rel or name == "__pycache__":
                continue  # nor anything under it
            if is_dir:
                keep_dirs.append(name)
            if rel not in owned:
                found.append(rel)
        dirnames[:] = keep_dirs
    return sorted(found)


def copy_over(native: Path, root: Path, rels: list[str]) -> list[str]:
    """Copy each path (parents first) that the target does not have yet; returns those copied."""
    copied = []
    for rel in rels:
        src, dst = native / rel, root / rel
        if os.path.lexists(dst):
            continue
        st = src.lstat()
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        elif src.is_dir():
            dst.mkdir()
            dst.chmod(st.st_mode & 0o7777)
        elif src.is_file():
            shutil.copyfile(src, dst)
            dst.chmod(st.st_mode & 0o7777)
        else:
            continue  # a device node or FIFO: not configuration
        os.lchown(dst, st.st_uid, st.st_gid)
        if not src.is_symlink():
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        copied.append(rel)
    return copied


def pyc_sources(native: Path, root: Path, native_arch: str, arch: str) -> list[str]:
    """Image paths of the Python sources the native root holds bytecode for, present in the
    target too (an architecture's own module, such as _sysconfigdata__<triplet>, under the
    target's name)."""
    out = []
    for pyc in native.rglob("__pycache__/*.pyc"):
        m = PYC.match(str(pyc.relative_to(native)))
        if m and ".opt-" not in m.group("name"):
            src = f"{m.group('dir')}/{m.group('name')}.py"
            src = src.replace(TRIPLETS[native_arch], TRIPLETS[arch])
            if (root / src).is_file():
                out.append("/" + src)
    return sorted(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rootfs", type=Path, required=True)
    ap.add_argument("--native", type=Path, required=True)
    ap.add_argument("--arch", required=True, choices=sorted(TRIPLETS))
    ap.add_argument("--native-arch", required=True, choices=sorted(TRIPLETS))
    ap.add_argument("--pyc-list", type=Path, required=True)
    args = ap.parse_args()
    root, native = args.rootfs, args.native

    debs = [
        line.split(None, 1)
        for line in (root / "debootstrap/debpaths").read_text().splitlines()
        if line.strip()
    ]
    pkgs = [read_package(root, name, root / path.lstrip("/")) for name, path in debs]
    theirs = native_packages(native)
    ours = {p.name: p.field("Version") for p in pkgs}
    differ = sorted(
        n
        for n in set(theirs) | set(ours)
        if n not in theirs or n not in ours or not same_release(theirs[n], ours[n])
    )
    if differ:
        sys.exit(
            "foreign_base: the native base holds other packages or versions: "
            + ", ".join(f"{n} ({theirs.get(n, '-')} / {ours.get(n, '-')})" for n in differ[:10])
        )
    for pkg in pkgs:
        unpack(root, pkg)
    write_database(root, pkgs, args.arch)
    copied = copy_over(native, root, script_made(native, args.native_arch))
    sources = pyc_sources(native, root, args.native_arch, args.arch)
    args.pyc_list.write_text("".join(s + "\n" for s in sources))
    print(
        f"foreign_base: {len(pkgs)} packages unpacked; {len(copied)} paths the maintainer "
        f"scripts made taken from the native base; {len(sources)} sources to byte-compile",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
