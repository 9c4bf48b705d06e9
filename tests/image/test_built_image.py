"""The built image, run without a container engine: every console script's real code paths
work inside it, as the DaemonSet runs them (the manifest's uid, no capabilities, read-only
root), on amd64 and on arm64 under qemu, with the same bytes out; its size stays in budget; a
warm rebuild is a no-op.

`scripts/build-image --arch all` builds the images (`--arch amd64` where arm64 cannot run);
see tests/image/conftest.py for what skips where.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import re
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import free_port
from tests.image.codepaths import CODE_PATHS, CodePath, Inputs, by_name
from tests.image.conftest import BUILD, ROOT, Builds, load_oci
from tests.image.rootfs import ImageRoot, Mount
from tests.image.test_slim import wait_ready
from tests.k8s.test_manifests import daemonset, every_container, pod_spec, setting

pytestmark = pytest.mark.image

ARCHES = ("amd64", "arm64")
IMAGE = "ghcr.io/edgefd/edgefd:0.1.0"
VENV = "/opt/edgefd"
EDGEFD_LAYER_BUDGET = 80_000_000  # bytes: edgefd's own layer (the virtualenv)
# the packages the project is built on: slimming may never remove one
FOUNDATIONS = ("click", "pyyaml", "pyudev", "kubernetes", "grpcio", "protobuf", "jeepney")


def uid_of(tool: str) -> int | None:
    """The uid the DaemonSets run the container whose command is `tool` as; None (the image's
    own user) for a tool no container runs by itself."""
    for c in every_container():
        if c["command"][0] == tool:
            return int(c["securityContext"]["runAsUser"])
    return None


def mounts(inp: Inputs) -> list[Mount]:
    return [
        Mount(inp.host, "/host"),
        Mount(inp.x86, "/x86"),
        Mount(inp.work, "/work", writable=True),
    ]


def prepare(inp: Inputs) -> None:
    inp.reset_work()
    for p in [inp.work, *inp.work.rglob("*")]:
        p.chmod(0o777 if p.is_dir() else 0o666)


# (arch, code path) -> its run: the byte comparison reuses the runs of the code-path tests (a
# run under qemu costs seconds) instead of running them all again
RUNS: dict[tuple[str, str], tuple[int, str, str]] = {}


def run_in_image(root: ImageRoot, path: CodePath, inp: Inputs) -> tuple[int, str, str]:
    if (root.arch, path.name) not in RUNS:
        RUNS[root.arch, path.name] = _run_in_image(root, path, inp)
    return RUNS[root.arch, path.name]


def _run_in_image(root: ImageRoot, path: CodePath, inp: Inputs) -> tuple[int, str, str]:
    prepare(inp)
    port = free_port()
    argv = inp.fill(path.argv, port, "/host", "/x86", "/work")
    uid = uid_of(path.tool)
    if not (path.serve or path.ready_file):
        r = root.run(argv, mounts(inp), uid=uid, stdin=path.stdin, timeout=600)
        return r.returncode, r.stdout, r.stderr
    proc = root.popen(argv, mounts(inp), uid=uid, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ready = Path(str(path.ready_file).format(work=inp.work))
    try:
        body = wait_ready(path, port, ready, proc, timeout=300)
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    return proc.returncode, stdout + body, stderr


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("path", CODE_PATHS, ids=lambda p: p.name)
def test_code_path_runs_in_the_image(arch: str, path: CodePath, image_root, inputs: Inputs) -> None:
    rc, stdout, stderr = run_in_image(image_root(arch), path, inputs)
    assert rc == path.rc, f"exit {rc}, stderr:\n{stderr[-3000:]}"
    assert "Traceback" not in stderr, stderr[-3000:]
    for text in path.expect:
        assert text in stdout


@pytest.mark.parametrize("name", ["dt-dtb", "dt-json", "usb-dry", "usb-json", "pci-dry"])
def test_same_bytes_on_arm64_and_amd64(name: str, image_root, inputs: Inputs) -> None:
    path = by_name(name)
    outs = {}
    for arch in ARCHES:
        rc, stdout, stderr = run_in_image(image_root(arch), path, inputs)
        assert rc == 0, f"{arch}: {stderr[-2000:]}"
        outs[arch] = stdout
    assert outs["amd64"]  # something to compare
    assert outs["arm64"] == outs["amd64"]


def test_the_foreign_image_really_is_arm64(image_root) -> None:
    root = image_root("arm64")
    assert root.arch == "arm64"
    r = root.run(["python3", "-c", "import platform; print(platform.machine())"])
    assert r.stdout.strip() == "aarch64", r.stderr


@pytest.mark.parametrize("arch", ARCHES)
def test_edgefd_layer_is_within_budget(arch: str, archive) -> None:
    info = load_oci().sizes(archive(arch))
    im = info["images"][arch]
    mb = 1e6
    print(
        f"{arch}: image {im['image_bytes'] / mb:.1f} MB = base {im['base_bytes'] / mb:.1f} MB"
        f" + edgefd {im['edgefd_layer_bytes'] / mb:.1f} MB;"
        f" archive {info['archive_bytes'] / mb:.1f} MB"
    )
    assert im["edgefd_layer_bytes"] <= EDGEFD_LAYER_BUDGET


def installed(root: ImageRoot) -> set[str]:
    (sp,) = (root.rootfs / VENV.lstrip("/")).glob("lib/python3*/site-packages")
    names = set()
    for info in sp.glob("*.dist-info"):
        meta = (info / "METADATA").read_text(errors="replace")
        m = re.search(r"^Name: (.+)$", meta, re.M)
        assert m, info
        names.add(re.sub(r"[-_.]+", "-", m.group(1)).lower())
    return names


def install_requires() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    out = set()
    for line in cfg["options"]["install_requires"].split("\n"):
        line = line.split("#")[0].strip()
        if line:
            name = re.split(r"[\s<>=!~\[;(]", line, maxsplit=1)[0]
            out.add(re.sub(r"[-_.]+", "-", name).lower())
    return out


@pytest.mark.parametrize("arch", ARCHES)
def test_virtualenv_keeps_every_requirement_and_no_installer(arch: str, image_root) -> None:
    root = image_root(arch)
    have = installed(root)
    assert set(FOUNDATIONS) <= install_requires()
    assert install_requires() <= have, install_requires() - have
    assert not have & {"pip", "setuptools", "wheel", "aiohttp"}, have
    (sp,) = (root.rootfs / VENV.lstrip("/")).glob("lib/python3*/site-packages")
    assert not (sp / "kubernetes" / "aio").exists()
    assert not list(sp.rglob("*.pyi"))
    # bytecode is there for what runs (a read-only root cannot cache it at run time)
    assert list((sp / "kubernetes" / "client" / "__pycache__").glob("rest.*.pyc"))
    assert not stale_bytecode(sp)


UNCHECKED_HASH = 0b01  # a pyc's flags (PEP 552): hash-based, not checked against the source


def stale_bytecode(sp: Path) -> list[str]:
    """The modules whose bytecode the interpreter would not use, so that every process
    compiles them again at start (scripts/image/slim_venv.py): timestamp bytecode whose
    recorded mtime or size is not its source's."""
    out = []
    for pyc in sp.rglob("__pycache__/*.pyc"):
        src = pyc.parent.parent / (pyc.name.split(".", 1)[0] + ".py")
        if not src.exists():
            continue
        head = pyc.read_bytes()[:16]
        flags, mtime, size = struct.unpack("<III", head[4:16])
        if flags == UNCHECKED_HASH:
            continue
        st = src.stat()
        if flags != 0 or (mtime, size) != (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF):
            out.append(str(src.relative_to(sp)))
    return out


@pytest.mark.parametrize("arch", ARCHES)
def test_image_config(arch: str, archive) -> None:
    oci = load_oci()
    with oci.Archive(archive(arch)) as a:
        assert IMAGE in a.refs()
        (im,) = a.images()
    cfg = im.config["config"]
    assert im.arch == arch and im.config["os"] == "linux"
    assert cfg["User"] == "65532:65532"
    assert any(e.startswith(f"PATH={VENV}/bin:") for e in cfg["Env"])
    assert "PYTHONDONTWRITEBYTECODE=1" in cfg["Env"]


def test_index_holds_both_platforms(archive, builds: Builds) -> None:
    archive("arm64")  # skips where arm64 cannot be built
    index = builds.archives()["index"]
    oci = load_oci()
    with oci.Archive(index) as a:
        assert a.refs() == [IMAGE]
        images = {im.arch: im.manifest_digest for im in a.images()}
    singles = {}
    for arch in ARCHES:
        with oci.Archive(archive(arch)) as a:
            singles[arch] = a.image(arch).manifest_digest
    assert images == singles


def test_warm_build_is_a_noop(archive, builds: Builds) -> None:
    arch = "all" if "arm64" in builds.archives() else "amd64"
    paths = [p for p in builds.archives().values() if p.suffix == ".tar"]
    before = {p: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()) for p in paths}
    t = time.monotonic()
    r = subprocess.run([str(BUILD), "--arch", arch], capture_output=True, text=True, timeout=600)
    took = time.monotonic() - t
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(Path(p) for p in r.stdout.split()) == sorted(paths)
    after = {p: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()) for p in paths}
    assert after == before, "a warm build rewrote an archive"
    assert "building" not in r.stderr, r.stderr
    assert took < 60, f"warm build took {took:.0f} s"


def test_a_new_tag_is_added_without_a_rebuild(archive, tmp_path: Path) -> None:
    archive("amd64")
    r = subprocess.run(
        [str(BUILD), "--arch", "amd64", "--tag", "e2e", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "building" not in r.stderr
    (out,) = r.stdout.split()
    with load_oci().Archive(out) as a:
        assert sorted(a.refs()) == sorted([IMAGE, "ghcr.io/edgefd/edgefd:e2e"])
        (im,) = a.images()
    with load_oci().Archive(archive("amd64")) as a:
        assert a.image("amd64").manifest_digest == im.manifest_digest


def test_build_script_names_the_image_the_manifests_run() -> None:
    text = BUILD.read_text()
    (image,) = re.findall(r"^IMAGE=(\S+)$", text, re.M)
    assert image == IMAGE
    assert {c["image"] for c in every_container()} == {IMAGE}


def test_build_script_refuses_bad_arguments() -> None:
    r = subprocess.run([str(BUILD), "--arch", "s390x"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "usage" in r.stderr


def test_the_manifests_startup_probe_runs_in_the_image(image_root, inputs: Inputs) -> None:
    """bus-scan's exec startup probe, word for word from the DaemonSet but for the port, run
    inside the image as the container's uid while the sidecar starts (issue 25 item 5): it
    waits for the sidecar's /readyz instead of failing, and passes."""
    root = image_root("amd64")
    prepare(inputs)
    port = free_port()
    spec = pod_spec(daemonset())
    (sidecar,) = [c for c in spec["initContainers"] if c["name"] == "bus-scan"]
    listen = setting(sidecar, "--listen") or ""
    probe = [str(port) if a == listen.rpartition(":")[2] else a
             for a in sidecar["startupProbe"]["exec"]["command"]]  # fmt: skip
    argv = inputs.fill(by_name("bus-scan-sidecar").argv, port, "/host", "/x86", "/work")
    uid = int(sidecar["securityContext"]["runAsUser"])
    proc = root.popen(argv, mounts(inputs), uid=uid, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        r = root.run(probe, [], uid=uid, timeout=120)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("/readyz: ok"), r.stdout


# -- against the real peers ----------------------------------------------------------------------


@pytest.mark.realpeer
def test_feature_sink_in_the_image_labels_its_node_with_the_pod_config(
    image_root, inputs: Inputs, kube_apiserver, node_name: str
) -> None:
    """In-cluster configuration, as in the pod: the service-account token and CA mounted at
    the standard path, KUBERNETES_SERVICE_HOST/PORT in the environment."""
    from kubernetes import client

    root = image_root("amd64")
    ns, sa = "edgefd-image-test", "sink"
    kube_apiserver.create_node(node_name)
    kube_apiserver.ensure_service_account(ns, sa)
    with kube_apiserver.admin_api() as api:
        rbac = client.RbacAuthorizationV1Api(api)
        binding = client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=f"{ns}-{sa}"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
            ),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=sa, namespace=ns)],
        )
        try:
            rbac.create_cluster_role_binding(binding)
        except client.ApiException as e:
            if e.status != 409:
                raise
    prepare(inputs)
    secrets = inputs.work / "sa"
    secrets.mkdir()
    (secrets / "token").write_text(kube_apiserver.mint_token(ns, sa))
    (secrets / "ca.crt").write_bytes(Path(kube_apiserver.ca_file).read_bytes())
    (secrets / "namespace").write_text(ns)
    for p in secrets.iterdir():
        p.chmod(0o644)
    r = root.run(
        ["feature-sink", "--once", "--node-name", node_name, "--features-dir", "/work/features"],
        [*mounts(inputs), Mount(secrets, "/var/run/secrets/kubernetes.io/serviceaccount")],
        uid=uid_of("feature-sink"),
        env={
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(kube_apiserver.port),
        },
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    node = kube_apiserver.get_node(node_name)
    assert node.metadata.labels.get("edgefd.io/edgetpu.present") == "true"
    owned = json.loads(node.metadata.annotations["edgefd.io/owned-labels"])
    assert "edgefd.io/edgetpu.present" in json.dumps(owned)


@pytest.mark.realpeer
def test_devplugin_in_the_image_registers_with_the_kubelet(image_root, inputs: Inputs) -> None:
    from tests.peers.kubelet import KubeletDevices

    root = image_root("amd64")
    prepare(inputs)
    kubelet = KubeletDevices(plugin_dir=inputs.work / "plugins")
    kubelet.start()
    argv = ["devplugin", "--host-root", "/host", "--plugin-dir", "/work/plugins", "--listen", ""]
    proc = root.popen(
        argv,
        mounts(inputs),
        uid=uid_of("devplugin"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        ev = kubelet.wait_for("registered", resource="edgefd.io/coral-usb", timeout=120)
        assert ev["endpoint"].endswith(".sock")
        kubelet.wait_for(
            lambda e: (
                e.get("event") == "devices"
                and e.get("resource") == "edgefd.io/coral-usb"
                and len(e.get("healthy", [])) == 1
            ),
            timeout=60,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
        kubelet.close()
    assert proc.returncode == 0, stderr[-3000:]
