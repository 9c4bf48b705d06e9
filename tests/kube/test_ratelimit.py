"""edgefd.kube.ratelimit: the client's token bucket (a burst at once, then spaced at the rate,
for concurrent waiters too) and the wait the API server asked for, which holds every request of
the client until it has passed. Pure units (a fake clock; one loopback HTTP server standing in
for a proxy's 429 answer). Reading Retry-After: test_errors.py; the retry schedule:
test_retry.py; the real API server's 429: tests/feature_sink/test_service.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from edgefd.kube.client import connect
from edgefd.kube.errors import ApiUnreachable
from edgefd.kube.ratelimit import BY_CLIENT, BY_SERVER, RateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_token_bucket_allows_a_burst_then_spaces_requests_at_qps():
    clock = FakeClock()
    waits: list[tuple[str, float]] = []
    lim = RateLimiter(
        5.0, 10, clock=clock, sleep=clock.sleep, on_wait=lambda b, s: waits.append((b, s))
    )
    start = clock.now
    for _ in range(10):
        assert lim.acquire() == 0.0  # the burst goes at once
    for _ in range(40):
        lim.acquire()
    elapsed = clock.now - start
    # 40 requests past the burst at 5/s: 8 s, never faster
    assert elapsed == pytest.approx(8.0)
    assert all(s == pytest.approx(0.2) for s in clock.slept)
    assert len(waits) == 40 and {b for b, _ in waits} == {BY_CLIENT}
    # over any window, at most burst + qps * window requests
    clock.now += 100  # idle refills to the burst, not beyond
    n = sum(1 for _ in range(30) if lim.reserve() == 0)
    assert n == 10


def test_token_bucket_serves_concurrent_waiters_in_order_without_exceeding_the_rate():
    lim = RateLimiter(50.0, 1)
    times: list[float] = []
    lock = threading.Lock()

    def go() -> None:
        lim.acquire()
        import time

        with lock:
            times.append(time.monotonic())

    threads = [threading.Thread(target=go) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    times.sort()
    # 20 requests, burst 1 at 50/s: the last goes no sooner than 19 / 50 s after the first
    assert times[-1] - times[0] >= 19 / 50 - 0.02


def test_the_servers_hold_off_only_grows():
    clock = FakeClock()
    lim = RateLimiter(5.0, 10, clock=clock, sleep=clock.sleep)
    lim.hold_off(5)
    lim.hold_off(1)  # a shorter request does not shorten the longer one
    assert lim.held_for() == pytest.approx(5)
    clock.now += 5
    assert lim.held_for() == 0


@pytest.mark.parametrize("bad", [(0, 1), (-1, 1), (float("inf"), 1), (float("nan"), 1), (1, 0)])
def test_rate_limit_refuses_nonsense(bad: tuple[float, int]):
    with pytest.raises(ValueError):
        RateLimiter(*bad)


class _Proxy429(BaseHTTPRequestHandler):
    """What a proxy or an overloaded API server answers: 429 with Retry-After."""

    hits: ClassVar[list[str]] = []
    retry_after = "2"

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        body = json.dumps({"kind": "Status", "code": 429, "message": "slow down"}).encode()
        self.send_response(429)
        self.send_header("Retry-After", self.retry_after)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_client_holds_every_request_for_the_retry_after(tmp_path: Path):
    """After a 429, nothing is sent until the Retry-After has passed: requests fail at once
    (so a stoppable retry loop does the waiting) with the time left attached."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy429)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Proxy429.hits = []
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    waits: list[tuple[str, float]] = []
    client = connect(str(kubeconfig), 2.0, on_wait=lambda b, s: waits.append((b, s)))
    try:
        with pytest.raises(ApiUnreachable) as first:
            client.request("GET", "nodes", "/api/v1/nodes/a", "get node a")
        assert first.value.retry_after == 2.0
        for _ in range(5):
            with pytest.raises(ApiUnreachable, match="asked to wait") as held:
                client.request("GET", "nodes", "/api/v1/nodes/a", "get node a")
            assert 0 < held.value.retry_after <= 2.0
        with pytest.raises(ApiUnreachable, match="asked to wait"):
            client.watch("nodes", "/api/v1/nodes", "watch nodes", 5)
        assert len(_Proxy429.hits) == 1  # only the first was sent
        assert waits == [(BY_SERVER, 2.0)]
    finally:
        server.shutdown()
        server.server_close()
