"""One resource's lifecycle with the kubelet: serve, register, notice the kubelet restart or
our socket vanish, serve afresh and register again, with backoff.

A thread per resource: Register blocks while the kubelet dials us back, and retries wait with
backoff; neither may hold up the other resources.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any

from edgefd.core.backoff import Backoff
from edgefd.runtime.files import FileIdentity, file_identity

from .metrics import DevicePluginMetrics
from .registration import KUBELET_SOCKET, RegistrationAborted, RegistrationError, register
from .server import PluginServer, ResourceState

log = logging.getLogger(__name__)


def socket_name(resource: str) -> str:
    """`edgefd-edgefd.io_coral-usb.sock`: one socket per resource, readable in `ls`."""
    return "edgefd-" + re.sub(r"[^A-Za-z0-9._-]", "_", resource) + ".sock"


class ResourcePlugin:
    """Serves one resource and keeps it registered with the kubelet."""

    def __init__(self, state: ResourceState, plugin_dir: str, metrics: DevicePluginMetrics) -> None:
        self.state = state
        self.resource = state.resource
        self.plugin_dir = plugin_dir
        self.metrics = metrics
        self.socket_name = socket_name(self.resource.name)
        self.socket_path = os.path.join(plugin_dir, self.socket_name)
        self.kubelet_socket = os.path.join(plugin_dir, KUBELET_SOCKET)
        self.registered = threading.Event()
        self._target_kubelet: FileIdentity | None = None
        self.last_error = ""
        self._server: PluginServer | None = None
        # guards _server, _target_kubelet, _abort and the trigger's clear: notice() decides
        # and kicks atomically with respect to the start of an attempt
        self._lock = threading.Lock()
        self._trigger = threading.Event()
        self._abort = threading.Event()  # set: the Register in flight is stale, abandon it
        self._stopping = False
        self.started = False
        self._thread = threading.Thread(
            target=self._run, name=f"register-{self.resource.short_name}", daemon=True
        )

    def start(self) -> ResourcePlugin:
        """Serve and register (once: the front-end's start and a snapshot arriving meanwhile
        may both find the resource not started yet; the second one ended in "threads can only
        be started once", seen with many resources starting)."""
        with self._lock:
            if self.started:
                return self
            self.started = True
        self._trigger.set()
        self._thread.start()
        return self

    def notice(self, name: str) -> None:
        """A plugin-dir change: re-register if the kubelet restarted or our socket went.

        Decided from the directory's state, not the event's kind, so an event processed late
        (after the registration it would ask for has started) does not cause a second one: a
        needless re-registration drops the kubelet's stream and, while the kubelet still holds
        the old connection, is refused ("already connected"). The decision is taken under the
        lock an attempt starts under, so it compares against that attempt's kubelet and
        server. A kick during an attempt abandons its Register: the attempt was for a kubelet
        that has since restarted, or its socket was deleted (a starting kubelet deletes every
        socket, also one we created a moment earlier), and the kubelet would dial a socket
        that is gone for 10 s.
        """
        if self._stopping:
            return
        with self._lock:
            if name in (KUBELET_SOCKET, ""):
                ident = file_identity(self.kubelet_socket)
                if ident is not None and ident != self._target_kubelet:
                    self._kick_locked("kubelet.sock was created")
                    return
            if name in (self.socket_name, ""):
                server = self._server
                if server is not None and not server.socket_is_ours():
                    self._kick_locked(f"{self.socket_name} was removed")

    def _kick_locked(self, reason: str) -> None:
        log.info("%s: re-registering: %s", self.resource.name, reason)
        self.registered.clear()
        self._trigger.set()
        self._abort.set()

    def _options(self) -> Any:
        from ..api import deviceplugin_pb2 as pb

        return pb.DevicePluginOptions(
            pre_start_required=False,
            get_preferred_allocation_available=self.resource.replicas > 1,
        )

    def _fresh_server(self, force: bool) -> None:
        """Stop the old server (ending its streams) and serve on a new socket."""
        with self._lock:
            old = self._server
            if old is not None and not force and old.socket_is_ours():
                return
            self._server = None
        if old is not None:
            old.stop()
        server = PluginServer(self.state, self.socket_path).start()
        with self._lock:
            if self._stopping:
                server.stop()
                return
            self._server = server

    def _run(self) -> None:
        backoff = Backoff(initial=0.05, cap=5.0)
        failures = 0
        force = True
        while True:
            self._trigger.wait()
            if self._stopping:
                return
            try:
                self._fresh_server(force)
            except Exception as e:  # cannot bind: the directory is gone or not writable
                self.last_error = f"cannot serve on {self.socket_path}: {e}"
                log.warning("%s: %s", self.resource.name, self.last_error)
                self._retry_after(backoff.next_delay())
                continue
            with self._lock:
                # the kubelet and socket this attempt is for; notice() kicks (and abandons
                # the attempt) only when either changes from now on
                self._trigger.clear()
                self._abort = abort = threading.Event()
                self._target_kubelet = target = file_identity(self.kubelet_socket)
                server = self._server
                valid = server is not None and server.socket_is_ours()
            if self._stopping:
                return
            if not valid:  # deleted (by a starting kubelet) before the attempt began
                log.debug("%s: %s vanished, serving afresh", self.resource.name, self.socket_name)
                force = False
                self._trigger.set()
                continue
            try:
                if target is None:
                    raise RegistrationError(
                        f"{self.kubelet_socket} does not exist (is the kubelet running?)"
                    )
                register(
                    self.kubelet_socket,
                    self.socket_name,
                    self.resource.name,
                    self._options(),
                    abort=abort,
                )
            except RegistrationAborted:
                if self._stopping:
                    return
                log.info("%s: registration attempt superseded, retrying", self.resource.name)
                force = True  # the kubelet may have dialed this server: start afresh
                self._trigger.set()
                continue
            except Exception as e:  # RegistrationError, or a bug: the retry loop must live
                if not isinstance(e, RegistrationError):
                    log.exception("%s: registration attempt failed", self.resource.name)
                failures += 1
                self.metrics.registrations.labels(resource=self.resource.name, result="error").inc()
                self.last_error = str(e)
                level = logging.WARNING if failures in (1, 10) or failures % 100 == 0 else 10
                log.log(level, "%s: registration failed (%d): %s", self.resource.name, failures, e)
                force = False
                self._retry_after(backoff.next_delay())
                continue
            if self._stopping:
                return
            self.metrics.registrations.labels(resource=self.resource.name, result="ok").inc()
            self.last_error = ""
            failures = 0
            backoff.reset()
            force = True  # the next registration must start from a fresh server
            self.registered.set()
            log.info("%s: registered with the kubelet as %s", self.resource.name, self.socket_name)
            # a restart may have raced the registration: look once more
            self.notice("")

    def _retry_after(self, delay: float) -> None:
        self._trigger.wait(delay)
        self._trigger.set()

    def request_stop(self) -> None:
        """No new registration from now on, and a Register in flight is abandoned: the first
        half of `stop`, so that a front-end stopping several resources tells them all before
        it waits for any (none registers again while another takes its time to stop)."""
        self._stopping = True
        with self._lock:
            self._trigger.set()
            self._abort.set()

    def stop(self) -> None:
        """Stop serving and remove the socket; a Register in flight is abandoned."""
        self.request_stop()
        self.join(2)
        server = self.take_server()
        if server is not None:
            server.stop()

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` for the registration thread to end (after `request_stop`)."""
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def take_server(self) -> PluginServer | None:
        """The server to stop (the second half of `stop`, for a front-end that stops all of
        its servers at once); a thread still starting one stops it itself (`_fresh_server`)."""
        with self._lock:
            server, self._server = self._server, None
        return server
