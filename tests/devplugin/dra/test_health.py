"""DRAResourceHealth over the plugin's real service socket, streamed with the kubelet's own
generated client (both packages the 1.37 kubelet speaks): the whole pool when the stream
opens, a change within a second, the reason as the message, a resend while nothing changes
(the kubelet forgets a device it has not heard of for 30 s), a stop that does not wait
for an open stream, and a cap on open streams (RESOURCE_EXHAUSTED beyond it) that leaves
NodePrepareResources its own workers however many are open. The real kubelet reads it in
the real-node end-to-end (tests/system/checks_health.py)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from edgefd.devplugin.dra.api import dra_pb2 as dra
from edgefd.devplugin.dra.api import dra_pb2_grpc as dra_grpc
from edgefd.devplugin.dra.api import (
    health_pb2,
    health_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
)
from edgefd.devplugin.dra.api import pluginregistration_pb2 as reg
from edgefd.devplugin.dra.api import pluginregistration_pb2_grpc as reg_grpc
from edgefd.devplugin.dra.checkpoint import Checkpoint
from edgefd.devplugin.dra.claims import Preparer
from edgefd.devplugin.dra.health import MAX_STREAMS, TIMEOUT, HealthBoard, health_of
from edgefd.devplugin.dra.kubeletplugin import KubeletPlugin
from edgefd.devplugin.kubeletsocket import SocketDirs
from edgefd.devplugin.links import LinkLayout
from tests.devplugin.devices import CORAL, NODE, apex, coral, table
from tests.devplugin.dra.fakeapi import Claims
from tests.devplugin.kubelet import channel
from tests.helpers import wait_until

CORAL_NAME = "coral-usb-2-1"
APEX_NAME = "coral-pcie-0000-02-00-0"


def devices(**coral_kw):
    c, a = coral(**coral_kw), apex()
    return {c.name: c, a.name: a}


CLAIMS = Claims()


@pytest.fixture
def plugin(kubelet_dir: Path) -> Iterator[tuple[KubeletPlugin, HealthBoard]]:
    board = HealthBoard(NODE, heartbeat=0.5)
    board.update(devices())
    preparer = Preparer(
        NODE, str(kubelet_dir / "cdi"), LinkLayout(None), Checkpoint(kubelet_dir, NODE), CLAIMS
    )
    preparer.update(table((coral(), CORAL)))
    kp = KubeletPlugin(str(kubelet_dir), preparer, SocketDirs(), health=board).start()
    try:
        yield kp, board
    finally:
        board.close()
        kp.stop()


def _reader(stream: grpc.Future) -> queue.Queue:
    """Every response of the stream, as it arrives, with the time it arrived; then how it
    ended (None: cleanly, else the RpcError)."""
    out: queue.Queue = queue.Queue()

    def run() -> None:
        try:
            for resp in stream:
                out.put((time.monotonic(), resp))
            out.put((time.monotonic(), None))
        except grpc.RpcError as e:
            out.put((time.monotonic(), e))

    threading.Thread(target=run, daemon=True).start()
    return out


def _by_name(resp) -> dict[str, tuple[int, str, str, int]]:
    out = {}
    for d in resp.devices:
        out[d.device.device_name] = (
            d.health,
            d.message,
            d.device.pool_name,
            d.health_check_timeout_seconds,
        )
    return out


def test_registration_offers_the_health_service(plugin) -> None:
    kp, _ = plugin
    with channel(kp.registration_socket) as ch:
        info = reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=5)
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]


def test_v1_stream_follows_unplug_and_replug(plugin) -> None:
    kp, board = plugin
    pb = health_pb2
    with channel(kp.service_socket) as ch:
        stream = health_pb2_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
            pb.NodeWatchResourcesRequest(), timeout=20
        )
        got = _reader(stream)
        _, first = got.get(timeout=5)
        assert _by_name(first) == {
            APEX_NAME: (pb.HEALTHY, "present at PCI address 0000:02:00.0", NODE, TIMEOUT),
            CORAL_NAME: (pb.HEALTHY, "present at port 2-1", NODE, TIMEOUT),
        }
        assert abs(first.devices[0].last_updated_time - time.time()) < 5

        changed = time.monotonic()
        board.update(devices(present=False, reason="unplugged from port 2-1"))
        at, resp = got.get(timeout=2)
        while _by_name(resp)[CORAL_NAME][0] != pb.UNHEALTHY:  # a heartbeat may come first
            at, resp = got.get(timeout=2)
        assert at - changed < 1.0
        assert _by_name(resp)[CORAL_NAME][:2] == (pb.UNHEALTHY, "unplugged from port 2-1")
        assert _by_name(resp)[APEX_NAME][0] == pb.HEALTHY

        board.update(devices())
        at, resp = got.get(timeout=2)
        while _by_name(resp)[CORAL_NAME][0] != pb.HEALTHY:
            at, resp = got.get(timeout=2)
        stream.cancel()


def test_v1alpha1_stream_speaks_the_same(plugin) -> None:
    kp, board = plugin
    pb = health_v1alpha1_pb2
    board.update(devices(present=False, reason="re-enumerating at port 2-1"))
    with channel(kp.service_socket) as ch:
        stream = health_v1alpha1_pb2_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
            pb.NodeWatchResourcesRequest(), timeout=10
        )
        first = next(iter(stream))
        assert _by_name(first)[CORAL_NAME][:2] == (pb.UNHEALTHY, "re-enumerating at port 2-1")
        stream.cancel()


def test_a_quiet_stream_resends_the_pool(plugin) -> None:
    """Without a change, the report comes again every heartbeat: the kubelet's cache would
    otherwise turn the device Unknown after its timeout."""
    kp, board = plugin
    with channel(kp.service_socket) as ch:
        stream = health_pb2_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
            health_pb2.NodeWatchResourcesRequest(), timeout=10
        )
        got = _reader(stream)
        t0, a = got.get(timeout=5)
        t1, b = got.get(timeout=5)
        assert 0.3 < t1 - t0 < 2.0
        assert _by_name(a) == _by_name(b)
        assert board.version == 1  # nothing changed: the same report again
        stream.cancel()


def test_stop_ends_an_open_stream_at_once(kubelet_dir: Path) -> None:
    board = HealthBoard(NODE, heartbeat=30.0)
    board.update(devices())
    preparer = Preparer(
        NODE, str(kubelet_dir / "cdi"), LinkLayout(None), Checkpoint(kubelet_dir, NODE), Claims()
    )
    kp = KubeletPlugin(str(kubelet_dir), preparer, SocketDirs(), health=board).start()
    with channel(kp.service_socket) as ch:
        stream = health_pb2_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
            health_pb2.NodeWatchResourcesRequest(), timeout=60
        )
        got = _reader(stream)
        got.get(timeout=5)
        t = time.monotonic()
        board.close()
        kp.stop()
        assert time.monotonic() - t < 3.0
        got.get(timeout=5)  # the stream ended (cleanly or cancelled), not hanging
        assert board.streams == 0


def test_a_hot_coral_pcie_streams_unhealthy_with_its_temperature(
    kubelet_dir: Path, tmp_path: Path
) -> None:
    """Issue 31 item 4: the inventory's temperature verdict reaches the kubelet's client of
    the health stream: Unhealthy with the temperature as the message, Healthy once cool."""
    from edgefd.core.hostroot import HostRoot
    from edgefd.devplugin.app import Options, make_inventory
    from edgefd.devplugin.resources import default_config
    from tests.fixturegen import build_host

    host = build_host("x86-coral-pcie", tmp_path / "host", devicetree=False)
    temp = host / "sys/class/apex/apex_0/temp"
    inventory = make_inventory(Options("/nonexistent", HostRoot.of(host)), default_config())
    board = HealthBoard(NODE, heartbeat=30.0)

    def scan() -> None:
        board.update({d.name: d for d in inventory.scan().devices if d.resources})

    scan()
    preparer = Preparer(
        NODE, str(kubelet_dir / "cdi"), LinkLayout(None), Checkpoint(kubelet_dir, NODE), Claims()
    )
    kp = KubeletPlugin(str(kubelet_dir), preparer, SocketDirs(), health=board).start()
    pb = health_pb2
    try:
        with channel(kp.service_socket) as ch:
            stream = health_pb2_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
                pb.NodeWatchResourcesRequest(), timeout=20
            )
            got = _reader(stream)
            _, first = got.get(timeout=5)
            assert _by_name(first)[APEX_NAME][0] == pb.HEALTHY
            temp.write_text("90000\n")
            scan()
            _, resp = got.get(timeout=2)
            assert _by_name(resp)[APEX_NAME][:2] == (
                pb.UNHEALTHY,
                "90.0 °C, above the limit 84.8 °C",
            )
            temp.write_text("79000\n")
            scan()
            _, resp = got.get(timeout=2)
            assert _by_name(resp)[APEX_NAME][0] == pb.HEALTHY
            stream.cancel()
    finally:
        board.close()
        kp.stop()


def _open_streams(ch: grpc.Channel, n: int) -> list[tuple[grpc.Future, queue.Queue]]:
    """`n` NodeWatchResources streams, both packages in turn, each with its reader."""
    out = []
    for i in range(n):
        pb, pb_grpc = (
            (health_pb2, health_pb2_grpc)
            if i % 2
            else (health_v1alpha1_pb2, health_v1alpha1_pb2_grpc)
        )
        stream = pb_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
            pb.NodeWatchResourcesRequest(), timeout=60
        )
        out.append((stream, _reader(stream)))
    return out


def test_open_streams_up_to_the_cap_never_delay_a_prepare(plugin) -> None:
    """Every stream the cap allows is open (each holds a worker): NodePrepareResources is
    still answered at once, as is NodeUnprepareResources."""
    kp, board = plugin
    ref = CLAIMS.add("while-watched", [CORAL_NAME])
    claim = dra.Claim(namespace=ref.namespace, uid=ref.uid, name=ref.name)
    with channel(kp.service_socket) as ch:
        streams = _open_streams(ch, MAX_STREAMS)
        try:
            for _, got in streams:
                _, first = got.get(timeout=5)
                assert first is not None and not isinstance(first, grpc.RpcError)
            assert board.streams == MAX_STREAMS
            stub = dra_grpc.DRAPluginStub(ch)
            t0 = time.monotonic()
            resp = stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[claim]), 3)
            took = time.monotonic() - t0
            assert not resp.claims[ref.uid].error and resp.claims[ref.uid].devices
            assert took < 1.0, f"NodePrepareResources took {took:.2f} s"
            un = stub.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=[claim]), 3)
            assert not un.claims[ref.uid].error
            assert board.streams == MAX_STREAMS  # still open, still served
        finally:
            for stream, _ in streams:
                stream.cancel()


def test_a_stream_beyond_the_cap_is_refused_and_one_fits_again_once_one_ends(plugin) -> None:
    kp, board = plugin
    with channel(kp.service_socket) as ch:
        streams = _open_streams(ch, MAX_STREAMS)
        try:
            for _, got in streams:
                got.get(timeout=5)
            for pb, pb_grpc in (
                (health_pb2, health_pb2_grpc),
                (health_v1alpha1_pb2, health_v1alpha1_pb2_grpc),
            ):
                extra = pb_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
                    pb.NodeWatchResourcesRequest(), timeout=5
                )
                with pytest.raises(grpc.RpcError) as refused:
                    next(iter(extra))
                assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert f"{MAX_STREAMS} streams are open already" in refused.value.details()
            assert board.streams == MAX_STREAMS
            first, _ = streams.pop()
            first.cancel()
            wait_until(lambda: board.streams == MAX_STREAMS - 1, 5, 0.02, "a stream to end")
            streams += _open_streams(ch, 1)
            _, resp = streams[-1][1].get(timeout=5)
            assert resp is not None and not isinstance(resp, grpc.RpcError)
        finally:
            for stream, _ in streams:
                stream.cancel()
    wait_until(lambda: board.streams == 0, 5, 0.02, "every stream to end")


def test_board_changes_only_on_a_change() -> None:
    board = HealthBoard(NODE, clock=lambda: 100.0)
    assert board.update(devices())
    assert not board.update(devices())  # the same health: no new version, nothing sent
    assert board.version == 1
    missing = "device node /dev/bus/usb/002/003 is missing"
    assert board.update(devices(reason=missing))  # present, unusable: Unhealthy too
    assert board.get(CORAL_NAME) == (False, missing) == health_of(coral(reason=missing))
