"""Registering with the kubelet, and telling one kubelet (or socket) from the next.

A starting kubelet deletes every socket in the plugin directory and creates `kubelet.sock`
afresh; it never calls a plugin back on its own. So the plugin watches the directory (the
runtime Watcher): `kubelet.sock` created or replaced (a new identity: inode and ctime) means
"register again", and its own socket vanishing means the same.
"""

from __future__ import annotations

import logging
import os
import threading

import grpc

from ..api import deviceplugin_pb2 as pb
from ..api import deviceplugin_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"


class RegistrationError(Exception):
    """The kubelet could not be reached or refused the registration."""


class RegistrationAborted(RegistrationError):
    """The caller abandoned the Register call (it was for a kubelet or socket now gone)."""


def register(
    kubelet_socket: str,
    endpoint: str,
    resource_name: str,
    options: pb.DevicePluginOptions,
    timeout: float = 15.0,
    abort: threading.Event | None = None,
) -> None:
    """Call Registration/Register; the kubelet dials `endpoint` back before it answers.

    The timeout exceeds the kubelet's own 10 s dial of the plugin so a slow kubelet's
    verdict is heard rather than cut off. Setting `abort` cancels the call (the kubelet's
    dial-back is bound to it, so it stops too) and raises RegistrationAborted: an attempt
    whose kubelet restarted, or whose socket the kubelet deleted, must not wait that out.
    """
    if not os.path.exists(kubelet_socket):
        raise RegistrationError(f"{kubelet_socket} does not exist (is the kubelet running?)")
    channel = grpc.insecure_channel("unix:" + kubelet_socket, options=[("grpc.enable_retries", 0)])
    try:
        stub = pb_grpc.RegistrationStub(channel)
        call = stub.Register.future(
            pb.RegisterRequest(
                version=API_VERSION,
                endpoint=endpoint,
                resource_name=resource_name,
                options=options,
            ),
            timeout=timeout,
        )
        if abort is not None:
            call.add_done_callback(lambda _call: abort.set())
            abort.wait(timeout + 1.0)
            if not call.done() and call.cancel():
                raise RegistrationAborted("registration abandoned: superseded")
        call.result()
    except grpc.FutureCancelledError:
        raise RegistrationAborted("registration abandoned: superseded") from None
    except grpc.RpcError as e:
        code = e.code().name if hasattr(e, "code") else "?"
        details = e.details() if hasattr(e, "details") else str(e)
        raise RegistrationError(f"kubelet refused or unreachable ({code}): {details}") from None
    finally:
        channel.close()
