"""feature-sink's command line refuses bad input at start-up with one line and a documented
exit code (issue 11, items 3, 9 and 10), before anything is read or any request is sent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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
        (b"foo: [\n", "not valid YAML: "),
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
    assert line.startswith(f"feature-sink: error: --kubeconfig {kc}: ") and fragment in line
