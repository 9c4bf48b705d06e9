"""Serving the kubelet on unix sockets, one way for both front-ends: a `KubeletSocket` is one
gRPC server on one socket (each device-plugin resource's, DRA's service and registration
sockets), and `SocketDirs` is the one watch of every directory those sockets live in.

One model: gRPC's threaded server, one per socket. A watch stream (the device plugin's
ListAndWatch, DRA's NodeWatchResources) is a blocking generator that holds a worker for as long
as it is open, so each server has `unary` workers for the calls the kubelet waits on
(Allocate, NodePrepareResources, ...) and `streams` more for the streams, and takes no more
calls than that at once (`maximum_concurrent_rpcs`): however many streams a client opens, the
calls keep workers of their own; the streams beyond the cap are refused (..streamcap). Threads
are made as they are needed, so an idle server costs gRPC's own polling thread.

Re-serving: a starting kubelet deletes every socket in its plugin directory (and an operator
may), so each socket's file identity (inode, ctime) is kept, and `ensure()` serves afresh on
the same path when the file on disk is no longer ours. A gRPC server cannot be started again
once stopped: a fresh one is made each time, from the same `add` (which registers the
servicers, fresh ones if it makes them).

The directories are watched once for the process (`SocketDirs`, a component of the runner):
every listener hears every change of any of them (the names that changed; empty: anything may
have) and decides from the directory's state, not from the event, what it does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures

import grpc

from edgefd.core.errors import UsageError
from edgefd.runtime.files import FileIdentity, file_identity
from edgefd.runtime.watch import Watcher

log = logging.getLogger(__name__)

# the longest path a unix socket binds at: sun_path is 108 bytes with its terminating NUL
MAX_PATH_BYTES = 107

STOP_GRACE = 1.0  # seconds the calls under way get when a server stops
STOP_TIMEOUT = 5.0


def check_socket_path(path: str) -> str:
    """`path`, or UsageError when the kernel cannot bind a socket there: refused before
    anything is published, in one line, not gRPC's "Failed to bind" after the fact."""
    n = len(os.fsencode(path))
    if n > MAX_PATH_BYTES:
        raise UsageError(
            f"{path}: a socket path of {n} bytes; the kernel binds a unix socket at no more "
            f"than {MAX_PATH_BYTES} (sun_path): give a shorter --kubelet-dir or --plugin-dir, "
            "or a shorter resource name"
        )
    return path


class KubeletSocket:
    """One gRPC server on the unix socket `path`; `add(server)` registers its servicers."""

    def __init__(
        self,
        path: str,
        add: Callable[[grpc.Server], None],
        unary: int = 4,
        streams: int = 0,
        name: str = "",
    ) -> None:
        self.path = check_socket_path(path)
        self.add = add
        self.unary = unary
        self.streams = streams
        self.name = name or os.path.basename(path)
        self.identity: FileIdentity | None = None
        self._server: grpc.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def start(self) -> KubeletSocket:
        """Serve on the socket (whatever file was there is replaced)."""
        workers = self.unary + self.streams
        executor = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=self.name)
        server = grpc.server(executor, maximum_concurrent_rpcs=workers)
        try:
            self.add(server)
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            server.add_insecure_port("unix:" + self.path)
            server.start()
        except BaseException:
            server.stop(None)
            executor.shutdown(wait=False, cancel_futures=True)
            raise
        with self._lock:
            self._server, self._executor = server, executor
            self.identity = file_identity(self.path)
        return self

    @property
    def serving(self) -> bool:
        return self._server is not None

    def is_ours(self) -> bool:
        """Whether the socket file on disk is still the one this server listens on."""
        ident = file_identity(self.path)
        return ident is not None and ident == self.identity

    def ensure(self) -> bool:
        """Serve afresh if the socket file is gone or replaced; True when it did."""
        if not self.serving or self.is_ours():
            return False
        log.info("%s vanished: serving afresh", self.path)
        self.stop(remove=False)
        self.start()
        return True

    def restart(self) -> None:
        """A fresh server on the same path (ending every stream of the old one)."""
        self.stop()
        self.start()

    def stop(self, remove: bool = True) -> None:
        stop_all([self], remove)

    def _begin_stop(self) -> tuple[threading.Event | None, bool]:
        """Stop taking calls and cancel those under way (their streams end); what to wait
        on, and whether the socket on disk was ours."""
        with self._lock:
            server, self._server = self._server, None
        if server is None:
            return None, False
        ours = self.is_ours()
        return server.stop(STOP_GRACE), ours

    def _finish_stop(self, ours: bool, remove: bool) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        if remove and ours:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


def stop_all(sockets: Sequence[KubeletSocket], remove: bool = True) -> None:
    """Stop several servers at once, within one STOP_TIMEOUT for all: a SIGTERM among
    hundreds of resources must end within the kubelet's grace period."""
    begun = [(s, *s._begin_stop()) for s in sockets]
    deadline = time.monotonic() + STOP_TIMEOUT
    for s, done, _ in begun:
        if done is not None and not done.wait(max(0.0, deadline - time.monotonic())):
            log.warning("%s: the server did not stop within %.0f s", s.path, STOP_TIMEOUT)
    for s, done, ours in begun:
        if done is not None:
            s._finish_stop(ours, remove)


Listener = Callable[[frozenset[str]], None]


class SocketDirs:
    """The one watch of the kubelet's socket directories: each listener is called, on the
    watcher's thread, with the names that changed in any of them (empty: anything may
    have). Acted on at once: no debounce (a kubelet restart is answered by re-registering)."""

    def __init__(self, poll_interval: float = 0.1) -> None:
        self.poll_interval = poll_interval
        self._dirs: list[str] = []
        self._listeners: list[Listener] = []
        self._watcher: Watcher | None = None

    def watch(self, directory: str, listener: Listener) -> None:
        """Tell `listener` about `directory` too (before `start`)."""
        if directory not in self._dirs:
            self._dirs.append(directory)
        if listener not in self._listeners:
            self._listeners.append(listener)

    def _changed(self, names: frozenset[str]) -> None:
        for listener in self._listeners:
            try:
                listener(names)
            except Exception:  # one front-end's bug must not deafen the other
                log.exception("a socket directory listener failed")

    def start(self) -> None:
        if not self._dirs:
            return
        self._watcher = Watcher(
            self._changed,
            self._dirs,
            poll_interval=self.poll_interval,
            debounce=0.0,
            max_delay=0.0,
            name="socket-watch",
        ).start()

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()

    @property
    def mode(self) -> str:
        return self._watcher.mode if self._watcher is not None else "none"
