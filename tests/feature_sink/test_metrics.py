"""What the sink's metrics count on their own: every API request by verb and resource, the
writes among them apart (what an operator alerts on: a sink that writes in a steady state is
fighting someone), and the client's rate-limit waits with their seconds."""

from __future__ import annotations

import pytest

from edgefd.feature_sink.metrics import SinkMetrics


def test_requests_are_counted_and_writes_apart() -> None:
    m = SinkMetrics()
    for verb in ("GET", "LIST", "WATCH", "PATCH", "PATCH", "POST"):
        m.on_request(verb, "nodes")
    assert m.value("edgefd_sink_api_requests_total", verb="GET", resource="nodes") == 1
    assert m.value("edgefd_sink_api_requests_total", verb="PATCH", resource="nodes") == 2
    assert m.value("edgefd_sink_api_writes_total", verb="PATCH", resource="nodes") == 2
    assert m.value("edgefd_sink_api_writes_total", verb="POST", resource="nodes") == 1
    for read in ("GET", "LIST", "WATCH"):
        assert m.value("edgefd_sink_api_writes_total", verb=read, resource="nodes") == 0


def test_rate_limit_waits_are_counted_with_their_seconds() -> None:
    m = SinkMetrics()
    m.on_wait("sync", 0.25)
    m.on_wait("sync", 0.5)
    assert m.value("edgefd_sink_api_throttled_total", by="sync") == 2
    assert m.value("edgefd_sink_api_throttled_seconds_total", by="sync") == pytest.approx(0.75)
