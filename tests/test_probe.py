"""`python -m edgefd.probe`, the exec startup probe of every long-running container (issue 25
item 5), against the real health endpoint (edgefd.runtime.metrics.HealthServer) coming up
late, answering 503 first, or never: it waits out a start instead of failing it, and still
fails, with the reason, a start that fails."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from edgefd.runtime.metrics import HealthServer, Metrics
from tests.helpers import free_port


def probe(*args: str) -> tuple[subprocess.Popen[str], float]:
    cmd = [sys.executable, "-m", "edgefd.probe", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), (
        time.monotonic()
    )


@pytest.fixture
def servers() -> Iterator[list[HealthServer]]:
    started: list[HealthServer] = []
    yield started
    for s in started:
        s.stop()


def serve_later(
    servers: list[HealthServer], port: int, delay: float, ready_after: float | None
) -> None:
    """Bind `port` after `delay` s (Python's start); /readyz 503 until `ready_after` s more
    (the first sync), or for ever (None); /healthz 200 all along."""

    def start() -> None:
        time.sleep(delay)
        t0 = time.monotonic()

        def ready() -> tuple[bool, str]:
            if ready_after is not None and time.monotonic() - t0 >= ready_after:
                return True, "ok (synced)"
            return False, "no successful sync yet (starting)"

        servers.append(HealthServer(Metrics(), "127.0.0.1", port, readyz=ready).start())

    threading.Thread(target=start, daemon=True).start()


def test_a_late_start_is_waited_for_not_failed(servers: list[HealthServer]) -> None:
    port = free_port()
    p, t0 = probe(str(port), "--within", "10")
    serve_later(servers, port, delay=0.7, ready_after=0.5)  # refused, then 503, then 200
    out, err = p.communicate(timeout=30)
    took = time.monotonic() - t0
    assert p.returncode == 0, out + err
    assert out == "/readyz: ok (synced)\n"
    assert 1.1 < took < 4, took  # as soon as it is ready, not at the end of the wait


def test_never_ready_fails_with_the_reason_before_the_kubelets_timeout(
    servers: list[HealthServer],
) -> None:
    port = free_port()
    serve_later(servers, port, delay=0, ready_after=None)
    p, t0 = probe(str(port), "--within", "1.5")
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 1
    assert out == (f"127.0.0.1:{port}/readyz: 503 no successful sync yet (starting) after 1.5s\n")
    assert time.monotonic() - t0 < 1.5 + 2.5  # the manifests give the kubelet 3 s more


def test_nothing_listening_fails(servers: list[HealthServer]) -> None:
    port = free_port()
    p, _ = probe(str(port), "--within", "0.5", "--or-alive", "/healthz")
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 1
    assert out.startswith(f"127.0.0.1:{port}/readyz: no answer (") and "after 0.5s" in out


def test_or_alive_counts_a_start_whose_peer_is_down(servers: list[HealthServer]) -> None:
    """feature-sink and devplugin: up and serving, the API server or kubelet not reached yet;
    the startup probe passes (no restart for a peer's outage), readiness then says why."""
    port = free_port()
    serve_later(servers, port, delay=0, ready_after=None)
    p, _ = probe(str(port), "--within", "0.5", "--or-alive", "/healthz")
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0
    assert out == (
        f"started, not ready yet (127.0.0.1:{port}/readyz: 503 no successful sync yet "
        "(starting)); /healthz: ok\n"
    )
