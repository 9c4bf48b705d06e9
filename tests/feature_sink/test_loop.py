"""feature-sink's loop: debounce, syncs under a burst, backoff, stop; the CLI without an API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import click
import pytest

from edgefd.cli import Duration, parse_listen
from edgefd.feature_sink.desired import Desired, read_directory
from edgefd.feature_sink.loop import LoopConfig, SinkLoop
from edgefd.feature_sink.metrics import SinkMetrics
from edgefd.feature_sink.nodeapi import ApiUnreachable
from edgefd.feature_sink.sync import SyncResult
from edgefd.runtime.watch import Debouncer, Watcher
from tests.feature_sink.peer import run_sink
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
F = "feature.node.kubernetes.io"


def test_debouncer_quiet_window_and_latency_cap():
    d = Debouncer(quiet=0.1, max_latency=0.5)
    assert not d.due(0.0) and d.deadline() is None
    d.event(1.0)
    assert d.deadline() == pytest.approx(1.1)
    assert not d.due(1.05) and d.due(1.1)
    # a steady trickle every 50 ms keeps postponing, but never past first + max_latency
    for i in range(1, 20):
        d.event(1.0 + i * 0.05)
    assert d.deadline() == pytest.approx(1.5)
    d.reset()
    assert not d.pending


class RecordingSyncer:
    """Stands in for the API side to observe *when* the loop syncs and what it read."""

    def __init__(self, fail_first: int = 0) -> None:
        self.calls: list[tuple[float, dict[str, str]]] = []
        self.fresh: list[bool] = []
        self.fail_first = fail_first

    def sync(self, desired: Desired, now: datetime, fresh: bool = True) -> SyncResult:
        self.fresh.append(fresh)
        self.calls.append((time.monotonic(), desired.labels))
        if len(self.calls) <= self.fail_first:
            raise ApiUnreachable("connection refused")
        return SyncResult(wrote=True)


def run_loop(loop: SinkLoop) -> threading.Thread:
    t = threading.Thread(target=loop.run, daemon=True)
    t.start()
    return t


def test_loop_bounds_syncs_under_a_burst_and_applies_the_final_state(tmp_path: Path):
    syncer = RecordingSyncer()
    metrics = SinkMetrics()
    cfg = LoopConfig(resync_interval=3600)
    loop = SinkLoop(lambda: read_directory(tmp_path), syncer, metrics, cfg)
    watcher = Watcher(loop.changed, [tmp_path], debounce=0.1, max_delay=0.5).start()
    t = run_loop(loop)
    try:
        time.sleep(0.3)
        assert len(syncer.calls) == 1  # the start-up sync
        start = time.monotonic()
        for i in range(1000):
            (tmp_path / f"p{i % 10}").write_text(f"{F}/n{i % 10}={i}\n")
        burst = time.monotonic() - start
        time.sleep(0.8)
        n = len(syncer.calls) - 1
        # at most one sync per max_latency window during the burst, plus the trailing one
        assert 1 <= n <= int(burst / 0.5) + 2, (n, burst)
        assert syncer.calls[-1][1] == {f"{F}/n{k}": str(990 + k) for k in range(10)}
    finally:
        loop.stop()
        t.join(5)
        watcher.stop()
    assert not t.is_alive()


def test_loop_keeps_retrying_with_backoff_and_never_exits(tmp_path: Path):
    syncer = RecordingSyncer(fail_first=4)
    metrics = SinkMetrics()
    cfg = LoopConfig(resync_interval=3600, max_backoff=0.4)
    loop = SinkLoop(lambda: read_directory(tmp_path), syncer, metrics, cfg)
    t = run_loop(loop)
    try:
        end = time.monotonic() + 5
        while time.monotonic() < end and len(syncer.calls) < 5:
            time.sleep(0.02)
        assert len(syncer.calls) == 5
        gaps = [b[0] - a[0] for a, b in zip(syncer.calls, syncer.calls[1:], strict=False)]
        assert all(g >= 0.09 for g in gaps), gaps  # backed off (initial 0.2 s, jitter <= 50 %)
        assert metrics.value("edgefd_sink_sync_failures_total", reason="unreachable") == 4
        assert metrics.value("edgefd_sink_syncs_total", result="success") == 1
        assert loop.ready(60)[0] and loop.alive(60)[0]
    finally:
        loop.stop()
        t.join(5)


def test_duration_and_listen_parsing():
    assert Duration().convert("250ms", None, None) == pytest.approx(0.25)
    assert Duration().convert("10m", None, None) == 600
    assert Duration().convert("30", None, None) == 30
    for bad in ("nan", "inf", "-1", "1e9", "30x", float("nan"), float("inf")):
        with pytest.raises(click.BadParameter):
            Duration().convert(bad, None, None)
    assert parse_listen(":8081") == ("0.0.0.0", 8081)
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("") is None
    assert parse_listen("[::1]:9") == ("::1", 9)
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen("8081")
    with pytest.raises(ValueError, match="out of range"):
        parse_listen(":70000")


# -- CLI without an API server ---------------------------------------------------------------


sink = run_sink


def dead_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig pointing at a port nobody listens on."""
    port = free_port()
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def test_dry_run_from_stdin_without_api(tmp_path: Path):
    stream = f"{F}/usb-fe_1a6e_089a.present=true\nnode-role.kubernetes.io/master=\n".encode()
    kc = dead_kubeconfig(tmp_path)
    p = sink(
        "--dry-run",
        "--features",
        "-",
        "--node-name",
        "n1",
        "--kubeconfig",
        str(kc),
        "--api-timeout",
        "2",
        "-o",
        "json",
        stdin=stream,
    )
    assert p.returncode == 0, p.stderr
    ops = json.loads(p.stdout)
    assert {
        "op": "add",
        "path": "/metadata/labels",
        "value": {f"{F}/usb-fe_1a6e_089a.present": "true"},
    } not in ops  # empty map exists: per-key adds
    assert {
        "op": "add",
        "path": f"/metadata/labels/{F}~1usb-fe_1a6e_089a.present",
        "value": "true",
    } in ops
    assert b"Node with no labels" in p.stderr
    assert b"stdin:2: label refused: namespace node-role.kubernetes.io" in p.stderr
    assert b"master" not in p.stderr  # the refused key itself is not repeated
    text = sink(
        "--dry-run",
        "--features",
        "-",
        "--node-name",
        "n1",
        "--kubeconfig",
        str(kc),
        "--api-timeout",
        "2",
        stdin=stream,
    )
    assert text.stdout.decode().split() == ["add", f"{F}/usb-fe_1a6e_089a.present=true"]


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


def test_sigterm_with_api_down_exits_0_and_serves_health(tmp_path: Path):
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgefd.feature_sink",
            "--features-dir",
            str(tmp_path),
            "--node-name",
            "n1",
            "--kubeconfig",
            str(dead_kubeconfig(tmp_path)),
            "--listen",
            f"127.0.0.1:{port}",
            "--max-backoff",
            "0.5",
            "--api-timeout",
            "1",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
    )
    try:
        import urllib.error
        import urllib.request

        def get(path: str) -> tuple[int, str]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

        end = time.monotonic() + 20
        while True:
            try:
                code, body = get("/metrics")
                if 'reason="unreachable"' in body:
                    break
            except OSError:
                pass
            assert time.monotonic() < end, "sink never served metrics"
            time.sleep(0.1)
        assert get("/healthz")[0] == 200
        code, body = get("/readyz")
        assert code == 503 and "no successful sync" in body
        assert proc.poll() is None  # API down never makes it exit
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_modules_do_not_import_kubernetes():
    code = (
        "import sys, edgefd.feature_sink.cli, edgefd.feature_sink.loop, edgefd.feature_sink.sync, "
        "edgefd.feature_sink.nodefeature, edgefd.feature_sink.nodeapi; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
