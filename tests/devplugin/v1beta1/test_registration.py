"""Registering with the kubelet (registration.py), against a Registration server that answers
as told: the request the kubelet gets (API version v1beta1, our socket's name, the resource,
the options), a kubelet that is not there or refuses saying why (RegistrationError with the
gRPC code and the kubelet's words), and an attempt abandoned by its caller (the kubelet it was
for restarted, or deleted our socket) ending at once as RegistrationAborted instead of waiting
out the kubelet's 10 s dial. The resource's retries around it are test_resource.py's."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from edgefd.devplugin.api import deviceplugin_pb2 as pb
from edgefd.devplugin.api import deviceplugin_pb2_grpc as pb_grpc
from edgefd.devplugin.v1beta1.registration import (
    RegistrationAborted,
    RegistrationError,
    register,
)

OPTIONS = pb.DevicePluginOptions(get_preferred_allocation_available=True)


class Kubelet(pb_grpc.RegistrationServicer):
    """Answers Register as `answer` says: "ok", "refuse" (INVALID_ARGUMENT, as the kubelet
    refuses a second plugin for a resource), or "hang" (until the call is cancelled, as the
    kubelet's dial of a socket that is gone)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.requests: list[pb.RegisterRequest] = []
        self.cancelled = threading.Event()

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        self.requests.append(request)
        if self.answer == "refuse":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "already connected")
        if self.answer == "hang":
            while context.is_active():
                time.sleep(0.01)
            self.cancelled.set()
        return pb.Empty()


@pytest.fixture
def serve(short_dir: Path) -> Iterator:
    servers: list[grpc.Server] = []

    def start(answer: str) -> tuple[Kubelet, str]:
        kubelet = Kubelet(answer)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pb_grpc.add_RegistrationServicer_to_server(kubelet, server)
        sock = str(short_dir / "kubelet.sock")
        server.add_insecure_port("unix:" + sock)
        server.start()
        servers.append(server)
        return kubelet, sock

    yield start
    for s in servers:
        s.stop(None).wait()


def test_the_request_says_who_we_are(serve) -> None:
    kubelet, sock = serve("ok")
    register(sock, "edgefd-edgefd.io_coral-usb.sock", "edgefd.io/coral-usb", OPTIONS)
    [req] = kubelet.requests
    assert (req.version, req.endpoint, req.resource_name) == (
        "v1beta1",
        "edgefd-edgefd.io_coral-usb.sock",
        "edgefd.io/coral-usb",
    )
    assert req.options == OPTIONS
    # with an abort event (how a resource calls it), an answer ends the wait at once too
    t0 = time.monotonic()
    register(sock, "e.sock", "edgefd.io/a", OPTIONS, abort=threading.Event())
    assert time.monotonic() - t0 < 2.0 and len(kubelet.requests) == 2


def test_no_kubelet_is_a_registration_error(short_dir: Path) -> None:
    with pytest.raises(RegistrationError, match="does not exist"):
        register(str(short_dir / "kubelet.sock"), "e.sock", "edgefd.io/a", OPTIONS)


def test_a_refusal_says_the_code_and_the_kubelets_words(serve) -> None:
    _, sock = serve("refuse")
    with pytest.raises(RegistrationError) as e:
        register(sock, "e.sock", "edgefd.io/a", OPTIONS)
    assert not isinstance(e.value, RegistrationAborted)
    assert str(e.value) == "kubelet refused or unreachable (INVALID_ARGUMENT): already connected"


def test_an_abandoned_attempt_ends_at_once_and_cancels_the_call(serve) -> None:
    kubelet, sock = serve("hang")
    abort = threading.Event()
    threading.Timer(0.3, abort.set).start()
    t0 = time.monotonic()
    with pytest.raises(RegistrationAborted, match="superseded"):
        register(sock, "e.sock", "edgefd.io/a", OPTIONS, timeout=15.0, abort=abort)
    assert time.monotonic() - t0 < 2.0  # not the 15 s timeout
    assert kubelet.cancelled.wait(5)  # the kubelet's side of the call ended too
