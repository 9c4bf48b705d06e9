"""Install edgefd with its dependencies into the image's virtualenv, for the image's
architecture, from a builder of any architecture: nothing runs emulated.

    python install_venv.py --arch amd64|arm64 --installer DIR VENV SOURCE

Runs in the Dockerfile's builder stage with VENV's interpreter (standard library, plus the
`installer` package in DIR). Three steps, the same for every architecture, so the amd64 and the
arm64 image are made alike:

1. `pip wheel --no-deps SOURCE`: edgefd's own wheel (pure Python, built here).
2. `pip download --only-binary=:all:` with the target's platform tags (manylinux_2_17 up to the
   builder's glibc, which is the target's: both stages are the same Debian release), Python
   version and ABI: the wheels the target needs, chosen by pip's resolver as an install there
   would choose them. Every dependency ships binary wheels for both architectures or is pure
   Python, so no compiler is needed.
3. PyPA's `installer` unpacks each wheel into VENV: console scripts pointing at VENV's python,
   RECORD and INSTALLER as pip writes them. pip itself refuses to install a wheel whose
   platform is not the running machine's, which is the point here.

Bytecode is compiled later, by slim_venv.py, after the slimming (it is the same on every
architecture).
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import sysconfig
from pathlib import Path

MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}
OLDEST_GLIBC_MINOR = 17  # manylinux2014, the oldest tag current wheels still use


def platform_tags(arch: str, glibc: str) -> list[str]:
    """Every manylinux tag a machine of `arch` with this glibc accepts, newest first."""
    machine = MACHINES[arch]
    major, minor = (int(x) for x in glibc.split(".")[:2])
    if major != 2 or minor < OLDEST_GLIBC_MINOR:
        raise SystemExit(f"install_venv: glibc {glibc} is older than manylinux2014")
    tags = [f"manylinux_2_{m}_{machine}" for m in range(minor, OLDEST_GLIBC_MINOR - 1, -1)]
    return [*tags, f"manylinux2014_{machine}"]


def pip(venv: Path, *args: str) -> None:
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", *args], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, choices=sorted(MACHINES))
    ap.add_argument("--installer", required=True, type=Path, help="where `installer` is")
    ap.add_argument("--wheels", type=Path, default=Path("/tmp/wheels"))
    ap.add_argument("venv", type=Path)
    ap.add_argument("source", type=Path)
    args = ap.parse_args()

    libc, glibc = platform.libc_ver()
    if libc != "glibc":
        raise SystemExit(f"install_venv: the builder's C library is {libc or 'unknown'}, not glibc")
    py = f"{sys.version_info.major}{sys.version_info.minor}"
    pip(args.venv, "wheel", "--no-deps", "-q", "--wheel-dir", str(args.wheels), str(args.source))
    (own,) = args.wheels.glob("edgefd-*.whl")
    target = [f"--platform={t}" for t in platform_tags(args.arch, glibc)]
    target += [f"--python-version={py}", "--implementation=cp", f"--abi=cp{py}"]
    pip(
        args.venv,
        "download",
        "-q",
        "--only-binary=:all:",
        *target,
        "-d",
        str(args.wheels),
        str(own),
    )

    sys.path.insert(0, str(args.installer))
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    scheme = sysconfig.get_paths()  # VENV's: this script runs with VENV's interpreter
    if not Path(scheme["purelib"]).is_relative_to(args.venv.resolve()):
        raise SystemExit(f"install_venv: run me with {args.venv}/bin/python, not {sys.executable}")
    wheels = sorted(args.wheels.glob("*.whl"))
    for whl in wheels:
        with WheelFile.open(whl) as source:
            # where pip puts a distribution's C headers in a virtualenv (sysconfig has no key)
            headers = (
                args.venv
                / "include"
                / "site"
                / f"python{sys.version_info.major}.{sys.version_info.minor}"
                / source.distribution
            )
            dest = SchemeDictionaryDestination(
                {k: scheme[k] for k in ("purelib", "platlib", "scripts", "data")}
                | {"headers": str(headers)},
                interpreter=str(args.venv / "bin" / "python"),
                script_kind="posix",
                bytecode_optimization_levels=(),  # slim_venv.py compiles what stays
            )
            install(source, dest, {"INSTALLER": b"pip\n"})
    # every requirement met (markers evaluated here, where they are the target's but for the
    # machine, which no requirement of edgefd's depends on)
    pip(args.venv, "check")
    print(f"install_venv: {len(wheels)} wheels for linux/{args.arch} into {args.venv}")


if __name__ == "__main__":
    main()
