"""Make the image's virtualenv small by removing only what edgefd never imports at run time.

    python slim_venv.py VENV            prune, compile bytecode, print the size table
    python slim_venv.py --report VENV   only print what each installed distribution costs

Runs inside the Dockerfile's builder stage with the virtualenv's own interpreter (standard
library only). What goes, and why it is safe (tests/image proves it by running every console
script's real code paths inside the built image, and checks on the host that none of these
modules is ever imported):

* `kubernetes.aio`, and the distributions only it needs. Since release 35 the kubernetes client
  ships an asyncio twin of itself (69 MB installed) and requires aiohttp and its helpers for it.
  edgefd talks to the API server through the synchronous `kubernetes.client.rest` layer only
  (tools: feature_sink/nodeapi.py); `import kubernetes` never imports `kubernetes.aio`.
* `kubernetes.client.api.*` and `kubernetes.client.models.*`: the generated typed API classes
  and models (57 MB). The client loads them lazily, on first attribute access; feature-sink
  never uses them (it sends its own requests through the REST layer and reads the JSON itself:
  building the models cost seconds and tens of MiB), so they are never imported. The two
  package `__init__` files stay: `kubernetes.client` imports them.
* pip, setuptools, wheel: installing tools; nothing installs into the image at run time.
* Type stubs (`*.pyi`, `py.typed`) and test packages shipped inside distributions.

Everything else is kept, including dependencies that look optional but are imported when the
kubernetes client is (oauthlib, requests, websocket-client, pydantic, durationpy, ...).
Bytecode is compiled for everything that remains: compiling only the modules that the code
paths import would save 2.7 MB (of 9.6 MB of bytecode, amd64), and any other path would then
compile in memory on every start, since the root filesystem is read-only. It is compiled as
unchecked hash-based bytecode, used without a look at its source: timestamp bytecode records
the source's mtime in whole seconds, and the image's layers round a file's mtime to the
nearest second, so a file written in the second half of a second had bytecode the interpreter
took for stale (136 of edgefd's 177 modules in one build): every process compiled them again
at every start, in memory, and kept the compiler's garbage. Measured on the real node (e2e,
DRA): the pod's working set 99-105 MiB with such builds against 93 MiB, at random from one
build to the next.
"""

from __future__ import annotations

import argparse
import compileall
import py_compile
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

# Distributions that kubernetes requires only for kubernetes.aio (its asyncio client).
ASYNC_ONLY = {
    "aiohttp",
    "aiohttp-retry",
    "aiosignal",
    "aiohappyeyeballs",
    "async-timeout",
    "frozenlist",
    "multidict",
    "propcache",
    "yarl",
    "attrs",
}
# Modules edgefd never imports, as dotted patterns: "pkg" is the package and everything in it;
# "pkg.*" is every module in it except the package itself (its __init__ stays importable).
NEVER_IMPORTED = (
    "kubernetes.aio",
    "kubernetes.client.api.*",
    "kubernetes.client.models.*",
)
TOOLING = ("pip", "setuptools", "wheel")
STUB_FILES = ("*.pyi", "py.typed")
TEST_DIRS = ("tests",)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dropped(module: str) -> bool:
    """True if `module` (a dotted name) is among the modules removed from the image."""
    for pattern in NEVER_IMPORTED:
        if pattern.endswith(".*"):
            if module.startswith(pattern[:-1]):
                return True
        elif module == pattern or module.startswith(pattern + "."):
            return True
    top = module.split(".")[0]
    return top in DROPPED_TOP_LEVEL


# Import names of the dropped distributions (for `dropped` above; checked against the real
# top_level.txt / RECORD of each distribution by `owners()` when the image is built).
DROPPED_TOP_LEVEL = {
    "aiohttp",
    "aiohttp_retry",
    "aiosignal",
    "aiohappyeyeballs",
    "async_timeout",
    "frozenlist",
    "multidict",
    "propcache",
    "yarl",
    "attr",
    "attrs",
    "pip",
    "setuptools",
    "pkg_resources",
    "_distutils_hack",
    "wheel",
}


def site_packages(venv: Path) -> Path:
    (sp,) = venv.glob("lib/python3*/site-packages")
    return sp


def requirements(dist: metadata.Distribution) -> set[str]:
    """Names a distribution requires unconditionally (no extras, markers true here)."""
    out = set()
    for req in dist.requires or []:
        name, _, marker = req.partition(";")
        if "extra" in marker:
            continue
        if marker.strip() and not _marker_true(marker):
            continue
        out.add(canonical(re.split(r"[\s<>=!~\[(]", name.strip(), maxsplit=1)[0]))
    return out


def _marker_true(marker: str) -> bool:
    # The only markers on these requirements are python_version ones; evaluate them simply.
    m = re.fullmatch(r'\s*python_version\s*(<=|<|>=|>|==|!=)\s*"([\d.]+)"\s*', marker)
    if not m:
        return True
    want = tuple(int(x) for x in m.group(2).split("."))
    have = sys.version_info[: len(want)]
    return {
        "<": have < want,
        "<=": have <= want,
        ">": have > want,
        ">=": have >= want,
        "==": have == want,
        "!=": have != want,
    }[m.group(1)]


def owners(sp: Path) -> dict[str, str]:
    """Top-level entry of site-packages (package dir, module file, dist-info) -> distribution."""
    out: dict[str, str] = {}
    for dist in metadata.distributions(path=[str(sp)]):
        name = canonical(dist.metadata["Name"])
        for f in dist.files or []:
            top = f.parts[0]
            if top == "..":  # console scripts in bin/
                continue
            if top == "__pycache__":  # typing_extensions.py's bytecode and the like
                top = f.parts[1].split(".")[0] + ".py"
            out.setdefault(top, name)
    return out


def sizes(sp: Path) -> dict[str, int]:
    """Bytes on disk per distribution (sources, bytecode, extensions, metadata)."""
    own = owners(sp)
    total: dict[str, int] = {}
    for entry in sp.iterdir():
        files = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file()]
        if entry.name == "__pycache__":
            for p in files:
                key = p.name.split(".")[0] + ".py"
                total[own.get(key, "?")] = total.get(own.get(key, "?"), 0) + p.stat().st_size
            continue
        name = own.get(entry.name, "?" + entry.name)
        total[name] = total.get(name, 0) + sum(p.stat().st_size for p in files)
    return total


def table(before: dict[str, int], after: dict[str, int] | None = None) -> str:
    rows = sorted(before, key=lambda n: -before[n])
    mb = 1e6
    lines = []
    for n in rows:
        cells = f"| {n} | {before[n] / mb:.1f}"
        if after is not None:
            cells += f" | {after.get(n, 0) / mb:.1f}"
        lines.append(cells + " |")
    head = "| distribution | installed MB |"
    if after is not None:  # the build installs without bytecode, then compiles what stays
        head = "| distribution | installed MB, no bytecode | in the image MB, with bytecode |"
    foot = f"| total | {sum(before.values()) / mb:.1f}"
    if after is not None:
        foot += f" | {sum(after.values()) / mb:.1f}"
    sep = "|---" * head.count("|")
    return "\n".join([head, sep[: -len("|---")] + "|", *lines, foot + " |"])


def check_drop_list(sp: Path) -> None:
    """Refuse to drop a distribution that something kept still requires."""
    dists = {canonical(d.metadata["Name"]): d for d in metadata.distributions(path=[str(sp)])}
    gone = ASYNC_ONLY | set(TOOLING)
    for name, dist in dists.items():
        if name in gone or name == "kubernetes":
            continue
        needed = requirements(dist) & gone
        if needed:
            sys.exit(f"slim_venv: {name} requires {sorted(needed)}: revise ASYNC_ONLY")
    # ...and that each dropped distribution installs only the import names we say we drop
    own = owners(sp)
    for top, name in own.items():
        if (
            name in gone
            and not top.endswith((".dist-info", ".pth"))
            and top.removesuffix(".py") not in DROPPED_TOP_LEVEL
        ):
            sys.exit(f"slim_venv: {name} installs {top}, not in DROPPED_TOP_LEVEL")


def remove_modules(sp: Path) -> None:
    for pattern in NEVER_IMPORTED:
        parts = pattern.removesuffix(".*").split(".")
        pkg = sp.joinpath(*parts)
        if not pkg.is_dir():
            sys.exit(f"slim_venv: {pattern}: {pkg} is not a package (has the client changed?)")
        if pattern.endswith(".*"):
            for p in pkg.iterdir():
                if p.name != "__init__.py":
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
        else:
            shutil.rmtree(pkg)


def remove_stubs_and_tests(sp: Path) -> None:
    for glob in STUB_FILES:
        for p in sp.rglob(glob):
            p.unlink()
    for name in TEST_DIRS:
        for p in list(sp.rglob(name)):
            # only a test package inside a distribution's package, never a top-level one
            if p.is_dir() and p.parent != sp and (p / "__init__.py").exists():
                shutil.rmtree(p)


def pip_uninstall(venv: Path, names: list[str]) -> None:
    installed = {canonical(d.metadata["Name"]) for d in metadata.distributions()}
    names = [n for n in names if n in installed]
    if names:
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y", *names],
            check=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("venv", type=Path)
    ap.add_argument("--report", action="store_true", help="only print the size table")
    args = ap.parse_args()
    sp = site_packages(args.venv)
    before = sizes(sp)
    if args.report:
        print(table(before))
        return
    check_drop_list(sp)
    pip_uninstall(args.venv, sorted(ASYNC_ONLY))
    remove_modules(sp)
    remove_stubs_and_tests(sp)
    for p in sp.rglob("__pycache__"):
        shutil.rmtree(p)
    pip_uninstall(args.venv, list(TOOLING))  # last: pip removes itself
    unchecked = py_compile.PycInvalidationMode.UNCHECKED_HASH  # the image never changes
    if not compileall.compile_dir(sp, quiet=1, workers=0, invalidation_mode=unchecked):
        sys.exit("slim_venv: bytecode compilation failed")
    print(table(before, sizes(sp)))


if __name__ == "__main__":
    main()
