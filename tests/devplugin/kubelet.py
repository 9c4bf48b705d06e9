"""The kubelet's side of the plugin's sockets, as the tests play it: `FakeKubelet`, a Python
stand-in for the kubelet's v1beta1 Registration service that does what the kubelet does inside
Register (dial the plugin, fetch its options, start ListAndWatch) before it answers;
`OpenStreams`, ListAndWatch streams held open on a plugin socket as other clients would hold
them; and `channel`, a gRPC channel to a unix socket as the kubelet dials one. The kubelet's
own code is exercised in test_realpeer.py (tests/harness kubelet-devices).
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from edgefd.devplugin.api import deviceplugin_pb2 as pb
from edgefd.devplugin.api import deviceplugin_pb2_grpc as pb_grpc


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


def channel(path: str) -> grpc.Channel:
    """A channel to a plugin's unix socket, as the kubelet dials it."""
    return grpc.insecure_channel("unix:" + path)
