"""The end-to-end node's parts that can be checked without root or a node: the overlay, the
sandbox image archive, the runtime's configuration, device nodes and re-plugs of a host tree,
and the rolling-update arithmetic."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.fixturegen import HostBuilder, build_host
from tests.peers.processes import REPO_ROOT, harness_binary

from .checks_lifecycle import zero_windows
from .checks_nonroot import CDI_OVERLAY
from .checks_pod import edgefd_warnings
from .checks_reboot import Watch
from .e2e import OVERLAY, overlay_settings
from .expect import plugin_offer, producer_labels
from .hosttree import copy_host_tree, device_nodes, mknod_commands, usb_ids, usb_node
from .images import PAUSE_REF, write_oci_archive
from .install import kustomization
from .kube import Sample
from .runtime import Containerd
from .scenario import Scenario


@pytest.fixture(scope="module")
def rpi4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_host("rpi4-coral", tmp_path_factory.mktemp("rpi4"))


def _kustomize(path: Path) -> list[dict]:
    kubectl = harness_binary("kubectl")
    out = subprocess.run(
        [str(kubectl), "kustomize", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_overlay_changes_only_what_it_says() -> None:
    base = {(d["kind"], d["metadata"]["name"]): d for d in _kustomize(REPO_ROOT / "k8s")}
    over = {(d["kind"], d["metadata"]["name"]): d for d in _kustomize(OVERLAY)}
    assert base.keys() == over.keys()
    daemonsets = [k for k in base if k[0] == "DaemonSet"]
    assert sorted(n for _, n in daemonsets) == ["edgefd"]  # one pod (issue 34 item 3)
    for key in base:
        if key not in daemonsets:
            assert base[key] == over[key], key
    for key in daemonsets:
        b, o = (x[key]["spec"]["template"]["spec"] for x in (base, over))
        assert o.pop("hostNetwork") is True and "hostNetwork" not in b
        # volumes: only the sysfs path
        bv, ov = ({v["name"]: v for v in s.pop("volumes")} for s in (b, o))
        assert ov.pop("host-sys")["hostPath"]["path"] == "/var/lib/edgefd-sample-node/sys"
        assert bv.pop("host-sys")["hostPath"]["path"] == "/sys"
        assert bv == ov
        for kind in ("initContainers", "containers"):
            # by name: a merge by name may reorder the long-running ones (the init
            # containers' order means something, and a merge keeps it)
            bcs, ocs = b.pop(kind, []), o.pop(kind, [])
            if kind == "containers":
                bcs, ocs = (sorted(cs, key=lambda x: x["name"]) for cs in (bcs, ocs))
            for bc, oc in zip(bcs, ocs, strict=True):
                # every listener on loopback, every HTTP probe asking loopback
                for e in oc.get("env", []):
                    if e["name"] == "EDGEFD_LISTEN":
                        assert e["value"].startswith("127.0.0.1:"), (oc["name"], e)
                        e["value"] = e["value"].replace("127.0.0.1:", ":")
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    if "httpGet" in oc.get(probe, {}):
                        assert oc[probe]["httpGet"].pop("host") == "127.0.0.1", (oc["name"], probe)
                if oc["name"] == "feature-sink":
                    base_env = {e["name"]: e for e in bc.pop("env")}
                    env = {e["name"]: e for e in oc.pop("env")}
                    added = {k: env.pop(k)["value"] for k in set(env) - set(base_env)}
                    assert added == {
                        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                        "KUBERNETES_SERVICE_PORT": "16443",
                    }
                    assert env == base_env
                for c in (bc, oc):  # a merge by name may reorder them: no order means anything
                    c.get("env", []).sort(key=lambda e: e["name"])
                assert bc == oc
        # no securityContext or anything else changed
        assert b == o, key


def test_overlay_settings_are_read_back() -> None:
    ds = next(d for d in _kustomize(OVERLAY) if d["kind"] == "DaemonSet")
    port, sys_path, image = overlay_settings(ds)
    assert port == 16443 and sys_path.endswith("/sys") and image.startswith("ghcr.io/edgefd/")


def test_pause_archive_is_an_oci_layout(tmp_path: Path) -> None:
    out = write_oci_archive(
        tmp_path / "p.tar", PAUSE_REF, {"/pause": (b"\x7fELF", 0o755)}, ["/pause"]
    )
    again = write_oci_archive(
        tmp_path / "q.tar", PAUSE_REF, {"/pause": (b"\x7fELF", 0o755)}, ["/pause"]
    )
    assert out.read_bytes() == again.read_bytes(), "deterministic"
    with tarfile.open(out) as t:
        files = {m.name: t.extractfile(m).read() for m in t.getmembers()}  # type: ignore[union-attr]
    index = json.loads(files["index.json"])
    (desc,) = index["manifests"]
    assert desc["annotations"]["io.containerd.image.name"] == PAUSE_REF
    manifest = json.loads(files["blobs/sha256/" + desc["digest"].split(":")[1]])
    config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    layer = files["blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]]
    assert config["config"]["Entrypoint"] == ["/pause"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as t:
        (m,) = t.getmembers()
        assert m.name == "pause" and m.mode == 0o755


def test_containerd_config_is_valid_toml(tmp_path: Path) -> None:
    c = Containerd(tmp_path, tmp_path, None, None, PAUSE_REF)  # type: ignore[arg-type]
    (text,) = c.files().values()  # kubeadm's: one file
    cfg = tomllib.loads(text)
    runtime = cfg["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["cdi_spec_dirs"] == ["/var/run/cdi"]  # never the machine's /etc/cdi
    assert cfg["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == PAUSE_REF
    # nothing but under the node's scratch /var/lib and /run (mountns.py), or its own dir
    paths = [cfg["root"], cfg["state"], cfg["grpc"]["address"]]
    assert all(p.startswith(("/var/lib/", "/run/")) for p in paths)
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]["Root"]
    assert runc.startswith(str(tmp_path))


def test_the_node_runs_a_stock_containerd_unless_told(tmp_path: Path) -> None:
    """Non-root checks 6n and 7b must pass without the runtime setting a distribution lacks."""
    key = "device_ownership_from_security_context"
    stock = Containerd(tmp_path, tmp_path, None, None, PAUSE_REF)  # type: ignore[arg-type]
    [text] = stock.files().values()
    assert key not in tomllib.loads(text)["plugins"]["io.containerd.cri.v1.runtime"]
    set_ = Containerd(tmp_path, tmp_path, None, None, PAUSE_REF, device_ownership=True)  # type: ignore[arg-type]
    [text] = set_.files().values()
    assert tomllib.loads(text)["plugins"]["io.containerd.cri.v1.runtime"][key] is True


def test_the_cdi_overlay_adds_only_the_device_plugins_cdi_specs(tmp_path: Path) -> None:
    """Check 6n's component: the e2e overlay plus --cdi-spec-dir and the directory, nothing
    else."""
    over = {(d["kind"], d["metadata"]["name"]): d for d in _kustomize(OVERLAY)}
    with_cdi = kustomization(tmp_path / "cdi", OVERLAY, [CDI_OVERLAY])
    cdi = {(d["kind"], d["metadata"]["name"]): d for d in _kustomize(with_cdi)}
    key = ("DaemonSet", "edgefd")  # the one pod holds devplugin
    o, c = (x.pop(key)["spec"]["template"]["spec"] for x in (over, cdi))
    assert over == cdi
    [dp] = [x for x in c["initContainers"] if x["name"] == "devplugin"]
    env = {e["name"]: e.get("value") for e in dp.pop("env")}
    assert env.pop("EDGEFD_CDI_SPEC_DIR") == "/var/run/cdi"
    [was] = [x for x in o["initContainers"] if x["name"] == "devplugin"]
    assert env == {e["name"]: e.get("value") for e in was.pop("env")}
    mounts = {m["name"]: m for m in dp.pop("volumeMounts")}
    assert mounts.pop("cdi-specs")["mountPath"] == "/var/run/cdi"
    assert list(mounts.values()) == was.pop("volumeMounts")
    assert dp == was
    volumes = {v["name"]: v for v in c.pop("volumes")}
    assert volumes.pop("cdi-specs")["hostPath"]["path"] == "/var/run/cdi"
    assert list(volumes.values()) == o.pop("volumes")
    c["initContainers"] = [x for x in c["initContainers"] if x["name"] != "devplugin"]
    o["initContainers"] = [x for x in o["initContainers"] if x["name"] != "devplugin"]
    assert c == o


def test_the_cdi_nonroot_check_runs_once_per_kustomize_device_plugin_way() -> None:
    def keys(spec: str, first: bool = True) -> set[str]:
        return {k for k, _, _ in Scenario.parse(spec).checks(first)}

    assert "6n_nonroot_cdi" in keys("device-plugin")
    assert "6n_nonroot_cdi" not in keys("device-plugin@rpi4-two-corals", first=False)
    assert "6n_nonroot_cdi" not in keys("helm") | keys("dra")


def test_device_nodes_of_a_host_tree(rpi4: Path) -> None:
    nodes = {n.devname: n for n in device_nodes(rpi4)}
    ids = usb_ids(rpi4)
    assert ids["2-1"] == ("1a6e", "089a")
    coral = usb_node(rpi4, "2-1")
    assert nodes[coral.devname] == coral and coral.major == 189
    # every dev/ entry the generator wrote has a node, and no more
    files = {str(p.relative_to(rpi4 / "dev")) for p in (rpi4 / "dev").rglob("*") if p.is_file()}
    assert files == set(nodes)
    script = mknod_commands([coral])
    assert f"mknod -m 0664 /dev/{coral.devname} c 189 {coral.minor}" in script


def test_replug_keeps_the_tree_but_the_devnum(tmp_path: Path) -> None:
    a, b = build_host("rpi4-coral", tmp_path / "a"), build_host("rpi4-coral", tmp_path / "b")
    hb = HostBuilder(b)
    for port in ("2-1", "1-1.3", "1-1.1"):
        desc = hb.describe_usb(port)
        hb.remove_usb(port)
        hb.add_usb(desc)
    diff = subprocess.run(["diff", "-r", "--no-dereference", a, b], capture_output=True)
    assert diff.returncode == 0, diff.stdout.decode()
    desc = hb.describe_usb("2-1")
    hb.remove_usb("2-1")
    assert not (b / "sys/bus/usb/devices/2-1").exists()
    hb.add_usb({**desc, "devnum": 12})
    assert usb_node(b, "2-1").devname == "bus/usb/002/012"
    assert os.path.exists(b / "dev/bus/usb/002/012")


def test_producer_labels_of_the_sample_node(rpi4: Path) -> None:
    labels = producer_labels(rpi4)
    assert labels["edgefd.io/edgetpu.present"] == "true"
    assert labels["feature.node.kubernetes.io/usb-fe_1a6e_089a.present"] == "true"
    assert any(k.startswith("beta.devicetree.org/") for k in labels)


def test_zero_windows() -> None:
    def s(t: float, n: str | None) -> Sample:
        return Sample(t, {}, {}, {} if n is None else {"r": n}, {})

    samples = [s(0, "1"), s(1, "0"), s(2, "0"), s(3, "1"), s(4, None), s(5, "1"), s(6, "0")]
    assert zero_windows(samples, "r") == [(1, 3), (4, 5), (6, 6)]


def test_scenario_names() -> None:
    assert Scenario.parse("device-plugin") == Scenario("device-plugin")
    sc = Scenario.parse("helm+dra@x86-coral-pcie")
    assert (sc.helm, sc.dra, sc.api, sc.tree) == (True, True, "dra", "x86-coral-pcie")
    assert Scenario.parse("helm").way == Scenario.parse("helm@rpi4-two-corals").way
    for bad in ("kustomize", "helm@", "dra+nfd"):
        with pytest.raises(ValueError):
            Scenario.parse(bad)


@pytest.mark.parametrize("spec", ["device-plugin", "dra"])
def test_the_reboot_runs_once_per_api_before_edgefd_is_deleted(spec: str) -> None:
    """Check 8 deletes edgefd, which the reboot needs; the second scenario of an API (another
    way of installing, another tree) does not reboot again."""
    keys = [k for k, _, _ in Scenario.parse(spec).checks()]
    assert keys.index("7r_node_reboot") < keys.index("8_delete")
    helm = Scenario.parse(f"helm+{spec}")
    assert "7r_node_reboot" not in [k for k, _, _ in helm.checks(True, first_of_api=False)]
    assert "7r_node_reboot" in [k for k, _, _ in helm.checks(False, first_of_api=True)]


def test_after_the_boot_only_a_new_container_is_running() -> None:
    """Until the booted kubelet writes a pod's status, the API still says Running with the
    container the power cut killed: that is not the pod running again."""

    def pod(cid: str, state: str = "running") -> dict:
        status = {"containerID": cid, "state": {state: {}}}
        return {"status": {"phase": "Running", "containerStatuses": [status]}}

    before = Watch(None, "edgefd.io/coral-usb", bare=True)  # type: ignore[arg-type]
    assert before._running(pod("containerd://old"))
    after = Watch(None, "edgefd.io/coral-usb", True, frozenset(before.seen))  # type: ignore[arg-type]
    assert not after._running(pod("containerd://old"))
    assert not after._running(pod("containerd://new", "waiting"))
    assert after._running(pod("containerd://new"))


@pytest.mark.parametrize(
    ("node", "want", "bus"),
    [
        ("rpi4-coral", {"edgefd.io/coral-usb": "1", "edgefd.io/ncs2": "1"}, "usb"),
        ("rpi4-two-corals", {"edgefd.io/coral-usb": "2", "edgefd.io/ncs2": "0"}, "usb"),
        ("x86-coral-pcie", {"edgefd.io/coral-usb": "0", "edgefd.io/coral-pcie": "1"}, "pci"),
    ],
)
def test_expectations_come_from_the_tree(tmp_path: Path, node: str, want: dict, bus: str) -> None:
    """What the e2e checks expect of a tree (allocatable, which device a workload gets, what a
    re-plug moves) is read from the tree, whatever its shape."""
    tree = build_host(node, tmp_path / node)
    offer = plugin_offer(tree, node)
    assert want.items() <= offer.allocatable().items()
    primary = offer.resources[offer.primary()]
    assert {d.bus for d in primary} == {bus} and {d.kind for d in primary} == {"edgetpu"}
    nodes = {n.path: n for n in device_nodes(tree)}
    for d in offer.devices:
        assert nodes[d.node.path] == d.node and d.usb_bus_mount == (d.bus == "usb")
        assert offer.by_id(d.kubelet_ids[0]) is d and offer.by_dra_name(d.dra_name) is d
    assert producer_labels(tree)["edgefd.io/edgetpu.count"] == str(
        len(offer.of_class("edgetpu.edgefd.io"))
    )


def test_a_devices_node_now_is_the_trees(tmp_path: Path) -> None:
    """The checks that come after a re-plug expect a device's node from the tree, not from the
    offer made before it: a USB device comes back with a new one, a PCI function keeps its."""
    tree = build_host("rpi4-coral", tmp_path / "usb")
    (coral,) = plugin_offer(tree, "n").resources["edgefd.io/coral-usb"]
    assert coral.node_now(tree) == coral.node
    hb = HostBuilder(tree)
    desc = hb.describe_usb(coral.location)
    hb.remove_usb(coral.location)
    assert coral.node_now(tree) == coral.node  # out: no node in the tree, the one offered
    hb.add_usb({**desc, "devnum": int(desc["devnum"]) + 10})
    now = coral.node_now(tree)
    assert now == usb_node(tree, coral.location) and now.minor == coral.node.minor + 10
    pcie = build_host("x86-coral-pcie", tmp_path / "pci")
    (apex,) = plugin_offer(pcie, "n").resources["edgefd.io/coral-pcie"]
    assert apex.bus == "pci" and apex.node_now(pcie) == apex.node


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of device nodes needs root")
def test_a_snapshot_with_device_nodes_is_copied_without_reading_them(tmp_path: Path) -> None:
    src = build_host("rpi4-two-corals", tmp_path / "src")
    coral = usb_node(src, "2-1")
    node = src / "dev" / coral.devname
    node.unlink()
    # no driver for major 189 on this machine: reading the node gives ENXIO
    os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(coral.major, coral.minor))
    os.mkfifo(src / "dev" / "initctl")
    with pytest.raises(OSError):
        shutil.copytree(src, tmp_path / "plain", symlinks=True)
    dest = copy_host_tree(src, tmp_path / "copy")
    st = os.lstat(dest / "dev" / coral.devname)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(coral.major, coral.minor)
    assert stat.S_ISFIFO(os.lstat(dest / "dev" / "initctl").st_mode)
    assert os.readlink(dest / "sys/bus/usb/devices/2-1") == os.readlink(
        src / "sys/bus/usb/devices/2-1"
    )
    assert plugin_offer(dest, "n").allocatable() == plugin_offer(src, "n").allocatable()


def test_a_lock_held_by_a_parent_is_ours(tmp_path: Path) -> None:
    """`flock LOCK scripts/e2e` must not make scripts/e2e wait for itself."""
    lock = tmp_path / "lock"
    lock.touch()
    code = (
        "from pathlib import Path; from tests.system.e2e import held_by_ancestor as h; "
        f"print(h(Path({str(lock)!r})))"
    )
    inner = [sys.executable, "-c", code]
    held = subprocess.run(
        ["flock", str(lock), *inner], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert held.stdout.strip() == "True", held.stderr
    free = subprocess.run(inner, cwd=REPO_ROOT, capture_output=True, text=True)
    assert free.stdout.strip() == "False", free.stderr


def test_warning_events_of_the_pod_and_of_edgefd_on_its_node() -> None:
    """What check_no_warning_events counts: the kubelet's Warnings about the pod (a failed
    probe, one line with its container), the sink's on the Node; not Normal Events, not other
    pods', not the kubelet's own Node Warnings."""
    pod = {
        "kind": "Pod",
        "name": "edgefd-x",
        "uid": "u1",
        "fieldPath": "spec.containers{feature-sink}",
    }
    node = {"kind": "Node", "name": "n1"}
    events = [
        {"type": "Warning", "reason": "Unhealthy", "message": "Readiness probe failed: 503",
         "involvedObject": pod, "source": {"component": "kubelet"}, "count": 2},
        {"type": "Normal", "reason": "Started", "message": "", "involvedObject": pod},
        {"type": "Warning", "reason": "Unhealthy", "message": "x",
         "involvedObject": {**pod, "uid": "another-pod"}},
        {"type": "Warning", "reason": "LabelRejected", "message": "bad:1: label refused",
         "involvedObject": node, "reportingComponent": "edgefd.io/feature-sink"},
        {"type": "Warning", "reason": "InvalidDiskCapacity", "message": "y",
         "involvedObject": node, "source": {"component": "kubelet"}},
    ]  # fmt: skip
    assert edgefd_warnings(events, "u1", "n1") == [
        "Pod/edgefd-x spec.containers{feature-sink}: Unhealthy: Readiness probe failed: 503 (x2)",
        "Node/n1: LabelRejected: bad:1: label refused (x1)",
    ]


def test_cri_log_text_joins_partial_lines() -> None:
    from .context import cri_log_text

    raw = (
        "2026-12-01T17:00:00.1Z stderr F usb-scan: INFO: edgefd 0.1.0 starting\n"
        "2026-12-01T17:00:00.2Z stderr P usb-scan: INFO: a long \n"
        "2026-12-01T17:00:00.2Z stderr F line\n"
        "2026-12-01T17:00:00.3Z stdout F \n"
    )
    assert cri_log_text(raw) == (
        "usb-scan: INFO: edgefd 0.1.0 starting\nusb-scan: INFO: a long line\n\n"
    )


def test_the_keeper_check_runs_on_every_tree_and_its_opt_out_once_per_way() -> None:
    def keys(spec: str, first: bool = True) -> set[str]:
        return {k for k, _, _ in Scenario.parse(spec).checks(first)}

    assert {"6k_keeper", "6o_keeper_opt_out"} <= keys("device-plugin") & keys("dra")
    later = keys("device-plugin@rpi4-two-corals", first=False)
    assert "6k_keeper" in later and "6o_keeper_opt_out" not in later
    # the default install has the keeper, whoever installed it: the chart's too
    assert "6k_keeper" in keys("helm") & keys("helm+dra") & keys("helm%k3s")


def test_the_keeper_check_knows_the_node_a_re_enumeration_brings(tmp_path: Path) -> None:
    from .checks_keeper import pctl, runtime_ids
    from .checks_keeper import usb_node as expected_node
    from .hosttree import SampleHost

    tree = build_host("rpi4-coral", tmp_path / "t", devicetree=False)
    host = SampleHost(tree, ns=None)  # type: ignore[arg-type]  # no node: nothing is mknod'ed
    host._unplugged["2-1"] = host.builder.describe_usb("2-1")
    devnum = host.next_devnum("2-1")
    assert devnum == int(host._unplugged["2-1"]["devnum"]) + 1
    host.builder.remove_usb("2-1")
    host.builder.add_usb({**host._unplugged["2-1"], "devnum": devnum, "vendor": "18d1"})
    got = usb_node(tree, "2-1")
    assert expected_node("2-1", devnum) == got and got.major == 189
    assert runtime_ids(("1a6e", "089a")) == ("18d1", "9302")
    assert runtime_ids(("03e7", "2485")) == ("03e7", "f63b")
    assert runtime_ids(("18d1", "9302")) is None  # already running: no firmware load
    assert (pctl([0.1] * 9 + [0.5], 0.99), pctl([0.3, 0.1, 0.2], 0.5)) == (0.5, 0.2)


def test_two_nodes_scenarios() -> None:
    """two-nodes is DRA on two trees, in a session of its own after the others."""
    from .e2e import layout_groups

    sc = Scenario.parse("two-nodes@rpi4-coral,rpi4-coral-runtime")
    assert (sc.nodes, sc.dra, sc.tree, sc.tree2) == (2, True, "rpi4-coral", "rpi4-coral-runtime")
    assert Scenario.parse("two-nodes").tree2 is None
    for bad in ("dra@a,b", "two-nodes+split"):
        with pytest.raises(ValueError):
            Scenario.parse(bad)
    one = [Scenario.parse(s) for s in ("device-plugin", "dra", "two-nodes", "helm")]
    groups = layout_groups(one)
    assert [[s.name for s in g] for _, g in groups] == [
        ["device-plugin", "dra", "helm"],
        ["two-nodes"],
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of its own needs root")
def test_the_api_port_is_on_a_second_nodes_own_loopback(tmp_path: Path) -> None:
    """What a second node's kubelet and pods dial, 127.0.0.1:PORT in their own network
    namespace, reaches the machine's 127.0.0.1:PORT, both ways, and stops when closed."""
    import socket
    import threading

    from .loopfwd import LoopbackForward

    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                c.sendall(b"echo:" + c.recv(100))

    threading.Thread(target=serve, daemon=True).start()
    ns = subprocess.Popen(["unshare", "--net", "--", "sh", "-c", "ip link set lo up; sleep 60"])
    try:
        path = f"/proc/{ns.pid}/ns/net"
        for _ in range(100):  # unshare has made it once its child runs sleep
            if os.stat(path).st_ino != os.stat("/proc/self/ns/net").st_ino:
                break
            subprocess.run(["sleep", "0.05"])
        dial = (
            "import socket,sys; s=socket.create_connection(('127.0.0.1', int(sys.argv[1])), 5);"
            " s.sendall(b'hi'); print(s.recv(100).decode())"
        )
        inside = ["nsenter", f"--net={path}", "--", sys.executable, "-c", dial, str(port)]
        before = subprocess.run(inside, capture_output=True, text=True)
        assert before.returncode != 0  # nothing listens in the namespace yet
        fwd = LoopbackForward(path, port)
        r = subprocess.run(inside, capture_output=True, text=True, timeout=30)
        assert r.stdout.strip() == "echo:hi", r.stderr
        fwd.close()
        after = subprocess.run(inside, capture_output=True, text=True, timeout=30)
        assert after.returncode != 0
    finally:
        ns.kill()
        ns.wait()
        srv.close()
