"""`device-keeper` as a command: one-line errors with the documented exit codes, `grant` on a
v1 directory (dry run, refusal), and `serve` reading moves as JSON lines or, by default,
following the host's devices until SIGTERM."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest


def _run(*args, input=None):
    return subprocess.run(
        ["device-keeper", *args], capture_output=True, text=True, input=input, timeout=60
    )


@pytest.mark.parametrize(
    "args, code, message",
    [
        (
            ["grant", "--cgroup", "/nonexistent", "--allow", "c:189:5"],
            3,
            "no such cgroup directory",
        ),
        (["grant", "--cgroup", "/tmp", "--allow", "c:189:5"], 3, "neither a cgroup v2 directory"),
        (["grant", "--cgroup", "/tmp", "--allow", "q:1:2"], 2, "is not a device node"),
        (["grant", "--cgroup", "/tmp"], 2, "nothing to do"),
        (["grant", "--allow", "c:1:2"], 2, "Missing option '--cgroup'"),
        (["frobnicate"], 2, "No such command"),
    ],
)
def test_errors_are_one_line_with_the_documented_code(args, code, message):
    r = _run(*args)
    assert r.returncode == code, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("device-keeper: error: ")
    assert message in r.stderr


def test_allow_and_revoke_of_one_node(tmp_path):
    (tmp_path / "devices.list").write_text("c 1:2 rw\n")
    r = _run("grant", "--cgroup", str(tmp_path), "--allow", "c:1:2", "--revoke", "c:1:2")
    assert r.returncode == 2 and "both allowed and revoked" in r.stderr


def test_v1_dry_run_prints_the_lines_it_would_write(tmp_path):
    """A v1 devices directory is recognised by its files; nothing is written in a dry run."""
    (tmp_path / "devices.list").write_text("c 189:4 rw\nc *:* m\n")
    for f in ("devices.allow", "devices.deny"):
        (tmp_path / f).write_text("")
    args = ["grant", "--cgroup", str(tmp_path), "--allow", "c:189:5", "--revoke", "c:189:4"]
    r = _run(*args, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "devices.deny: c 189:4 rwm\ndevices.allow: c 189:5 rw\n"
    assert (tmp_path / "devices.allow").read_text() == ""
    doc = json.loads(_run(*args, "--dry-run", "-o", "json").stdout)
    assert doc["applied"] is False and doc["cgroup_version"] == "v1"
    assert doc["writes"][0] == {"file": "devices.deny", "line": "c 189:4 rwm"}


def test_v1_unrestricted_cgroup_is_refused(tmp_path):
    (tmp_path / "devices.list").write_text("a *:* rwm\n")
    r = _run("grant", "--cgroup", str(tmp_path), "--allow", "c:189:5")
    assert r.returncode == 1 and "allows every device" in r.stderr


def test_serve_reads_moves_and_survives_bad_lines(tmp_path):
    good = {
        "device": {"name": "coral-usb-1-1-3", "plugin": [["edgefd.io/coral-usb", "usb-1-1.3"]]},
        "old": "c:189:4",
        "new": "c:189:5",
    }
    events = "not json\n" + json.dumps(good) + "\n"
    r = _run(
        "serve", "--events", "-", "--host-root", str(tmp_path), "--listen", "", "-o", "json",
        input=events,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "event line 1:" in r.stderr and "no pod-resources socket" in r.stderr
    doc = json.loads(r.stdout)
    assert doc == {
        "device": "coral-usb-1-1-3",
        "old": "c 189:4",
        "new": "c 189:5",
        "seen": None,
        "containers": [],
    }


def test_serve_starts_on_a_broken_state_file(tmp_path):
    """The ledger of grants is the keeper's own file on the host: a broken one is a warning
    and an empty memory, never a failed start (`--state-dir`)."""
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "granted.json").write_text("{broken")
    r = _run(
        "serve", "--events", "-", "--host-root", str(tmp_path), "--listen", "",
        "--state-dir", str(tmp_path / "state"), input="",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "granted.json: not read" in r.stderr and "starting with no earlier grants" in r.stderr


def test_follow_needs_an_events_file():
    r = _run("serve", "--follow", "--listen", "")
    assert r.returncode == 2 and "--follow follows an --events file" in r.stderr


def test_serve_follows_the_host_devices_by_default(tmp_path):
    """No --events: the keeper's own inventory sees the Coral come back at its port with a
    new node and hands the move to the service (here nobody can be asked who holds it: the
    move is logged and reported all the same); SIGTERM stops it with 0."""
    import signal
    import time

    from tests.fixturegen import HostBuilder, build_host
    from tests.helpers import wait_until

    root = build_host("rpi4-coral", tmp_path / "rpi", devicetree=False)
    p = subprocess.Popen(
        ["device-keeper", "serve", "--host-root", str(root), "--listen", "", "-o", "json",
         "--poll-interval", "0.05", "--node-name", "node1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(2.0)  # started and scanned once (the first scan moves nothing)
        hb = HostBuilder(root)
        hb.remove_usb("2-1")
        hb.add_usb({"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 9})
        lines = [json.loads(p.stdout.readline()) for _ in range(2)]  # the catch-ups first
        line = wait_until(p.stdout.readline, timeout=20)
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert [(d["device"], d["old"]) for d in lines] == [
        ("coral-usb-2-1", None),
        ("ncs2-1-1-1", None),
    ]
    doc = json.loads(line)
    assert (doc["device"], doc["new"], doc["containers"]) == ("coral-usb-2-1", "c 189:136", [])
    assert doc["old"].startswith("c 189:") and doc["seen"] > 0
    assert "coral-usb-2-1 re-enumerated at port 2-1" in err
    assert "cannot ask who holds it" in err


def test_serve_config_reload_says_what_changed_and_a_failed_one_shows(tmp_path):
    """Issue 32 item 1, for `serve --config`: a reload says what it changed; a bad one keeps
    the configuration in use and shows in /readyz (still 200) and /metrics."""
    import signal
    import urllib.request

    from tests.fixturegen import build_host
    from tests.helpers import free_port, wait_until

    root = build_host("rpi4-coral", tmp_path / "rpi", devicetree=False)
    cfg = tmp_path / "resources.yaml"
    cfg.write_text("resources:\n  - {name: edgefd.io/coral-usb, accelerator: coral-usb}\n")
    port = free_port()

    def get(path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except OSError:  # not listening yet, or 503 before the first scan
            return 0, ""

    def loaded_at():
        for line in get("/metrics")[1].splitlines():
            if line.startswith("edgefd_config_last_reload_success_timestamp_seconds "):
                return float(line.split()[1])
        return None

    p = subprocess.Popen(
        ["device-keeper", "serve", "--host-root", str(root), "--config", str(cfg),
         "--listen", f"127.0.0.1:{port}", "--state-dir", "", "--node-name", "node1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        started = wait_until(loaded_at, timeout=20, step=0.1)
        cfg.write_text("resources:\n  - {name: edgefd.io/coral-usb, accelerator: coral-usb, "
                       "replicas: 2}\n")  # fmt: skip
        wait_until(lambda: loaded_at() != started, timeout=10, step=0.1)  # the file watch
        cfg.write_text("resources: {not: a list}\n")
        wait_until(lambda: "reload failed" in get("/readyz")[1], timeout=10, step=0.1)
        code, body = get("/readyz")
        metrics = get("/metrics")[1]
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "configuration reloaded: edgefd.io/coral-usb: replicas 1 → 2" in err, err
    assert code == 200 and f"configuration reload failed: {cfg}" in body, body
    assert "edgefd_config_reload_failures_total 1.0" in metrics


def test_serve_skips_a_nested_an_overlong_and_a_non_utf8_line(tmp_path):
    """issue 30 (7): a deeply nested line ended `serve --events` with exit 70."""
    good = {"device": {"name": "coral-usb-1-1-3", "ids": ["x"]}, "old": "c:1:2", "new": "c:1:3"}
    events = (
        b"[" * 5_000 + b"]" * 5_000 + b"\n"
        + b'{"device": "' + b"x" * 200_000 + b'"}\n'
        + b"\xff\xfe{\n"
        + json.dumps(good).encode() + b"\n"
    )  # fmt: skip
    r = subprocess.run(
        ["device-keeper", "serve", "--events", "-", "--host-root", str(tmp_path), "--listen",
         "", "-o", "json"],
        capture_output=True, input=events, timeout=60,
    )  # fmt: skip
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert "event line 1: nested deeper" in err and "event line 2: longer than" in err
    assert "event line 3: " in err
    assert json.loads(r.stdout)["device"] == "coral-usb-1-1-3"


def test_grant_takes_ascii_digits_only():
    """issue 30 (9): `c:١٨٩:٥` (Arabic-Indic digits) was taken as c 189:5."""
    r = _run("grant", "--cgroup", "/tmp", "--allow", "c:\u0661\u0668\u0669:\u0665")
    assert r.returncode == 2 and "is not a device node" in r.stderr


@pytest.mark.root
def test_grant_exit_codes_from_the_kernel(v2_cgroup, runc_filter):
    """The kernel's answers as the table says: no capability is 4 (one line, what is
    needed); a program beside runc's that is not the runtime's is 1 (refused: it may still
    deny the node), not 0."""
    from .foreign_programs import DENY_ALL, attach_other

    runc_filter(v2_cgroup)
    argv = ["grant", "--cgroup", str(v2_cgroup), "--allow", "c:189:5", "--revoke", "c:189:4"]
    caps = ["setpriv", "--inh-caps=-all", "--bounding-set=-all,+bpf,+net_admin", "--"]
    r = subprocess.run([*caps, "device-keeper", *argv], capture_output=True, text=True)
    assert r.returncode == 4 and r.stderr.count("\n") == 1, r.stderr
    assert "Operation not permitted (needs CAP_SYS_ADMIN" in r.stderr
    attach_other(v2_cgroup, DENY_ALL, "agent_deny")
    r = _run(*argv)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "not granted c 189:5: program " in r.stderr and "(agent_deny)" in r.stderr


@pytest.mark.root
def test_serve_goes_on_when_one_holder_planted_a_directory_at_the_temporary_name(
    tmp_path, v2_cgroups, runc_filter, standin, serve
):
    """issue 30 (2): a directory at `/dev/edgefd/.<name>.edgefd-keeper` in one container
    ended `serve --events` (exit 1) before another pod was granted. Now that container's
    path is left alone and said, the other pod is granted, and the feed ends with 0. The
    kubelet and the runtime are in-process gRPC servers from the same stubs."""
    import os

    from edgefd.device_keeper.api import cri_pb2 as cri
    from edgefd.device_keeper.api import cri_pb2_grpc as cri_rpc
    from edgefd.device_keeper.api import podresources_pb2 as pr
    from edgefd.device_keeper.api import podresources_pb2_grpc as pr_rpc

    from .pods import plugin, pod

    name = "coral-usb-1-1-3"
    made = {}
    for p in ("planted", "other"):
        cg = v2_cgroups()
        runc_filter(cg)
        made[p] = (cg, standin(name, "189:4", cgroups=[cg]))
    planted_pid, other_pid = made["planted"][1].pid, made["other"][1].pid
    os.mkdir(f"/proc/{planted_pid}/root/dev/edgefd/.{name}.edgefd-keeper")

    class Kubelet(pr_rpc.PodResourcesListerServicer):
        def List(self, request, context):
            pods = [pod("ns", p, [plugin("app", "edgefd.io/coral-usb", name)]) for p in made]
            return pr.ListPodResourcesResponse(pod_resources=pods)

    class Runtime(cri_rpc.RuntimeServiceServicer):
        def ListContainers(self, request, context):
            labels = dict(request.filter.label_selector)
            c = cri.Container(id=labels["io.kubernetes.pod.name"], labels=labels, state=0)
            return cri.ListContainersResponse(containers=[c])

        def ContainerStatus(self, request, context):
            cg, proc = made[request.container_id]
            doc = {"pid": proc.pid, "runtimeSpec": {"linux": {"cgroupsPath": f"/{cg.name}"}}}
            return cri.ContainerStatusResponse(info={"info": json.dumps(doc)})

    kubelet_dir = tmp_path / "kubelet"
    (kubelet_dir / "pod-resources").mkdir(parents=True)
    sock = serve(pr_rpc.add_PodResourcesListerServicer_to_server, Kubelet())
    os.symlink(sock, kubelet_dir / "pod-resources" / "kubelet.sock")
    cri_sock = serve(cri_rpc.add_RuntimeServiceServicer_to_server, Runtime())
    move = {"device": {"name": name, "ids": [name]}, "old": "c:189:4", "new": "c:189:5"}
    r = _run(
        "serve", "--events", "-", "--host-root", "/", "--kubelet-dir", str(kubelet_dir),
        "--cri-socket", cri_sock, "--listen", "", "-o", "json",
        input=json.dumps(move) + "\n",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "cannot clear the temporary name" in r.stderr and "Traceback" not in r.stderr
    nodes = {c["pod"]: c["node"] for c in json.loads(r.stdout)["containers"]}
    assert nodes["other"] == "replaced" and nodes["planted"].startswith("failed: ")
    assert os.minor(os.stat(f"/proc/{other_pid}/root/dev/edgefd/{name}").st_rdev) == 5


def test_version_and_the_exit_codes_in_every_help():
    """The conventions of every edgefd tool: `--version`, and the exit codes at the end of the
    group's and each subcommand's `--help`, each saying what its own codes mean."""
    r = _run("--version")
    assert r.returncode == 0 and r.stdout.startswith("device-keeper ") and "(edgefd;" in r.stdout
    helps = {what: _run(*what, "--help").stdout for what in ((), ("grant",), ("serve",))}
    for what, text in helps.items():
        assert "Exit codes:\n    0   ok\n" in text, what
    assert "the kernel refused the write" in helps[("grant",)]
    assert "a host root that is" in helps[("serve",)]


def test_a_bare_device_keeper_prints_the_help_not_an_error_line():
    r = _run()
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("Usage: device-keeper ") and "device-keeper: error" not in r.stderr
    assert "Commands:" in r.stderr and "Exit codes:" in r.stderr


def test_serve_listens_on_its_own_port_as_the_manifests_say():
    """8083 is the scanners' port; the base and the chart serve the keeper on 8084."""
    from edgefd.device_keeper.cli import DEFAULT_LISTEN

    repo = Path(__file__).resolve().parents[2]

    shown = " ".join(_run("serve", "--help").stdout.split())  # click wraps the option help
    assert DEFAULT_LISTEN == ":8084" and "default: :8084]" in shown
    for manifest in (
        "k8s/pod-template.yaml",
        "charts/edgefd/templates/_devplugin.tpl",
    ):
        assert "containerPort: 8084" in (repo / manifest).read_text(), manifest


@pytest.mark.parametrize(
    "mode", [[], ["--dry-run"], ["--events", "-"], ["--events", "-", "--follow"]]
)
def test_serve_on_a_missing_host_root_exits_3_in_every_mode(mode, tmp_path):
    """Never a service that listens and can grant nothing: one line, exit 3, as the scanners."""
    root = tmp_path / "gone"
    r = _run("serve", "--host-root", str(root), *mode, input="")
    assert r.returncode == 3, r.stderr
    assert r.stderr == f"device-keeper: error: host root {root} does not exist\n"


def test_serve_says_when_it_starts_and_stops(tmp_path):
    r = _run(
        "serve", "--events", "-", "--host-root", str(tmp_path), "--listen", "", "--state-dir", "",
        input="",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert "starting, mode events: host-root=" in lines[0] and lines[-1].endswith(": stopping")
