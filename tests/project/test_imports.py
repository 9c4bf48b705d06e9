"""The house's structure is checked, not hoped for: the import contracts in setup.cfg (layers,
independent tools, third-party clients imported only where named), no import cycle anywhere,
small modules, and start-up paths that import only what they use."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400
GENERATED = {"deviceplugin_pb2.py", "deviceplugin_pb2_grpc.py"}


def test_import_contracts_hold() -> None:
    lint = shutil.which("lint-imports")
    assert lint, "import-linter is a test dependency (pip install -e .[test])"
    proc = subprocess.run(
        [lint, "--no-cache", str(ROOT / "setup.cfg")],
        cwd="/",  # the installed package, not a `tools` folder next to the cwd
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_cycle_anywhere() -> None:
    """Also lazy imports inside functions count: a cycle hidden in a function is still one."""
    import grimp  # import-linter's own graph (setup.cfg [test]): never skip on its absence

    g = grimp.build_graph("edgefd")
    graph = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_modules_stay_small() -> None:
    big = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "tools").rglob("*.py")
        if p.name not in GENERATED and (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert big == {}


@pytest.mark.parametrize(
    ("module", "absent"),
    [
        ("edgefd.dt_labeller.cli", ("logging", "dataclasses", "yaml", "kubernetes", "grpc")),
        ("edgefd.usb_scan.cli", ("logging", "dataclasses", "yaml", "kubernetes", "grpc")),
        ("edgefd.pci_scan.cli", ("logging", "dataclasses", "yaml", "kubernetes", "grpc")),
        ("edgefd.feature_sink.cli", ("kubernetes", "grpc", "yaml", "prometheus_client")),
        ("edgefd.devplugin.cli", ("kubernetes", "yaml", "prometheus_client", "pyudev")),
        ("edgefd.device_keeper.cli", ("kubernetes", "grpc", "yaml", "jeepney")),
        ("edgefd.kubectl_edgefd.cli", ("kubernetes", "grpc", "yaml", "celpy", "urllib3")),
    ],
)
def test_start_up_imports_only_what_the_command_line_needs(
    module: str, absent: tuple[str, ...]
) -> None:
    """Importing a tool's command (what `--help` and usage errors cost) loads click and the
    tool's own path, nothing heavy: the rest is imported when a code path needs it."""
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert not {m for m in absent if m in loaded}


def test_the_import_name_is_edgefd_and_tools_is_not_installed() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import edgefd, importlib.util as u; print(u.find_spec('tools'))"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "None", proc.stdout + proc.stderr


RUN_AND_LIST = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_module(sys.argv[0], run_name="__main__")
except SystemExit as e:
    assert not e.code, e.code
sys.stdout.flush()
sys.stderr.write(" ".join(sorted(sys.modules)))
"""


@pytest.mark.parametrize("tool", ["dt_labeller", "usb_scan", "pci_scan"])
def test_a_quiet_successful_run_never_imports_logging(tool: str, tmp_path: Path) -> None:
    """At the default verbosity a successful producer logs nothing, so it must not pay for
    importing `logging` (edgefd.core.log imports it only for a message that is shown)."""
    from tests.fixturegen import build_host

    host = build_host("rpi4-coral", tmp_path / "host")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            RUN_AND_LIST,
            f"edgefd.{tool}",
            "--dry-run",
            "--host-root",
            str(host),
        ],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stderr.split())
    assert "logging" not in loaded and "yaml" not in loaded and "pyudev" not in loaded
    assert "importlib.metadata" not in loaded  # the version is a constant (core/version.py)
    if tool != "dt_labeller":
        # the scanners' start-up budget: no dataclass built, no json, hashlib or glob loaded
        # (Records, the catalogue read as a literal, names and globs only when needed)
        assert not {"dataclasses", "json", "hashlib", "glob"} & loaded
