"""`device-keeper` as a command: one-line errors with the documented exit codes, `grant` on a
v1 directory (dry run, refusal), `serve` following devplugin's decisions until SIGTERM, and
`serve --dry-run`, what it would do now, printed."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgefd.inventory.decisions import Decisions, write

from .peers import peers
from .pods import handout


def _run(*args, input=None):
    return subprocess.run(
        ["device-keeper", *args], capture_output=True, text=True, input=input, timeout=60
    )


class Serving:
    """A `device-keeper serve` in the background: its stdout's lines, and on leaving, its
    exit code and stderr after SIGTERM."""

    def __init__(self, p: subprocess.Popen) -> None:
        self.p = p
        self.code: int | None = None
        self.err = ""

    def line(self) -> dict:
        from tests.helpers import wait_until

        return json.loads(wait_until(self.p.stdout.readline, timeout=20))  # type: ignore[union-attr]

    def running(self, decisions: Path) -> None:
        """Serving: it has read a first version (with `-o json`) and said so."""
        write(decisions, Decisions(1.0, (handout(),)))
        self.line()


@contextlib.contextmanager
def _serving(tmp_path: Path, *args: str) -> Iterator[Serving]:
    argv = ["device-keeper", "serve", "--host-root", str(tmp_path), "--listen", "",
            "--decisions", str(tmp_path / "decisions.json"), *args]  # fmt: skip
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    s = Serving(p)
    try:
        yield s
    finally:
        p.send_signal(signal.SIGTERM)
        _, s.err = p.communicate(timeout=30)
        s.code = p.returncode


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


def test_serve_follows_devplugins_decisions(tmp_path):
    """Each device devplugin hands out is caught up at the first read, then each new number
    is a move (here nobody can be asked who holds it: the move is logged and reported all
    the same); SIGTERM stops it with 0."""
    with _serving(tmp_path, "-o", "json", "--state-dir", "") as s:
        write(tmp_path / "decisions.json", Decisions(1.0, (handout(number="c:189:4"),)))
        catch_up = s.line()
        write(tmp_path / "decisions.json", Decisions(2.0, (handout(number="c:189:9"),)))
        moved = s.line()
    assert s.code == 0, s.err
    assert (catch_up["device"], catch_up["old"], catch_up["new"]) == (
        "coral-usb-1-1-3", None, "c 189:4"
    )  # fmt: skip
    assert moved == {
        "device": "coral-usb-1-1-3",
        "old": "c 189:4",
        "new": "c 189:9",
        "path": "/dev/edgefd/coral-usb-1-1-3",
        "old_path": "/dev/edgefd/coral-usb-1-1-3",
        "seen": 2.0,
        "containers": [],
    }
    assert "coral-usb-1-1-3 re-enumerated: c 189:4 -> c 189:9" in s.err
    assert "cannot ask who holds it" in s.err


def test_serve_starts_on_a_broken_state_file(tmp_path):
    """The ledger of grants is the keeper's own file on the host: a broken one is a warning
    and an empty memory, never a failed start (`--state-dir`)."""
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "granted.json").write_text("{broken")
    with _serving(tmp_path, "--state-dir", str(tmp_path / "state"), "-o", "json") as s:
        s.running(tmp_path / "decisions.json")
    assert s.code == 0, s.err
    assert (
        "granted.json: not read" in s.err
        and "earlier grants it cannot prove are revoked at catch-up" in s.err
    )


def test_a_decisions_file_that_is_not_right_is_not_ready_and_counted(tmp_path):
    """Not acted on: /readyz 503 says why, the refusal is counted, the process runs on (the
    next good version is followed)."""
    import urllib.error
    import urllib.request

    from tests.helpers import free_port, wait_until

    port = free_port()

    def get(path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    (tmp_path / "decisions.json").write_text("{not json")
    with _serving(tmp_path, "--listen", f"127.0.0.1:{port}", "--state-dir", "") as s:
        code, body = wait_until(lambda: (r := get("/readyz"))[0] and r, timeout=20)
        metrics = get("/metrics")[1]
        write(tmp_path / "decisions.json", Decisions(1.0, (handout(),)))
        wait_until(lambda: get("/readyz")[0] == 200, timeout=10)
    assert s.code == 0, s.err
    assert code == 503 and "devplugin's decisions not acted on: not JSON" in body, body
    assert 'edgefd_device_keeper_refused_total{reason="decisions"} 1.0' in metrics


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
    ended `serve` (exit 1) before another pod was granted. Now that container's path is left
    alone and said, the other pod is granted, and the service goes on."""
    import os

    from .pods import NAME

    made = {}
    for p in ("planted", "other"):
        cg = v2_cgroups()
        runc_filter(cg)
        made[p] = (cg, standin(NAME, "189:4", cgroups=[cg]))
    planted_pid, other_pid = made["planted"][1].pid, made["other"][1].pid
    os.mkdir(f"/proc/{planted_pid}/root/dev/edgefd/.{NAME}.edgefd-keeper")
    kubelet_dir, cri_sock = peers(serve, tmp_path, made)
    at = ["--host-root", "/", "--kubelet-dir", str(kubelet_dir), "--cri-socket", cri_sock]
    with _serving(tmp_path, *at, "-o", "json", "--state-dir", "") as s:
        write(tmp_path / "decisions.json", Decisions(1.0, (handout(number="c:189:4"),)))
        s.line()  # the catch-up: both were given 189:4
        write(tmp_path / "decisions.json", Decisions(2.0, (handout(number="c:189:5"),)))
        moved = s.line()
    assert s.code == 0, s.err
    assert "cannot clear the temporary name" in s.err and "Traceback" not in s.err
    nodes = {c["pod"]: c["node"] for c in moved["containers"]}
    assert nodes["other"] == "replaced" and nodes["planted"].startswith("failed: ")
    assert os.minor(os.stat(f"/proc/{other_pid}/root/dev/edgefd/{NAME}").st_rdev) == 5


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


@pytest.mark.parametrize("mode", [[], ["--dry-run"]])
def test_serve_on_a_missing_host_root_exits_3_in_every_mode(mode, tmp_path):
    """Never a service that listens and can grant nothing: one line, exit 3, as the scanners."""
    root = tmp_path / "gone"
    r = _run("serve", "--host-root", str(root), *mode, input="")
    assert r.returncode == 3, r.stderr
    assert r.stderr == f"device-keeper: error: host root {root} does not exist\n"


def test_serve_says_when_it_starts_and_stops(tmp_path):
    with _serving(tmp_path, "--state-dir", "", "-o", "json") as s:
        s.running(tmp_path / "decisions.json")
    assert s.code == 0, s.err
    lines = s.err.splitlines()
    assert "starting, mode follow devplugin's decisions: " in lines[0], lines
    assert lines[-1].endswith(": stopping")
