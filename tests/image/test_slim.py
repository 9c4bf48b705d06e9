"""What the image's virtualenv drops (scripts/image/slim_venv.py) is never imported by edgefd.

Every console script's code paths (tests/image/codepaths.py) run here, on the host's full
installation, under an import recorder; none may import a module the image does not have, and
each must reach the code it is there for. No image is built: this runs everywhere, fast, and
fails as soon as a change starts using, say, the kubernetes client's typed API classes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import free_port
from tests.image.codepaths import CODE_PATHS, CodePath, Inputs
from tests.image.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]

_RECORD = """
import atexit, importlib, json, sys
out, target = sys.argv[1], sys.argv[2]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = sys.argv[3:]
mod, _, attr = target.partition(":")
getattr(importlib.import_module(mod), attr)()
"""


def slim() -> ModuleType:
    return load_script(ROOT / "scripts" / "image" / "slim_venv.py")


def startup_modules() -> set[str]:
    """What this interpreter imports before any edgefd code (site, .pth hooks of the host's
    environment such as setuptools' _distutils_hack): not edgefd's imports."""
    code = "import json, sys; print(json.dumps(sorted(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(r.stdout))


def console_scripts() -> dict[str, str]:
    """Console script name -> 'module:function', from the installed edgefd's metadata."""
    eps = metadata.distribution("edgefd").entry_points
    return {ep.name: ep.value for ep in eps if ep.group == "console_scripts"}


@pytest.fixture(scope="module")
def host_inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    return Inputs.make(tmp_path_factory.mktemp("inputs"))


def run_recorded(path: CodePath, inp: Inputs, out: Path) -> tuple[int, str, str]:
    """Run one code path on the host; the modules it imported are written to `out`."""
    inp.reset_work()
    port = free_port()
    argv = inp.fill(path.argv, port, str(inp.host), str(inp.x86), str(inp.work))
    cmd = [sys.executable, "-c", _RECORD, str(out), console_scripts()[path.tool], *argv]
    if not (path.serve or path.ready_file):
        r = subprocess.run(cmd, input=path.stdin, capture_output=True, text=True, timeout=120)
        return r.returncode, r.stdout, r.stderr
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(path, port, Path(str(path.ready_file).format(work=inp.work)), proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    return proc.returncode, stdout, stderr


def wait_ready(path: CodePath, port: int, ready_file: Path, proc, timeout: float = 60) -> str:
    """Wait until a long-running path serves `path.serve` (returns the body) or writes its file."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{path.name} exited early with {proc.returncode}")
        if path.serve:
            try:
                url = f"http://127.0.0.1:{port}{path.serve}"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    return resp.read().decode()
            except OSError:
                pass
        elif ready_file.exists():
            return ready_file.read_text()
        time.sleep(0.1)
    raise AssertionError(f"{path.name} not ready within {timeout} s")


@pytest.mark.parametrize("path", CODE_PATHS, ids=lambda p: p.name)
def test_code_path_imports_nothing_the_image_drops(
    path: CodePath, host_inputs: Inputs, tmp_path: Path
) -> None:
    rc, stdout, stderr = run_recorded(path, host_inputs, tmp_path / "modules.json")
    assert rc == path.rc, stderr[-2000:]
    for text in path.expect:
        assert text in stdout
    modules = set(json.loads((tmp_path / "modules.json").read_text())) - startup_modules()
    s = slim()
    assert sorted(m for m in modules if s.dropped(m)) == []
    for m in path.reaches:
        assert m in modules, f"{path.name} did not reach {m}: the path no longer tests it"


def test_every_console_script_has_a_code_path() -> None:
    assert {p.tool for p in CODE_PATHS} == set(console_scripts())


def test_drop_patterns() -> None:
    s = slim()
    assert s.dropped("kubernetes.aio")
    assert s.dropped("kubernetes.aio.client.api_client")
    assert s.dropped("kubernetes.client.models.v1_node")
    assert s.dropped("kubernetes.client.api.core_v1_api")
    assert s.dropped("aiohttp.client")
    assert s.dropped("pip")
    for kept in (
        "kubernetes",
        "kubernetes.client",
        "kubernetes.client.models",  # the lazy package __init__ stays
        "kubernetes.client.api",
        "kubernetes.client.rest",
        "kubernetes.config.kube_config",
        "kubernetes.aiox",
        "grpc",
        "google.protobuf",
        "yaml",
    ):
        assert not s.dropped(kept), kept


def test_drop_list_refuses_a_distribution_something_kept_needs(tmp_path: Path) -> None:
    """The build stops rather than remove what a kept distribution requires."""
    s = slim()
    sp = tmp_path / "site-packages"
    for name, requires in (("requests", ["attrs>=20"]), ("attrs", [])):
        info = sp / f"{name}-1.0.dist-info"
        info.mkdir(parents=True)
        meta = [f"Name: {name}", "Version: 1.0", *(f"Requires-Dist: {r}" for r in requires)]
        (info / "METADATA").write_text("\n".join(meta) + "\n")
        (info / "RECORD").write_text(f"{name}/__init__.py,,\n")
    with pytest.raises(SystemExit, match="requests requires"):
        s.check_drop_list(sp)
