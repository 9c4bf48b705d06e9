"""devplugin over gRPC: the plugin against a Python stand-in for the kubelet's registration.

The stand-in does what the kubelet does inside Register (dial the plugin, fetch its options,
start ListAndWatch) before answering, so a plugin that is not serving concurrently with its
own Register call fails here. The real kubelet code is exercised in test_devplugin_realpeer.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from edgefd.core.hostroot import HostRoot
from edgefd.core.service import WatchSettings
from edgefd.devplugin.api import deviceplugin_pb2 as pb
from edgefd.devplugin.api import deviceplugin_pb2_grpc as pb_grpc
from edgefd.devplugin.app import App, Options
from edgefd.devplugin.v1beta1.resource import socket_name
from edgefd.inventory.resources import default_config, parse_config
from edgefd.runtime.runner import serve_probes
from tests.fixturegen import HostBuilder, build_host
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
CORAL = "edgefd.io/coral-usb"
SLOW_RESCAN = WatchSettings(rescan_interval=30)


class FakeKubelet(pb_grpc.RegistrationServicer):
    """Registration server that dials back inside Register, like the kubelet."""

    def __init__(self, plugin_dir: Path) -> None:
        self.dir = plugin_dir
        self.lock = threading.Lock()
        self.registrations: list[tuple[float, str, str]] = []
        self.lists: dict[str, list[list[tuple[str, str]]]] = {}
        self.options: dict[str, pb.DevicePluginOptions] = {}
        self.channels: dict[str, grpc.Channel] = {}
        self.ended: list[str] = []
        self.server: grpc.Server | None = None
        self.start()

    def start(self) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port("unix:" + str(self.dir / "kubelet.sock"))
        self.server.start()

    def stop(self) -> None:
        assert self.server is not None
        self.server.stop(None).wait()
        with self.lock:
            chans = list(self.channels.values())
            self.channels.clear()
        for ch in chans:
            ch.close()

    def restart(self) -> None:
        """Like a starting kubelet: every socket in the directory is deleted, then kubelet.sock
        is created anew."""
        self.stop()
        for p in self.dir.iterdir():
            if p.is_socket():
                p.unlink()
        self.start()

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        ch = grpc.insecure_channel("unix:" + str(self.dir / request.endpoint))
        stub = pb_grpc.DevicePluginStub(ch)
        opts = stub.GetDevicePluginOptions(pb.Empty(), timeout=10)
        stream = stub.ListAndWatch(pb.Empty())
        res = request.resource_name
        with self.lock:
            old = self.channels.pop(res, None)
            self.channels[res] = ch
            self.options[res] = opts
            self.registrations.append((time.monotonic(), res, request.endpoint))
            self.lists.setdefault(res, [])
        if old is not None:
            old.close()

        def pump() -> None:
            try:
                for msg in stream:
                    with self.lock:
                        self.lists[res].append([(d.ID, d.health) for d in msg.devices])
            except grpc.RpcError:
                pass
            with self.lock:
                self.ended.append(res)

        threading.Thread(target=pump, daemon=True).start()
        assert request.version == "v1beta1"
        return pb.Empty()

    def stub(self, res: str) -> pb_grpc.DevicePluginStub:
        with self.lock:
            return pb_grpc.DevicePluginStub(self.channels[res])

    def last(self, res: str) -> list[tuple[str, str]] | None:
        with self.lock:
            lists = self.lists.get(res)
            return lists[-1] if lists else None

    def count(self, res: str) -> int:
        with self.lock:
            return sum(1 for _, r, _ in self.registrations if r == res)


@pytest.fixture
def node(tmp_path: Path) -> Path:
    return build_host("rpi4-coral", tmp_path / "host", devicetree=False)


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "dp"
    d.mkdir()
    return d


@pytest.fixture
def kubelet(plugin_dir: Path) -> Iterator[FakeKubelet]:
    k = FakeKubelet(plugin_dir)
    yield k
    k.stop()


@pytest.fixture
def plugin(node: Path, plugin_dir: Path, kubelet: FakeKubelet) -> Iterator[App]:
    opts = Options(
        plugin_dir=str(plugin_dir),
        host=HostRoot.of(node),
        links_dir=str(plugin_dir / "links"),
        listen=("127.0.0.1", 0),
        settings=SLOW_RESCAN,
    )
    p = App(opts, default_config()).start()
    server = serve_probes(opts.listen, p.metrics, [p])  # as the runner serves them
    p.port = server.port  # type: ignore[attr-defined]
    yield p
    server.stop()
    p.stop()


def test_registers_every_resource_with_a_device_and_serves_inside_register(
    plugin: App, kubelet: FakeKubelet, plugin_dir: Path
) -> None:
    names = [CORAL, "edgefd.io/ncs2"]  # the node has a device of these, none of the others
    wait_until(lambda: all(kubelet.last(n) is not None for n in names))
    assert kubelet.last(CORAL) == [("coral-usb-2-1", "Healthy")]
    assert kubelet.last("edgefd.io/ncs2") == [("ncs2-1-1-1", "Healthy")]
    time.sleep(0.3)
    assert kubelet.last("edgefd.io/hailo") is None  # no device: not registered, no `hailo: 0`
    assert not kubelet.options[CORAL].get_preferred_allocation_available
    endpoints = {e for _, _, e in kubelet.registrations}
    assert endpoints == {socket_name(n) for n in names}
    assert all((plugin_dir / e).is_socket() for e in endpoints)


def test_allocate_and_unknown_ids(plugin: App, kubelet: FakeKubelet, plugin_dir: Path) -> None:
    wait_until(lambda: kubelet.last(CORAL))
    stub = kubelet.stub(CORAL)
    resp = stub.Allocate(
        pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=["coral-usb-2-1"])]
        )
    )
    [cr] = resp.container_responses
    assert cr.envs["EDGEFD_CORAL_USB_DEVICES"] == "coral-usb-2-1"
    [spec] = cr.devices
    link = plugin_dir / "links" / "edgefd.io_coral-usb" / "coral-usb-2-1" / "0"
    assert spec.host_path == str(link)
    assert os.readlink(link).startswith("/dev/bus/usb/002/")  # a host path, not under the root
    with pytest.raises(grpc.RpcError) as e:
        stub.Allocate(
            pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=["coral-usb-7-7"])]
            )
        )
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert "unknown device ID(s) coral-usb-7-7" in e.value.details()
    # metrics reflect it
    port = plugin.port  # type: ignore[attr-defined]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    assert 'edgefd_devplugin_allocations_total{resource="edgefd.io/coral-usb"} 1' in text
    assert 'edgefd_devplugin_allocate_errors_total{resource="edgefd.io/coral-usb"} 1' in text
    assert 'edgefd_devplugin_devices{health="Healthy",resource="edgefd.io/coral-usb"} 1' in text
    # ready once every resource is registered (under load the last ones take a moment)
    served = [rp for rp in plugin.v1.resources.values() if rp.started]
    assert served and len(served) < len(plugin.v1.resources)  # not the ones with no device
    wait_until(lambda: all(rp.registered.is_set() for rp in served))
    ok = urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz").read().decode()
    assert "registered" in ok


def test_unplug_replug_and_reenumeration(
    plugin: App, kubelet: FakeKubelet, node: Path, plugin_dir: Path
) -> None:
    wait_until(lambda: kubelet.last(CORAL))
    hb = HostBuilder(node)
    link = plugin_dir / "links" / "edgefd.io_coral-usb" / "coral-usb-2-1" / "0"
    t0 = time.monotonic()
    hb.remove_usb("2-1")
    wait_until(lambda: kubelet.last(CORAL) == [("coral-usb-2-1", "Unhealthy")], timeout=2)
    assert time.monotonic() - t0 < 1.0
    assert not os.path.lexists(link)  # no stale grant while it is away
    t0 = time.monotonic()
    hb.add_usb({"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 9})
    wait_until(lambda: kubelet.last(CORAL) == [("coral-usb-2-1", "Healthy")], timeout=2)
    assert time.monotonic() - t0 < 1.0
    assert os.readlink(link) == "/dev/bus/usb/002/009"
    # every message carries the full list, and only changes are sent
    with kubelet.lock:
        msgs = list(kubelet.lists[CORAL])
    assert msgs == [
        [("coral-usb-2-1", "Healthy")],
        [("coral-usb-2-1", "Unhealthy")],
        [("coral-usb-2-1", "Healthy")],
    ]


def test_kubelet_restart_reregisters_quickly(
    plugin: App, kubelet: FakeKubelet, plugin_dir: Path
) -> None:
    wait_until(lambda: kubelet.count(CORAL) == 1 and kubelet.last(CORAL))
    t0 = time.monotonic()
    kubelet.restart()
    wait_until(lambda: kubelet.count(CORAL) >= 2, timeout=3)
    with kubelet.lock:
        t_reg = [t for t, r, _ in kubelet.registrations if r == CORAL][-1]
    assert t_reg - t0 < 1.0
    wait_until(lambda: CORAL in kubelet.ended)  # the old stream was ended
    wait_until(lambda: (plugin_dir / socket_name(CORAL)).is_socket())
    wait_until(lambda: plugin.v1.resources[CORAL].registered.is_set())
    assert plugin.metrics.value("edgefd_devplugin_kubelet_restarts_total") >= 1


def test_own_socket_removed_reregisters(
    plugin: App, kubelet: FakeKubelet, plugin_dir: Path
) -> None:
    wait_until(lambda: kubelet.count(CORAL) == 1)
    (plugin_dir / socket_name(CORAL)).unlink()
    wait_until(lambda: kubelet.count(CORAL) == 2, timeout=2)
    wait_until(lambda: (plugin_dir / socket_name(CORAL)).is_socket())


def test_registration_retries_until_the_kubelet_appears(node: Path, plugin_dir: Path) -> None:
    opts = Options(plugin_dir=str(plugin_dir), host=HostRoot.of(node), settings=SLOW_RESCAN)
    cfg = parse_config({"resources": [{"name": CORAL, "accelerator": "coral-usb"}]}, "x")
    p = App(opts, cfg).start()
    try:
        time.sleep(0.3)
        assert not p.v1.resources[CORAL].registered.is_set()
        assert "does not exist" in p.v1.resources[CORAL].last_error
        k = FakeKubelet(plugin_dir)
        try:
            t0 = time.monotonic()
            wait_until(lambda: k.last(CORAL), timeout=2)
            assert time.monotonic() - t0 < 1.0
        finally:
            k.stop()
    finally:
        p.stop()
    assert not (plugin_dir / socket_name(CORAL)).exists()


def test_preferred_allocation_with_replicas(node: Path, plugin_dir: Path) -> None:
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
    HostBuilder(node).add_usb({"port": "1-1.4.1", "vendor": "03e7", "product": "f63b"})
    opts = Options(plugin_dir=str(plugin_dir), host=HostRoot.of(node), settings=SLOW_RESCAN)
    p = App(opts, cfg).start()
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


# --------------------------------------------------------------------------- the command


def _run_plugin(args: list[str], **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "edgefd.devplugin", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_sigterm_removes_sockets_and_exits_0_sighup_reloads(
    node: Path, plugin_dir: Path, tmp_path: Path
) -> None:
    k = FakeKubelet(plugin_dir)
    cfg = tmp_path / "resources.yaml"
    cfg.write_text("resources:\n  - {name: edgefd.io/coral-usb, accelerator: coral-usb}\n")
    proc = _run_plugin(
        [
            "--host-root",
            str(node),
            "--plugin-dir",
            str(plugin_dir),
            "--config",
            str(cfg),
            "--listen",
            "",
            "-v",
        ]
    )
    try:
        wait_until(lambda: k.last(CORAL), timeout=15)
        cfg.write_text(
            "resources:\n  - {name: edgefd.io/ncs2, accelerator: ncs2}\n"
            "  - {name: edgefd.io/coral-usb, accelerator: coral-usb}\n"
        )
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: k.last("edgefd.io/ncs2"), timeout=5)
        assert k.count(CORAL) == 1  # unchanged resources are left alone
        cfg.write_text("resources:\n  - {name: edgefd.io/ncs2, accelerator: ncs2}\n")
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: not (plugin_dir / socket_name(CORAL)).exists(), timeout=5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert "Traceback" not in err  # the gRPC loop is stopped before the interpreter exits
        assert not [
            p.name
            for p in plugin_dir.iterdir()
            if p.name.startswith("edgefd-") and p.name.endswith(".sock")
        ]
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        k.stop()


@pytest.mark.parametrize("attempt", range(3))
def test_sigterm_is_a_clean_exit(node: Path, tmp_path: Path, attempt: int) -> None:
    """The shared gRPC loop is stopped before the interpreter exits; left running, it fired
    gRPC's poller callbacks on closed descriptors (an EBADF traceback, most runs)."""
    dp = tmp_path / "dp"
    proc = _run_plugin(["--host-root", str(node), "--plugin-dir", str(dp), "--listen", ""])
    # serving (its sockets exist), then a little longer each attempt
    wait_until(lambda: dp.is_dir() and any(dp.glob("edgefd-*.sock")), timeout=30)
    time.sleep(attempt * 0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Bad file descriptor" not in err, err


def test_bad_config_exits_3_naming_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "resources.yaml"
    cfg.write_text(
        "resources:\n  - {name: edgefd.io/a, accelerator: ncs2}\n"
        "  - name: edgefd.io/b\n    usb: [{vendor: xyz1, product: '0001'}]\n"
    )
    proc = _run_plugin(["--config", str(cfg), "--plugin-dir", str(tmp_path / "dp")])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3
    assert "resources[1].usb[0].vendor: 'xyz1' is not 4 hex digits" in err
    assert "Traceback" not in err


def test_dry_run_json_and_text(node: Path, tmp_path: Path) -> None:
    import json

    proc = _run_plugin(
        ["--host-root", str(node), "--plugin-dir", str(tmp_path / "dp"), "--dry-run", "-o", "json"]
    )
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    doc = json.loads(out)
    coral = next(r for r in doc["resources"] if r["resource"] == CORAL)
    [dev] = coral["devices"]
    assert dev["id"] == "coral-usb-2-1" and dev["state"] == "boot"
    assert dev["allocate"]["envs"] == {"EDGEFD_CORAL_USB_DEVICES": "coral-usb-2-1"}
    assert not (tmp_path / "dp").exists()  # a dry run writes nothing
    proc = _run_plugin(
        ["--host-root", str(node), "--plugin-dir", str(tmp_path / "dp"), "--dry-run"]
    )
    out, _ = proc.communicate(timeout=30)
    assert "coral-usb-2-1: Healthy, usb 2-1, 1a6e:089a boot" in out


class DialingKubelet(FakeKubelet):
    """Dials back like the kubelet: blocking until the plugin's socket accepts (10 s), bound to
    the Register call, so a plugin socket that vanished makes Register hang, and a Register
    the plugin cancels stops the dial."""

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        with grpc.insecure_channel("unix:" + str(self.dir / request.endpoint)) as ch:
            ready = grpc.channel_ready_future(ch)
            deadline = time.monotonic() + 10
            while True:
                try:
                    ready.result(timeout=0.05)
                    break
                except grpc.FutureTimeoutError:
                    if not context.is_active():
                        ready.cancel()
                        return pb.Empty()
                    if time.monotonic() > deadline:
                        ready.cancel()
                        context.abort(grpc.StatusCode.UNKNOWN, "failed to dial device plugin")
        return super().Register(request, context)


def test_kubelet_restart_during_a_registration_attempt(
    node: Path, plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registration attempt that raced a kubelet restart is redone for the new kubelet.

    Deterministic replay of a CI failure: the plugin served on a fresh socket and was about to
    Register when the kubelet restarted: the new kubelet deleted that socket and recreated
    kubelet.sock. The plugin ignored the deletion (it was registering), Register reached the
    new kubelet, which dialed the deleted socket for 10 s: the resource stayed unregistered.
    """
    import edgefd.devplugin.v1beta1.resource as plugin_mod

    kubelet = DialingKubelet(plugin_dir)
    real_register = plugin_mod.register
    armed = threading.Event()

    def racing_register(*args: Any, **kw: Any) -> None:
        if armed.is_set():
            armed.clear()
            kubelet.restart()  # deletes the socket this attempt just serves on
            time.sleep(0.3)  # the plugin-dir watch has seen it all
        real_register(*args, **kw)

    monkeypatch.setattr(plugin_mod, "register", racing_register)
    opts = Options(plugin_dir=str(plugin_dir), host=HostRoot.of(node), settings=SLOW_RESCAN)
    cfg = parse_config({"resources": [{"name": CORAL, "accelerator": "coral-usb"}]}, "x")
    p = App(opts, cfg).start()
    try:
        wait_until(lambda: kubelet.count(CORAL) == 1 and kubelet.last(CORAL))
        armed.set()
        t0 = time.monotonic()
        kubelet.restart()
        wait_until(lambda: not armed.is_set())
        wait_until(lambda: kubelet.count(CORAL) == 2, timeout=3)
        with kubelet.lock:
            t_reg = kubelet.registrations[-1][0]
        assert t_reg - t0 < 1.5
        wait_until(lambda: p.v1.resources[CORAL].registered.is_set())
        wait_until(lambda: kubelet.last(CORAL))
        time.sleep(0.5)
        assert kubelet.count(CORAL) == 2  # exactly once with the new kubelet
        assert (plugin_dir / socket_name(CORAL)).is_socket()
    finally:
        p.stop()
        kubelet.stop()


# --------------------------------------------------------------------------- many streams


class OpenStreams:
    """`n` ListAndWatch streams held open on a plugin socket, as other clients (or a kubelet
    reconnecting while its old stream lingers) would hold them; each records what it gets."""

    def __init__(self, socket: Path, n: int, per_channel: int = 5) -> None:
        self.channels = [
            grpc.insecure_channel(f"unix:{socket}")
            for _ in range((n + per_channel - 1) // per_channel)
        ]
        self.lock = threading.Lock()
        self.received: list[list[list[tuple[str, str]]]] = [[] for _ in range(n)]
        self.errors: list[grpc.StatusCode] = []
        self.calls = []
        for i in range(n):
            call = pb_grpc.DevicePluginStub(self.channels[i // per_channel]).ListAndWatch(
                pb.Empty()
            )
            self.calls.append(call)
            threading.Thread(target=self._pump, args=(i, call), daemon=True).start()

    def _pump(self, i: int, call: Any) -> None:
        try:
            for msg in call:
                with self.lock:
                    self.received[i].append([(d.ID, d.health) for d in msg.devices])
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                with self.lock:
                    self.errors.append(e.code())

    def all_got(self, want: list[tuple[str, str]]) -> bool:
        with self.lock:
            return all(r and r[-1] == want for r in self.received)

    def close(self) -> None:
        for c in self.calls:
            c.cancel()
        for ch in self.channels:
            ch.close()


def _timed(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return sorted(out)


def test_fifty_open_streams_never_starve_the_unary_calls(
    plugin: App, kubelet: FakeKubelet, plugin_dir: Path, node: Path
) -> None:
    """Issue 11 item 5: with a worker thread per stream, 4 open streams left the kubelet's
    Allocate unanswered (and 16 made every further call RESOURCE_EXHAUSTED)."""
    wait_until(lambda: kubelet.last(CORAL))
    streams = OpenStreams(plugin_dir / socket_name(CORAL), 50)
    try:
        wait_until(lambda: streams.all_got([("coral-usb-2-1", "Healthy")]))
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
            assert p99 < 500, f"{name}: p99 {p99:.1f} ms with 50 streams open"
        # every stream is still served: a hot-plug reaches all 50 (and the kubelet's)
        HostBuilder(node).remove_usb("2-1")
        wait_until(lambda: streams.all_got([("coral-usb-2-1", "Unhealthy")]), timeout=3)
        assert kubelet.last(CORAL) == [("coral-usb-2-1", "Unhealthy")]
        assert streams.errors == []
    finally:
        streams.close()
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
def test_the_kubelet_allocates_while_fifty_streams_are_open(
    node: Path, kubelet_devices: Any
) -> None:
    """The kubelet's own device manager, on a plugin whose socket holds 50 other streams."""
    pdir = Path(kubelet_devices.plugin_dir)
    opts = Options(
        plugin_dir=str(pdir), host=HostRoot.of(node), links_dir=None, settings=SLOW_RESCAN
    )
    cfg = parse_config({"resources": [{"name": CORAL, "accelerator": "coral-usb"}]}, "x")
    p = App(opts, cfg).start()
    streams = None
    try:
        kubelet_devices.wait_for("registered", resource=CORAL, timeout=20)
        streams = OpenStreams(pdir / socket_name(CORAL), 50)
        wait_until(lambda: streams.all_got([("coral-usb-2-1", "Healthy")]))
        t0 = time.monotonic()
        r = kubelet_devices.allocate(CORAL, count=1, timeout=10)
        assert r["ok"], r
        assert r["device_ids"] == ["coral-usb-2-1"]
        assert time.monotonic() - t0 < 2.0
    finally:
        if streams is not None:
            streams.close()
        p.stop()


# --------------------------------------------------------------------------- empty configuration


@pytest.mark.parametrize("text", ["", "resources: []\n", "forget_after: 60\n"])
def test_a_configuration_with_no_resources_warns_and_is_not_ready(
    node: Path, plugin_dir: Path, tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 11 item 10: valid YAML with no resources ran a plugin that served nothing, silently."""
    from edgefd.inventory.resources import load_config

    cfg_path = tmp_path / "resources.yaml"
    cfg_path.write_text(text)
    with caplog.at_level("WARNING"):
        cfg = load_config(cfg_path)
    reason = f"{cfg_path}: no resources configured, so nothing is advertised to the kubelet"
    assert reason in caplog.text
    opts = Options(
        plugin_dir=str(plugin_dir),
        host=HostRoot.of(node),
        listen=("127.0.0.1", 0),
        settings=SLOW_RESCAN,
    )
    p = App(opts, cfg).start()
    server = serve_probes(opts.listen, p.metrics, [p])  # as the runner serves them
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/readyz")
        assert e.value.code == 503
        assert reason in e.value.read().decode()
    finally:
        server.stop()
        p.stop()


def test_the_default_configuration_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    from edgefd.inventory.resources import load_config

    with caplog.at_level("WARNING"):
        assert load_config(None).serves_nothing() is None
    assert caplog.text == ""


def test_devplugin_with_an_empty_configuration_warns_at_start_up(
    plugin_dir: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "resources.yaml"
    cfg.write_text("resources: []\n")
    proc = _run_plugin(
        ["--config", str(cfg), "--plugin-dir", str(plugin_dir), "--listen", "", "-v"]
    )
    try:
        assert proc.stderr is not None
        lines = []
        while not any("serving 0 resource(s)" in ln for ln in lines):  # signals are handled
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=15)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    err = "".join(lines) + rest
    assert proc.returncode == 0, err
    assert f"devplugin: WARNING: {cfg}: no resources configured, so nothing is advertised" in err


# --------------------------------------------------------------------------- bad numbers


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "-inf", "1e3", "9" * 400, "0", "86401"])
def test_bad_rescan_interval_is_a_usage_error(tmp_path: Path, value: str) -> None:
    from click.testing import CliRunner

    from edgefd.devplugin.cli import main

    res = CliRunner().invoke(
        main, ["--plugin-dir", str(tmp_path / "dp"), "--dry-run", "--rescan-interval", value]
    )
    assert res.exit_code == 2, res.output
    assert "Invalid value for '--rescan-interval'" in res.stderr
    assert res.stdout == "" and not (tmp_path / "dp").exists()


def test_non_finite_forget_after_is_exit_3_in_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "resources.yaml"
    cfg.write_text("forget_after: .nan\nresources: [{name: edgefd.io/a, accelerator: ncs2}]\n")
    proc = _run_plugin(["--config", str(cfg), "--plugin-dir", str(tmp_path / "dp")])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3
    assert err == f"devplugin: error: {cfg}: forget_after: nan is not a finite duration\n"


# --------------------------------------------------------------------------- hostile strings


def test_dry_run_shows_hostile_device_strings_escaped_and_json_strict(tmp_path: Path) -> None:
    """A Coral whose serial forges lines (and is its ID source) and an NCS2 whose sysfs name is
    not UTF-8: the text is one printable line per entry, the JSON strict UTF-8."""
    import json

    root = tmp_path / "host"
    b = HostBuilder(root)
    b.add_usb({"port": "usb1", "vendor": "1d6b", "product": "0002", "class": "09"})
    coral = b.add_usb({"port": "1-1", "vendor": "1a6e", "product": "089a", "class": "fe"})
    (coral / "serial").write_bytes(b"AB\ndevplugin: ERROR: forged\x1b[2J\xff\n")
    ncs2 = b.add_usb({"port": "1-2", "vendor": "03e7", "product": "2485", "class": "ff"})
    bus = root / "sys/bus/usb/devices"
    weird = os.fsencode(ncs2.parent) + b"/1-\xff"
    os.rename(os.fsencode(ncs2), weird)
    os.unlink(bus / "1-2")
    os.symlink(os.path.relpath(weird, os.fsencode(bus)), os.fsencode(bus) + b"/1-\xff")
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    cfg = tmp_path / "resources.yaml"
    cfg.write_text(
        "resources:\n  - {name: edgefd.io/coral-usb, accelerator: coral-usb, id_from: serial}\n"
        "  - {name: edgefd.io/ncs2, accelerator: ncs2}\n"
    )
    argv = ["--host-root", str(root), "--plugin-dir", str(tmp_path / "dp"), "--config", str(cfg)]
    for output in ("text", "json"):
        proc = subprocess.run(
            [sys.executable, "-m", "edgefd.devplugin", *argv, "--dry-run", "-o", output],
            cwd=ROOT,
            capture_output=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr  # a name that is not UTF-8 was exit 70
        out = proc.stdout.decode("utf-8", "strict")
        if output == "json":
            doc = json.loads(out)
            json.dumps(doc, ensure_ascii=False).encode("utf-8", "strict")
            ncs2_dev = next(r for r in doc["resources"] if r["resource"] == "edgefd.io/ncs2")
            assert ncs2_dev["devices"][0]["location"] == "1-\\xff"
        else:
            assert "\x1b" not in out and "\r" not in out
            assert not any(line.startswith("devplugin: ") for line in out.splitlines())
            assert "usb 1-\\xff" in out
