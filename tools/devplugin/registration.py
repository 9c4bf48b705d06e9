"""Registering with the kubelet, and noticing when the kubelet forgets us.

A starting kubelet deletes every socket in the plugin directory and creates `kubelet.sock`
afresh; it never calls a plugin back on its own. So a plugin must watch the directory:
`kubelet.sock` created (or replaced: a new inode or ctime) means "register again", and its
own socket vanishing means the same. The watch uses inotify (tools.common.inotify, through
ctypes: no dependency) and wakes only on events; where inotify is unavailable it falls back to
stat polling every 100 ms.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from collections.abc import Callable

import grpc

from tools.common.inotify import (
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    Inotify,
)

from .api import deviceplugin_pb2 as pb
from .api import deviceplugin_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"


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


FileIdentity = tuple[int, int]


def file_identity(path: str) -> FileIdentity | None:
    """(inode, ctime) of a file, or None: a recreated file differs even if its inode number
    was reused, which filesystems do readily for a file deleted and created again."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_ctime_ns)


_WATCH_MASK = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF


def _open_inotify(directory: str) -> Inotify | None:
    """An inotify instance watching `directory`, or None if unsupported (then we poll)."""
    try:
        ino = Inotify()
    except OSError:
        return None
    try:
        ino.add_watch(directory, _WATCH_MASK)
    except OSError as e:
        ino.close()
        log.debug("inotify_add_watch(%s) failed: %s", directory, os.strerror(e.errno))
        return None
    return ino


class DirWatcher:
    """Watches the plugin directory; calls `on_change(name)` for sockets appearing/vanishing.

    `name` is the file name that was created or deleted, or "" when the watcher cannot say
    (queue overflow, polling fallback noticed a change, the directory itself went away):
    callers then re-check everything. Callbacks run on the watcher's own thread.
    """

    def __init__(
        self,
        directory: str,
        on_change: Callable[[str], None],
        poll_interval: float = 0.1,
        use_inotify: bool = True,
    ) -> None:
        self.directory = directory
        self.on_change = on_change
        self.poll_interval = poll_interval
        self._use_inotify = use_inotify
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="plugin-dir-watch", daemon=True)
        self._ino: Inotify | None = None
        self._before: dict[str, FileIdentity | None] = {}
        self.mode = "inotify"

    def start(self) -> DirWatcher:
        """Begin watching before returning, so no change after start() can be missed."""
        self._ino = _open_inotify(self.directory) if self._use_inotify else None
        self._before = self._snapshot()
        self.mode = "inotify" if self._ino is not None else "poll"
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if self._thread.is_alive():
            self._thread.join(5)
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _snapshot(self) -> dict[str, FileIdentity | None]:
        try:
            names = os.listdir(self.directory)
        except OSError:
            return {}
        return {n: file_identity(os.path.join(self.directory, n)) for n in names}

    def _run(self) -> None:
        ino, self._ino = self._ino, None
        while not self._stop:
            try:
                if ino is None:
                    self.mode = "poll"
                    self._poll_until_stopped()
                    return
                self.mode = "inotify"
                self._inotify_loop(ino)
            finally:
                if ino is not None:
                    ino.close()
            if not self._stop:
                ino = _open_inotify(self.directory) if self._use_inotify else None
                self._emit("")

    def _emit(self, name: str) -> None:
        try:
            self.on_change(name)
        except Exception:  # a callback bug must not kill the watch
            log.exception("plugin-dir watch callback failed")

    def _inotify_loop(self, ino: Inotify) -> None:
        while not self._stop:
            ready, _, _ = select.select([ino.fileno(), self._wake_r], [], [])
            if self._stop:
                return
            if ino.fileno() not in ready:
                continue
            for _wd, mask, name in ino.read():
                if mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED):
                    # the directory was removed or replaced: watch it again once it exists
                    self._emit("")
                    self._wait_for_directory()
                    return
                if mask & IN_Q_OVERFLOW:
                    self._emit("")
                elif name:
                    self._emit(name)

    def _wait_for_directory(self) -> None:
        while not self._stop and not os.path.isdir(self.directory):
            select.select([self._wake_r], [], [], self.poll_interval)

    def _poll_until_stopped(self) -> None:
        before = self._before
        while not self._stop:
            select.select([self._wake_r], [], [], self.poll_interval)
            now = self._snapshot()
            if now != before:
                for name in sorted(set(now) | set(before)):
                    if now.get(name) != before.get(name):
                        self._emit(name)
                before = now
