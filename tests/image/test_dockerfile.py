"""The image and the manifests agree with the code, without a container engine.

* Every command a container runs is a console script of the package (what the image's
  virtualenv puts on PATH), and every flag and environment variable the manifest gives it is
  accepted by that tool: the click command parses the exact argv, with the manifest's env.
* The Dockerfile is multi-stage, its final stage is python:3.11-slim with the virtualenv
  copied in, no compilers or package installs, and a numeric non-root USER.
* The wheel the builder stage makes really contains the console scripts.
"""

from __future__ import annotations

import configparser
import importlib
import importlib.util
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from tests.k8s.test_manifests import (
    DAEMONSET_OF,
    daemonset,
    every_container,
    find,
    load_manifests,
    pod_spec,
)

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
VENV = "/opt/edgefd"
NONROOT_UID = 65532
# What must never be in the final image: compilers and build tooling.
BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|clang|cc|make|build-essential|libc6-dev|python3?-dev|cargo|rustc|"
    r"golang|apt-get|apt|apk|pip)\b"
)


def console_scripts() -> dict[str, str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    out = {}
    for line in cfg["options.entry_points"]["console_scripts"].strip().splitlines():
        name, _, target = line.partition("=")
        out[name.strip()] = target.strip()
    return out


def command_of(script: str) -> click.Command:
    module, _, attr = console_scripts()[script].partition(":")
    obj = getattr(importlib.import_module(module), attr)
    assert isinstance(obj, click.Command), f"{script}: {module}:{attr} is not a click command"
    return obj


def manifest_containers() -> list[dict[str, Any]]:
    return list(every_container())


# -- manifest commands vs. the tools ------------------------------------------------------------


@pytest.mark.parametrize("c", manifest_containers(), ids=lambda c: c["name"])
def test_container_command_is_a_console_script(c: dict[str, Any]) -> None:
    argv = c["command"] + c.get("args", [])
    scripts = console_scripts()
    assert argv[0] in scripts, f"{c['name']} runs {argv[0]}, not a console script"
    # containers are named after what they run, so `kubectl logs -c` is obvious; the one
    # process that scans both buses (usb-scan --also pci-scan) is bus-scan
    if any(a == "--also" or a.startswith("--also=") for a in argv):
        assert c["name"] == "bus-scan" and argv[0] == "usb-scan", argv
    else:
        assert argv[0] == c["name"]
    command_of(argv[0])


def _env_for(c: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet would give it (downward API: samples)."""
    samples = {
        "spec.nodeName": "node-a",
        "metadata.namespace": "edgefd",
        "metadata.name": "edgefd-x7k2p",
    }
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            env[e["name"]] = samples[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def _materialise_paths(
    cmd: click.Command, argv: list[str], c: dict[str, Any], tmp: Path
) -> list[str]:
    """Point options that must name an existing path at a stand-in that exists here.

    A path under a ConfigMap mount gets that ConfigMap's real content, so the tool's own
    validation of it (if its option type does any) sees what the pod would.
    """
    docs = load_manifests()
    spec = pod_spec(daemonset(docs, DAEMONSET_OF[c["name"]]))
    volumes = {v["name"]: v for v in spec["volumes"]}
    out = list(argv)
    for param in cmd.params:
        if not isinstance(param, click.Option) or not isinstance(param.type, click.Path):
            continue
        if not param.type.exists:
            continue
        for i, a in enumerate(out):
            for opt in param.opts:
                if a == opt and i + 1 < len(out):
                    j, value = i + 1, out[i + 1]
                elif a.startswith(opt + "=") and opt.startswith("--"):
                    j, value = i, a.split("=", 1)[1]
                else:
                    continue
                stand_in = tmp / value.lstrip("/")
                content = ""
                for m in c.get("volumeMounts", []):
                    base = m["mountPath"].rstrip("/") + "/"
                    vol = volumes[m["name"]]
                    if value.startswith(base) and "configMap" in vol:
                        cm = find(docs, "ConfigMap", vol["configMap"]["name"])
                        content = cm["data"][value[len(base) :]]
                if param.type.file_okay:
                    stand_in.parent.mkdir(parents=True, exist_ok=True)
                    stand_in.write_text(content)
                else:
                    stand_in.mkdir(parents=True, exist_ok=True)
                out[j] = str(stand_in) if j != i else f"{opt}={stand_in}"
    return out


def parse_as_the_pod_would(
    c: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp: Path
) -> click.Context:
    argv = c["command"] + c.get("args", [])
    cmd = command_of(argv[0])
    for var in [v for v in __import__("os").environ if v.startswith("EDGEFD_")]:
        monkeypatch.delenv(var)
    for k, v in _env_for(c).items():
        monkeypatch.setenv(k, v)
    args = _materialise_paths(cmd, argv[1:], c, tmp)
    return cmd.make_context(argv[0], args)


@pytest.mark.parametrize("c", manifest_containers(), ids=lambda c: c["name"])
def test_tool_accepts_the_manifests_flags_and_env(
    c: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.k8s.test_manifests import unknown_settings

    assert unknown_settings(c) == [], "variables no flag of the tool reads"
    ctx = parse_as_the_pod_would(c, monkeypatch, tmp_path)
    params = ctx.params
    if "host_root" in params:
        assert params["host_root"] == "/host"
    if c["name"] == "feature-sink":
        assert params["node_name"] == "node-a", "NODE_NAME must reach --node-name"
        # NodeFeature mode writes where rbac.yaml's Role allows it: the pod's namespace
        assert params["namespace"] == "edgefd", "POD_NAMESPACE must reach --namespace"


def test_flag_check_refuses_an_unknown_flag(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (c,) = [c for c in manifest_containers() if c["name"] == "bus-scan"]
    bad = dict(c, command=[*c["command"], "--no-such-flag"])
    with pytest.raises(click.UsageError):
        parse_as_the_pod_would(bad, monkeypatch, tmp_path)


@pytest.mark.parametrize("c", manifest_containers(), ids=lambda c: c["name"])
def test_help_runs_as_a_module(c: dict[str, Any]) -> None:
    """`python -m edgefd.<tool> [subcommand] --help` (what the image's console scripts wrap)
    works and names every flag the container passes (device-keeper's are its `serve`'s)."""
    module = console_scripts()[c["command"][0]].partition(":")[0].rpartition(".")[0]
    sub = [a for a in c["command"][1:2] if not a.startswith("-")]
    proc = subprocess.run(
        [sys.executable, "-m", module, *sub, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    for arg in c["command"][1:] + c.get("args", []):
        if arg.startswith("--"):
            assert arg.split("=", 1)[0] in proc.stdout, f"{arg} not in {module} --help"


# -- the Dockerfile ---------------------------------------------------------------------------


def dockerfile_stages(text: str) -> list[list[tuple[str, str]]]:
    """Instructions per stage, continuation lines joined, comments dropped."""
    logical: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    stages: list[list[tuple[str, str]]] = [[]]
    for line in logical:
        instr, _, rest = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM" and stages[-1] and any(i == "FROM" for i, _ in stages[-1]):
            stages.append([])
        stages[-1].append((instr, rest.strip()))
    return stages


def _global_args(stages: list[list[tuple[str, str]]]) -> dict[str, str]:
    args = {}
    for instr, rest in stages[0]:
        if instr == "FROM":
            break
        if instr == "ARG" and "=" in rest:
            k, v = rest.split("=", 1)
            args[k] = v
    return args


def _expand(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), value)


def final_stage_problems(text: str) -> list[str]:
    stages = dockerfile_stages(text)
    problems = []
    if len(stages) < 2:
        problems.append("not a multi-stage build")
    args = _global_args(stages)
    final = stages[-1]
    (base,) = [rest for i, rest in final if i == "FROM"]
    base = " ".join(w for w in base.split() if not w.startswith("--platform="))
    if _expand(base.split()[0], args) != "python:3.11-slim":
        problems.append(f"final stage is FROM {base}, not python:3.11-slim")
    for instr, rest in final:
        if instr == "RUN" and BUILD_TOOLS.search(rest):
            problems.append(f"final stage runs build tooling: {rest}")
    copies = [rest for i, rest in final if i == "COPY"]
    if not any(c.startswith("--from=") and VENV in c for c in copies):
        problems.append(f"final stage does not copy the virtualenv {VENV} from the builder")
    if any(not c.startswith("--from=") for c in copies):
        problems.append("final stage copies from the build context (source, not the venv)")
    users = [rest for i, rest in final if i == "USER"]
    if not users:
        problems.append("no USER: the image would run as root")
    else:
        uid = users[-1].split(":")[0]
        if not uid.isdigit() or int(uid) == 0:
            problems.append(f"USER {users[-1]} must be a numeric non-root uid")
    envs = " ".join(rest for i, rest in final if i == "ENV")
    if f"PATH={VENV}/bin" not in envs:
        problems.append("the virtualenv's bin is not on PATH")
    if not any(i == "LABEL" for i, _ in final):
        problems.append("no LABEL")
    return problems


def test_dockerfile_final_stage() -> None:
    assert final_stage_problems(DOCKERFILE.read_text()) == []
    stages = dockerfile_stages(DOCKERFILE.read_text())
    (user,) = [rest for i, rest in stages[-1] if i == "USER"]
    assert user.split(":")[0] == str(NONROOT_UID)
    # the pod's non-root containers run as the image's user
    for c in every_container():
        uid = c["securityContext"]["runAsUser"]
        assert uid in (0, NONROOT_UID), c["name"]


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda t: t.replace("USER 65532:65532", "USER root"),
            "USER root must be a numeric non-root uid",
        ),
        (lambda t: t.replace("USER 65532:65532\n", ""), "no USER: the image would run as root"),
        (
            lambda t: t.replace(
                "COPY --from=builder /opt/edgefd /opt/edgefd",
                "COPY --from=builder /opt/edgefd /opt/edgefd\n"
                "RUN apt-get update && apt-get install -y gcc",
            ),
            "final stage runs build tooling: apt-get update && apt-get install -y gcc",
        ),
        (
            lambda t: (
                t.rsplit("FROM --platform=$TARGETPLATFORM ${PYTHON_IMAGE}\n", 1)[0]
                + "FROM python:3.12\nUSER 65532\n"
            ),
            "final stage is FROM python:3.12, not python:3.11-slim",
        ),
    ],
    ids=["root-user", "no-user", "compiler", "other-base"],
)
def test_dockerfile_check_catches_mistakes(edit: Any, problem: str) -> None:
    text = DOCKERFILE.read_text()
    edited = edit(text)
    assert edited != text, "the edit did not apply: update this test with the Dockerfile"
    assert problem in final_stage_problems(edited)


def test_builder_installs_the_package_and_checks_every_entrypoint() -> None:
    stages = dockerfile_stages(DOCKERFILE.read_text())
    (base,) = [rest for i, rest in stages[0] if i == "FROM"]
    # the builder runs on the build machine's architecture: nothing emulated
    assert base.split()[0] == "--platform=$BUILDPLATFORM", base
    builder = " ".join(rest for i, rest in stages[0] if i == "RUN")
    assert 'scripts/image/install_venv.py --arch "$TARGETARCH"' in builder
    assert f"--installer /tmp/installer {VENV} /src" in builder
    for script in console_scripts():
        assert f"{VENV}/bin/{script} --help" in builder, f"builder does not smoke-test {script}"


def test_dockerignore_keeps_what_the_build_needs() -> None:
    patterns = [
        p.strip()
        for p in (ROOT / ".dockerignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]
    for needed in ("setup.cfg", "pyproject.toml", "tools"):
        assert needed not in patterns and needed + "/" not in patterns
    for excluded in (".git", ".cache", "tests"):
        assert excluded in patterns


@pytest.mark.slow
def test_wheel_declares_every_console_script(tmp_path: Path) -> None:
    """What the builder stage does first: `pip wheel --no-deps .` (offline)."""
    # offline means no build isolation: the build backend must be in this environment, and
    # the project does not put it there (pip builds edgefd in an isolated one; a venv of
    # Python 3.12+ has no setuptools). Only its absence skips; any other failure is one.
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip(f"cannot build a wheel offline here: no setuptools in {sys.prefix}")
    proc = subprocess.run(
        [
            sys.executable,
            *("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"),
            *("--wheel-dir", str(tmp_path), str(ROOT)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("edgefd-*.whl")
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))
        eps = configparser.ConfigParser()
        eps.read_string(z.read(name).decode())
        names = set(z.namelist())
    assert dict(eps["console_scripts"]) == console_scripts()
    for target in console_scripts().values():
        module = target.partition(":")[0]
        assert module.replace(".", "/") + ".py" in names, f"{module} missing from the wheel"
    assert "edgefd/bus/accelerators.yaml" in names


def test_manifest_image_is_the_same_everywhere() -> None:
    images = {c["image"] for c in manifest_containers()}
    assert len(images) == 1, images
    (image,) = images
    assert ":" in image.rpartition("/")[2] and not image.endswith(":latest"), "pin a tag"
    assert shlex.quote(image) == image
    assert yaml.safe_load(yaml.safe_dump(image)) == image
