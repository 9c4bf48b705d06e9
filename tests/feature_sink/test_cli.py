"""feature-sink's command (cli.py), run as a subprocess without an API server: bad input refused
at start-up with one line and a documented exit code (issue 11, items 3, 9 and 10), before
anything is read or any request is sent; exit 5 when the API server is unreachable; and a
start-up that never loads `kubernetes`. The option types it shares with edgefd's other
commands (durations, --listen) too."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.feature_sink.peer import ROOT, F, dead_kubeconfig


def sink(*args: str, stdin: bytes | None = b"", close_stdin: bool = False):
    cmd = [sys.executable, "-m", "edgefd.feature_sink", *args]
    if close_stdin:  # the process starts with fd 0 closed, as under some supervisors
        cmd = ["sh", "-c", 'exec "$@" 0<&-', "sh", *cmd]
    return subprocess.run(
        cmd,
        cwd=ROOT,
        input=None if close_stdin else stdin,
        stdin=subprocess.DEVNULL if close_stdin else None,
        capture_output=True,
        timeout=60,
    )


def one_line(p: subprocess.CompletedProcess) -> str:
    lines = p.stderr.decode().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--node-name", "../namespaces/kube-system"], "is not a valid Node name"),
        (["--node-name", "Node_1"], "is not a valid Node name"),
        (["--node-name", "n1\nfeature-sink: forged"], "'n1\\nfeature-sink: forged'"),
        (["--node-name", "n1", "--mode", "nodefeature", "--namespace", "../x"], "--namespace"),
        (["--node-name", "n1", "--mode", "nodefeature", "--namespace", "a.b"], "DNS-1123 label"),
        (["--node-name", "n1", "--api-timeout", "0"], "--api-timeout"),
        (["--node-name", "n1", "--api-timeout", "nan"], "--api-timeout"),
        (["--node-name", "n1", "--label-budget", "100"], "--label-budget"),
        (["--node-name", "n1", "--settle", "-1"], "--settle"),
        (["--node-name", "n1", "--api-qps", "0"], "--api-qps"),
        (["--node-name", "n1", "--api-qps", "nan"], "--api-qps"),
        (["--node-name", "n1", "--api-burst", "0"], "--api-burst"),
        (["--node-name", "n1", "--features-dir", "/nonexistent"], "not an existing directory"),
        # the admission policy refuses Kubernetes' namespaces whatever the sink is told
        (["--node-name", "n1", "--allow-namespace", "topology.kubernetes.io"], "reserved"),
        (["--node-name", "n1", "--allow-namespace", "node-role.kubernetes.io"], "never"),
        (["--node-name", "n1", "--allow-namespace", "Example_com"], "not a DNS subdomain"),
        (["--node-name", "n1", "--deny-namespace", "a..b"], "--deny-namespace 'a..b'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], fragment: str, tmp_path: Path):
    if "--features-dir" not in args:
        args = [*args, "--features-dir", str(tmp_path)]
    p = sink("--once", "--kubeconfig", str(tmp_path / "never-read"), *args)
    assert p.returncode == 2, p.stderr
    assert fragment in p.stderr.decode()
    assert "Traceback" not in p.stderr.decode()


def test_namespace_is_not_checked_when_it_is_not_used(tmp_path: Path):
    """--namespace comes from POD_NAMESPACE in the manifests; node mode never uses it."""
    p = sink(
        "--once",
        "--node-name",
        "n1",
        "--namespace",
        "../x",
        "--features-dir",
        str(tmp_path),
        "--kubeconfig",
        str(tmp_path / "missing"),
    )
    assert p.returncode == 3, p.stderr  # got as far as the kubeconfig


def test_features_from_a_closed_stdin_is_bad_input():
    p = sink("--dry-run", "--features", "-", "--node-name", "n1", close_stdin=True)
    assert p.returncode == 3, p.stderr
    assert one_line(p) == (
        "feature-sink: error: --features -: stdin is closed; pipe the features stream in"
    )


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"[]\n", "a YAML list, not a kubeconfig (a YAML mapping)"),
        (b"just text\n", "a YAML str, not a kubeconfig"),
        (b"", "empty, not a kubeconfig"),
        (b"foo: [\n", "kubeconfig:2:1: did not find expected node content"),
        (b"current-context: x\ncontexts: [1]\n", "not a usable kubeconfig ("),
    ],
)
def test_a_kubeconfig_that_is_not_one_is_bad_input(content: bytes, fragment: str, tmp_path):
    kc = tmp_path / "kubeconfig"
    kc.write_bytes(content)
    p = sink(
        "--once", "--node-name", "n1", "--features-dir", str(tmp_path), "--kubeconfig", str(kc)
    )
    assert p.returncode == 3, p.stderr
    line = one_line(p)
    assert line.startswith(f"feature-sink: error: --kubeconfig {kc}") and fragment in line


def test_missing_node_name_is_usage_error(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    p = subprocess.run(
        [sys.executable, "-m", "edgefd.feature_sink", "--once"],
        cwd=ROOT,
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 2
    assert b"--node-name" in p.stderr


def test_a_missing_host_directory_is_a_usage_error(tmp_path: Path) -> None:
    pod = tmp_path / "pod"
    pod.mkdir()
    absent = str(tmp_path / "absent")
    p = sink("--dry-run", "--node-name", "n1", "--features-dir", str(pod),
             "--host-features-dir", absent, "--kubeconfig", "/dev/null")  # fmt: skip
    assert p.returncode == 2
    assert b"--host-features-dir " in p.stderr and b"not an existing directory" in p.stderr


def test_bad_stream_is_bad_input():
    p = sink("--dry-run", "--features", "-", "--node-name", "n1", stdin=b"a=\x00\n")
    assert p.returncode == 3, p.stderr


def test_once_with_api_down_exits_5_quickly(tmp_path: Path, monkeypatch):
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "usb").write_text(f"{F}/a=1\n")
    start = time.monotonic()
    p = sink(
        "--once",
        "--features-dir",
        str(tmp_path / "f"),
        "--node-name",
        "n1",
        "--kubeconfig",
        str(dead_kubeconfig(tmp_path)),
        "--api-timeout",
        "2",
    )
    assert p.returncode == 5, p.stderr
    assert b"unreachable" in p.stderr
    assert time.monotonic() - start < 15


def test_dry_run_with_api_down_says_so_in_log_lines(tmp_path: Path) -> None:
    """Issue 32 item 2: "cannot read node n1; showing the write against one with no labels"
    was the one line of feature-sink without a level (and without a time, and not json under
    `--log-format json`); it is a warning like the line before it, and the summary follows
    the format too."""
    import json
    import re

    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "usb").write_text(f"{F}/a=1\n")
    args = ["--dry-run", "--features-dir", str(tmp_path / "f"), "--node-name", "n1"]
    args += ["--kubeconfig", str(dead_kubeconfig(tmp_path)), "--api-timeout", "2"]
    p = sink(*args)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.decode().splitlines()
    [said] = [ln for ln in lines if "showing the write against one with no labels" in ln]
    assert re.match(r"\S+Z feature-sink: WARNING: cannot read node n1; showing the write", said)
    p = sink(*args, "--log-format", "json")
    objs = [json.loads(ln) for ln in p.stderr.decode().splitlines()]
    [said] = [o for o in objs if o["msg"].startswith("cannot read node n1; showing the write")]
    assert said["level"] == "warning" and said["tool"] == "feature-sink"
    p = sink("--dry-run", "--features", "-", *args[3:], "--log-format", "json", stdin=b"")
    assert json.loads(p.stderr.decode().splitlines()[-1])["msg"] == "no changes", p.stderr


def test_cli_modules_do_not_import_kubernetes():
    code = (
        "import sys, edgefd.feature_sink.cli, edgefd.feature_sink.loop, edgefd.feature_sink.sync, "
        "edgefd.feature_sink.nodefeature, edgefd.feature_sink.nodeapi; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
