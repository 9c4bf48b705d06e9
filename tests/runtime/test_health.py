"""The probes every long-running process answers (edgefd.runtime.health): /healthz fails only
after three missed periods and never sooner than a minute, saying for how long nothing ran;
the probe server is started on the address given (none without one), and an address that
cannot be bound is one error, not a traceback."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from edgefd.core.errors import EdgefdError
from edgefd.runtime.health import MIN_STALE, Freshness, serve
from edgefd.runtime.metrics import Metrics


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize(("period", "limit"), [(1.0, MIN_STALE), (30.0, 90.0)])
def test_alive_until_three_periods_pass_and_never_sooner_than_a_minute(
    period: float, limit: float
) -> None:
    clock = Clock()
    fresh = Freshness(period, "sync", clock=clock)
    assert fresh.limit == limit
    clock.t += limit
    assert fresh.check() == (True, "ok")
    clock.t += 1
    assert fresh.check() == (False, f"no sync for {limit + 1:.0f}s")
    fresh.touch()
    assert fresh.check() == (True, "ok")


def test_the_server_listens_where_told_and_says_when_it_cannot() -> None:
    assert serve(None, Metrics(), None, None) is None
    server = serve(("127.0.0.1", 0), Metrics(), lambda: (True, "ok"), lambda: (False, "no"))
    assert server is not None
    try:
        url = f"http://127.0.0.1:{server.port}/healthz"
        with urllib.request.urlopen(url, timeout=5) as r:
            assert r.status == 200
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(EdgefdError, match=f"cannot listen on 127.0.0.1:{port}: "):
                serve(("127.0.0.1", port), Metrics(), None, None)
    finally:
        server.stop()
