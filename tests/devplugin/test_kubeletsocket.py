"""Serving the kubelet on a unix socket (kubeletsocket.py), the one way both front-ends do: a
server answers on its socket; a socket file deleted or replaced is served afresh on the same
path (and only then); a stop removes the socket only if it is still ours, many servers stop
within one deadline; streams beyond the server's stream workers never take the unary calls'
workers; and one watch of the socket directories tells every listener, one listener's failure
not deafening the others."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from edgefd.devplugin.dra.api import pluginregistration_pb2 as reg
from edgefd.devplugin.dra.api import pluginregistration_pb2_grpc as reg_grpc
from edgefd.devplugin.kubeletsocket import KubeletSocket, SocketDirs, stop_all
from tests.helpers import wait_until


class Info(reg_grpc.RegistrationServicer):
    """A unary call to answer (GetInfo), and a slow one that holds a worker."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def GetInfo(self, request, context):  # type: ignore[no-untyped-def]
        return reg.PluginInfo(name="example.com")

    def NotifyRegistrationStatus(self, request, context):  # type: ignore[no-untyped-def]
        self.release.wait(10)  # a call that holds its worker until released
        return reg.RegistrationStatusResponse()


def _get(path: str) -> str:
    with grpc.insecure_channel(f"unix:{path}") as ch:
        return reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=5).name


@pytest.fixture
def served(short_dir: Path) -> Iterator[tuple[KubeletSocket, Info]]:
    info = Info()
    sock = KubeletSocket(
        str(short_dir / "s" / "plugin.sock"),
        lambda server: reg_grpc.add_RegistrationServicer_to_server(info, server),
        unary=2,
    ).start()
    yield sock, info
    info.release.set()
    sock.stop()


def test_it_serves_and_a_vanished_socket_is_served_afresh_on_its_path(served) -> None:
    sock, _ = served
    assert _get(sock.path) == "example.com" and sock.is_ours()
    assert sock.ensure() is False  # still ours: nothing to do
    os.unlink(sock.path)  # a starting kubelet deletes every socket
    assert not sock.is_ours()
    assert sock.ensure() is True and sock.is_ours()
    assert _get(sock.path) == "example.com"


def test_a_stop_removes_the_socket_only_if_it_is_still_ours(served, short_dir: Path) -> None:
    sock, _ = served
    os.unlink(sock.path)
    other = short_dir / "s" / "plugin.sock"
    other.write_text("someone else's")  # another process's file now at the path
    sock.stop()
    assert other.read_text() == "someone else's"


def test_the_calls_have_workers_of_their_own_and_excess_is_refused(served) -> None:
    """`unary` workers in all: the calls beyond them are refused at once (RESOURCE_EXHAUSTED),
    not queued behind a call that holds its worker."""
    sock, info = served
    held = []
    with grpc.insecure_channel(f"unix:{sock.path}") as ch:
        stub = reg_grpc.RegistrationStub(ch)
        for _ in range(2):  # both workers held
            held.append(stub.NotifyRegistrationStatus.future(reg.RegistrationStatus(), timeout=9))
        time.sleep(0.3)
        with pytest.raises(grpc.RpcError) as e:
            stub.GetInfo(reg.InfoRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        info.release.set()
        for f in held:
            f.result()
        assert _get(sock.path) == "example.com"


def test_many_servers_stop_within_one_deadline(short_dir: Path) -> None:
    info = Info()
    socks = [
        KubeletSocket(
            str(short_dir / f"m{i}.sock"),
            lambda server: reg_grpc.add_RegistrationServicer_to_server(info, server),
        ).start()
        for i in range(40)
    ]
    t0 = time.monotonic()
    stop_all(socks)
    assert time.monotonic() - t0 < 5.0
    assert not any(os.path.exists(s.path) for s in socks)


def test_one_watch_tells_every_listener_and_survives_a_failing_one(short_dir: Path) -> None:
    a, b = short_dir / "a", short_dir / "b"
    a.mkdir()
    b.mkdir()
    heard: list[frozenset[str]] = []

    def broken(names: frozenset[str]) -> None:
        raise RuntimeError("a listener's bug")

    dirs = SocketDirs(poll_interval=0.05)
    dirs.watch(str(a), broken)
    dirs.watch(str(b), heard.append)
    dirs.start()
    try:
        (b / "kubelet.sock").write_text("")
        wait_until(lambda: any("kubelet.sock" in n for n in heard), timeout=5)
        (a / "x.sock").write_text("")  # a change in the other directory reaches it too
        wait_until(lambda: any("x.sock" in n for n in heard), timeout=5)
    finally:
        dirs.stop()
    assert dirs.mode in ("inotify", "poll")


def test_a_path_past_the_kernels_limit_is_a_usage_error_not_a_bind_failure() -> None:
    """Issue 46 item 8: 107 bytes bind, 108 do not; refused when the socket is made, not
    when gRPC fails to bind it."""
    from edgefd.core.errors import UsageError
    from edgefd.devplugin.kubeletsocket import MAX_PATH_BYTES, KubeletSocket, check_socket_path

    fits = "/" + "s" * (MAX_PATH_BYTES - 1)
    assert check_socket_path(fits) == fits
    with pytest.raises(UsageError, match="a socket path of 108 bytes; the kernel binds"):
        KubeletSocket(fits + "s", lambda server: None)
