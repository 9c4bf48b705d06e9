"""Regenerate every set of committed gRPC stubs, reproducibly: the device plugin's
(deviceplugin.proto, ours), the DRA kubelet plugin's (the kubelet's own dra/v1,
pluginregistration/v1 and dra-health/{v1,v1alpha1} api.proto, read from the k8s.io/kubelet Go
module) and the device keeper's (the kubelet's podresources/v1 api.proto; its CRI subset,
cri.proto).

The generated modules are committed so that running the plugin needs only grpcio and
protobuf, not the code generator nor Go. This script is the one way they are produced; a test
regenerates them into a temporary directory and compares, so a hand edit, a drifted generator
or a changed kubelet .proto cannot go unnoticed.

The kubelet's files are taken from the Go module cache (`go env GOMODCACHE`), where
scripts/build-harness puts k8s.io/kubelet at the version the harness pins (KUBELET_VERSION, kept
equal to tests/harness/go.mod by a test); EDGEFD_KUBELET_MODULE names another checkout of it.
They are staged under our package path with their content untouched: the proto package
(`k8s.io.kubelet.pkg.apis.dra.v1`, `pluginregistration`) is what the wire method names are
made of, so it must be the kubelet's.

Produced with grpcio-tools 1.85.1 (libprotoc 35.1), which writes protobuf gencode 7.35.1: the
modules refuse to load with an older protobuf runtime (their own version check), so the
runtime requirement follows the generator.

Usage: python -m edgefd.devplugin.api.generate [--only NAME] [OUT_DIR]
(OUT_DIR: every set into one directory, for comparing; default: each set's own package.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

API_DIR = Path(__file__).resolve().parent
DRA_API_DIR = API_DIR.parent / "dra" / "api"
# the device keeper's stubs are made here too (a directory, not an import: the tools stay apart)
KEEPER_API_DIR = API_DIR.parents[1] / "device_keeper" / "api"
KUBELET_MODULE = "k8s.io/kubelet"
KUBELET_VERSION = "v0.37.2"

RUFF_OFF = "# ruff: noqa\n# fmt: off\n"
GO_FALLBACKS = ("/usr/local/go/bin/go",)  # where the bootstrap installs Go when not on PATH


def kubelet_module_dir() -> Path:
    """Where the k8s.io/kubelet module at KUBELET_VERSION is unpacked (the Go module cache)."""
    override = os.environ.get("EDGEFD_KUBELET_MODULE")
    if override:
        return Path(override)
    cache = os.environ.get("GOMODCACHE")
    if not cache:
        go = shutil.which("go") or next((g for g in GO_FALLBACKS if os.path.exists(g)), None)
        if go:
            out = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True)
            cache = out.stdout.strip() if out.returncode == 0 else ""
    if not cache:
        gopath = os.environ.get("GOPATH") or str(Path.home() / "go")
        cache = os.path.join(gopath.split(os.pathsep)[0], "pkg", "mod")
    return Path(cache) / f"{KUBELET_MODULE}@{KUBELET_VERSION}"


class SourceMissing(RuntimeError):
    """A .proto a stub set is generated from is not on this machine."""


def _kubelet_proto(rel: str) -> Callable[[], Path]:
    def find() -> Path:
        path = kubelet_module_dir() / rel
        if not path.is_file():
            raise SourceMissing(
                f"{path} is missing: scripts/build-harness downloads {KUBELET_MODULE} "
                f"{KUBELET_VERSION} into the Go module cache (or set EDGEFD_KUBELET_MODULE)"
            )
        return path

    return find


@dataclass(frozen=True)
class StubSet:
    """One .proto and the two modules generated from it."""

    name: str
    source: Callable[[], Path]  # where the .proto is read from
    origin: str  # named in the generated files' header
    import_path: str  # the path protoc sees: the installed package's, so imports resolve
    out_dir: Path  # where the modules are committed

    @property
    def stem(self) -> str:
        return Path(self.import_path).stem

    @property
    def outputs(self) -> tuple[str, str]:
        return (f"{self.stem}_pb2.py", f"{self.stem}_pb2_grpc.py")


STUB_SETS: tuple[StubSet, ...] = (
    StubSet(
        "deviceplugin",
        lambda: API_DIR / "deviceplugin.proto",
        "deviceplugin.proto",
        "edgefd/devplugin/api/deviceplugin.proto",
        API_DIR,
    ),
    StubSet(
        "dra",
        _kubelet_proto("pkg/apis/dra/v1/api.proto"),
        f"{KUBELET_MODULE}@{KUBELET_VERSION} pkg/apis/dra/v1/api.proto",
        "edgefd/devplugin/dra/api/dra.proto",
        DRA_API_DIR,
    ),
    StubSet(
        "pluginregistration",
        _kubelet_proto("pkg/apis/pluginregistration/v1/api.proto"),
        f"{KUBELET_MODULE}@{KUBELET_VERSION} pkg/apis/pluginregistration/v1/api.proto",
        "edgefd/devplugin/dra/api/pluginregistration.proto",
        DRA_API_DIR,
    ),
    # the health service, in both packages the 1.37 kubelet speaks (it picks v1 when offered)
    StubSet(
        "drahealth",
        _kubelet_proto("pkg/apis/dra-health/v1/api.proto"),
        f"{KUBELET_MODULE}@{KUBELET_VERSION} pkg/apis/dra-health/v1/api.proto",
        "edgefd/devplugin/dra/api/health.proto",
        DRA_API_DIR,
    ),
    StubSet(
        "drahealth-v1alpha1",
        _kubelet_proto("pkg/apis/dra-health/v1alpha1/api.proto"),
        f"{KUBELET_MODULE}@{KUBELET_VERSION} pkg/apis/dra-health/v1alpha1/api.proto",
        "edgefd/devplugin/dra/api/health_v1alpha1.proto",
        DRA_API_DIR,
    ),
    StubSet(
        "podresources",
        _kubelet_proto("pkg/apis/podresources/v1/api.proto"),
        f"{KUBELET_MODULE}@{KUBELET_VERSION} pkg/apis/podresources/v1/api.proto",
        "edgefd/device_keeper/api/podresources.proto",
        KEEPER_API_DIR,
    ),
    StubSet(
        "cri",
        lambda: KEEPER_API_DIR / "cri.proto",
        "device_keeper/api/cri.proto",
        "edgefd/device_keeper/api/cri.proto",
        KEEPER_API_DIR,
    ),
)
# the device plugin's own set, under its historical names (tests and callers use these)
PROTO = API_DIR / "deviceplugin.proto"
PROTO_IMPORT_PATH = STUB_SETS[0].import_path
OUTPUTS = STUB_SETS[0].outputs


def by_name(name: str) -> StubSet:
    for s in STUB_SETS:
        if s.name == name:
            return s
    raise KeyError(f"no stub set {name!r} (have: {', '.join(s.name for s in STUB_SETS)})")


def generate_set(stubs: StubSet, out_dir: Path | None = None) -> list[Path]:
    """Run protoc on one .proto, writing its two modules into `out_dir` (default: their
    package). protoc sees the proto at its installed package path (the source folder is
    `tools/`, the package `edgefd`), so the gRPC module imports the message module the way the
    installed package finds it."""
    from grpc_tools import protoc  # only needed to regenerate, not to run

    src_proto = stubs.source()
    out = out_dir or stubs.out_dir
    header = f"# Generated by edgefd/devplugin/api/generate.py from {stubs.origin}. DO NOT EDIT.\n"
    rel = stubs.import_path
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as src:
        staged = Path(src) / rel
        staged.parent.mkdir(parents=True)
        staged.write_bytes(src_proto.read_bytes())
        include = str(Path(protoc.__file__).resolve().parent / "_proto")
        code = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{src}",
                f"-I{include}",
                f"--python_out={tmp}",
                f"--grpc_python_out={tmp}",
                rel,
            ]
        )
        if code != 0:
            raise RuntimeError(f"protoc failed on {src_proto} with exit code {code}")
        out.mkdir(parents=True, exist_ok=True)
        written = []
        gen_dir = Path(tmp) / Path(rel).parent
        for name in stubs.outputs:
            body = (gen_dir / name).read_text()
            dest = out / name
            dest.write_text(header + RUFF_OFF + body)
            written.append(dest)
    return written


def generate(out_dir: Path | None = None, only: str | None = None) -> list[Path]:
    """Every stub set (or just `only`), into `out_dir` or each set's own package."""
    sets = [by_name(only)] if only else list(STUB_SETS)
    written: list[Path] = []
    for s in sets:
        written += generate_set(s, out_dir)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m edgefd.devplugin.api.generate")
    p.add_argument("--only", choices=[s.name for s in STUB_SETS])
    p.add_argument("out_dir", nargs="?", type=Path)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        paths = generate(args.out_dir, args.only)
    except SourceMissing as e:
        print(f"generate: error: {e}", file=sys.stderr)
        return 3
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
