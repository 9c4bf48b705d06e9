"""The DevicePlugin gRPC service of one resource (server.py): GetDevicePluginOptions and
GetPreferredAllocation over the wire for a shared device's replica IDs, and why its streams
are capped: open ListAndWatch streams up to the cap, and fifty asked for, never starve the
kubelet's unary calls (also with the kubelet's own device manager), every stream served gets
each change, the ones beyond the cap are refused, and a stop ends them all at once."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from edgefd.core.hostroot import HostRoot
from edgefd.core.service import WatchSettings
from edgefd.devplugin.api import deviceplugin_pb2 as pb
from edgefd.devplugin.api import deviceplugin_pb2_grpc as pb_grpc
from edgefd.devplugin.app import Options
from edgefd.devplugin.resources import parse_config
from edgefd.devplugin.v1beta1.resource import socket_name
from tests.devplugin.kubelet import FakeKubelet, OpenStreams
from tests.devplugin.running import Running
from tests.fixturegen import HostBuilder
from tests.helpers import wait_until

CORAL = "edgefd.io/coral-usb"
SLOW_RESCAN = WatchSettings(rescan_interval=30)


def test_preferred_allocation_with_replicas(host: Path, plugin_dir: Path) -> None:
    k = FakeKubelet(plugin_dir)
    cfg = parse_config(
        {
            "resources": [
                {"name": "edgefd.io/usb-sticks", "accelerator": "ncs2", "replicas": 2},
            ]
        },
        "x",
    )
    # a second NCS2 on another port
    HostBuilder(host).add_usb({"port": "1-1.4.1", "vendor": "03e7", "product": "f63b"})
    opts = Options(plugin_dir=str(plugin_dir), host=HostRoot.of(host), settings=SLOW_RESCAN)
    p = Running(opts, cfg).start()
    try:
        res = "edgefd.io/usb-sticks"
        wait_until(lambda: k.last(res))
        assert k.options[res].get_preferred_allocation_available
        ids = [i for i, _ in k.last(res) or []]
        assert ids == ["ncs2-1-1-1-r0", "ncs2-1-1-1-r1", "ncs2-1-1-4-1-r0", "ncs2-1-1-4-1-r1"]
        resp = k.stub(res).GetPreferredAllocation(
            pb.PreferredAllocationRequest(
                container_requests=[
                    pb.ContainerPreferredAllocationRequest(
                        available_deviceIDs=ids, allocation_size=2
                    )
                ]
            )
        )
        assert list(resp.container_responses[0].deviceIDs) == ["ncs2-1-1-1-r0", "ncs2-1-1-4-1-r0"]
    finally:
        p.stop()
        k.stop()


# --------------------------------------------------------------------------- many streams


def _timed(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return sorted(out)


def test_streams_up_to_the_cap_and_fifty_refused_never_starve_the_unary_calls(
    plugin: Running, kubelet: FakeKubelet, plugin_dir: Path, host: Path
) -> None:
    """Issue 11 item 5: with a worker thread per stream and no cap, 4 open streams left the
    kubelet's Allocate unanswered (and 16 made every further call RESOURCE_EXHAUSTED). Now
    the streams have workers of their own: every stream the cap allows is served, fifty more
    are refused at once, and the unary calls are answered all the while."""
    from edgefd.devplugin.v1beta1.server import MAX_STREAMS

    wait_until(lambda: kubelet.last(CORAL))
    sock = plugin_dir / socket_name(CORAL)
    streams = OpenStreams(sock, MAX_STREAMS - 1)  # with the kubelet's own: the cap
    refused = None
    try:
        wait_until(lambda: streams.all_got([("coral-usb-2-1", "Healthy")]))
        refused = OpenStreams(sock, 50)
        wait_until(lambda: len(refused.errors) == 50, timeout=10)
        assert set(refused.errors) == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        stub = kubelet.stub(CORAL)
        alloc = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=["coral-usb-2-1"])]
        )
        pref = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=["coral-usb-2-1"], allocation_size=1
                )
            ]
        )
        # a deadline on every call: a starved call fails the test instead of hanging it
        lat = {
            "Allocate": _timed(lambda: stub.Allocate(alloc, timeout=2), 200),
            "GetPreferredAllocation": _timed(
                lambda: stub.GetPreferredAllocation(pref, timeout=2), 200
            ),
            "GetDevicePluginOptions": _timed(
                lambda: stub.GetDevicePluginOptions(pb.Empty(), timeout=2), 200
            ),
        }
        for name, ms in lat.items():
            p99 = ms[int(len(ms) * 0.99) - 1]
            # the aim is 5 ms (benchmarks/bench_devplugin.py measures it); this test guards
            # against starvation, where a call waits for a worker seconds on end or fails.
            # A shared 2-core machine at load 7 with 50 client threads in this process
            # measured 70 ms, so the bound sits well above load noise and far below a starved
            # call's 2 s deadline
            assert p99 < 500, f"{name}: p99 {p99:.1f} ms with every stream open"
        # every stream served is still served: a hot-plug reaches all (and the kubelet's)
        HostBuilder(host).remove_usb("2-1")
        wait_until(lambda: streams.all_got([("coral-usb-2-1", "Unhealthy")]), timeout=3)
        assert kubelet.last(CORAL) == [("coral-usb-2-1", "Unhealthy")]
        assert streams.errors == []
    finally:
        streams.close()
        if refused is not None:
            refused.close()
    server = plugin.v1.resources[CORAL]._server
    assert server is not None
    wait_until(lambda: server.streams == 1)  # only the kubelet's is left


def test_streams_beyond_the_cap_are_refused_and_unary_calls_still_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import edgefd.devplugin.v1beta1.server as server_mod
    from edgefd.devplugin.links import LinkLayout

    monkeypatch.setattr(server_mod, "MAX_STREAMS", 3)
    cfg = parse_config({"resources": [{"name": CORAL, "accelerator": "coral-usb"}]}, "x")
    state = server_mod.ResourceState(cfg.resources[0], LinkLayout(None), None)
    sock = tmp_path / "p.sock"
    srv = server_mod.PluginServer(state, str(sock)).start()
    streams = OpenStreams(sock, 4)
    try:
        wait_until(lambda: streams.errors == [grpc.StatusCode.RESOURCE_EXHAUSTED])
        assert srv.streams == 3
        with grpc.insecure_channel(f"unix:{sock}") as ch:
            opts = pb_grpc.DevicePluginStub(ch).GetDevicePluginOptions(pb.Empty(), timeout=2)
        assert opts.pre_start_required is False
    finally:
        streams.close()
        t0 = time.monotonic()
        srv.stop()
        assert time.monotonic() - t0 < 2.0
    assert not sock.exists()


@pytest.mark.realpeer
def test_the_kubelet_allocates_while_every_stream_is_open(host: Path, kubelet_devices: Any) -> None:
    """The kubelet's own device manager, on a plugin whose socket holds every stream the cap
    allows beside the kubelet's, and refuses fifty more."""
    from edgefd.devplugin.v1beta1.server import MAX_STREAMS

    pdir = Path(kubelet_devices.plugin_dir)
    opts = Options(
        plugin_dir=str(pdir), host=HostRoot.of(host), links_dir=None, settings=SLOW_RESCAN
    )
    cfg = parse_config({"resources": [{"name": CORAL, "accelerator": "coral-usb"}]}, "x")
    p = Running(opts, cfg).start()
    streams = None
    try:
        kubelet_devices.wait_for("registered", resource=CORAL, timeout=20)
        streams = OpenStreams(pdir / socket_name(CORAL), MAX_STREAMS - 1 + 50)
        wait_until(lambda: len(streams.errors) == 50, timeout=10)
        t0 = time.monotonic()
        r = kubelet_devices.allocate(CORAL, count=1, timeout=10)
        assert r["ok"], r
        assert r["device_ids"] == ["coral-usb-2-1"]
        assert time.monotonic() - t0 < 2.0
    finally:
        if streams is not None:
            streams.close()
        p.stop()
