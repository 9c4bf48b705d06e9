"""The running plugin: scanning, one server and registration per resource, kubelet restarts,
signals and configuration reloads.

Threads, and why each exists:
- one registration thread per resource (`ResourcePlugin`): Register blocks while the kubelet
  dials us back, and retries wait with backoff; neither may hold up the others;
- the gRPC worker pool of each resource's server (ListAndWatch holds one worker per stream);
- the plugin-directory watch (inotify) that notices a kubelet restart;
- the hot-plug watcher (tools.common.hotplug) that calls `rescan`, debounced;
- the main thread, which only waits for signals.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tools.common.backoff import Backoff
from tools.common.hostroot import HostRoot
from tools.common.httpserve import HealthServer, Registry

from .allocate import LinkLayout
from .config import Config, Resource
from .devices import Advertised, Device, Inventory, match_devices
from .registration import (
    KUBELET_SOCKET,
    DirWatcher,
    FileIdentity,
    RegistrationAborted,
    RegistrationError,
    file_identity,
    register,
)
from .server import PluginServer, ResourceState

log = logging.getLogger(__name__)

KNOWN_FILE = ".known.json"


def socket_name(resource: str) -> str:
    """`edgefd-edgefd.io_coral-usb.sock`: one socket per resource, readable in `ls`."""
    return "edgefd-" + re.sub(r"[^A-Za-z0-9._-]", "_", resource) + ".sock"


# --------------------------------------------------------------------------- scanning


@dataclass(frozen=True)
class Snapshot:
    usb: tuple[Any, ...] = ()
    pci: tuple[Any, ...] = ()
    dev_nodes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def scan_host(host: HostRoot, globs: tuple[str, ...]) -> Snapshot:
    """Everything the resources might match, read once through the public scanners."""
    from tools.pci_scan import discovery as pci_discovery
    from tools.usb_scan import discovery as usb_discovery

    usb = usb_discovery.scan(host)
    pci = pci_discovery.scan(host)
    nodes: set[str] = set()
    for g in globs:
        for p in glob.glob(str(host.path(g))):
            nodes.add(host.host_path(p))
    return Snapshot(
        usb=tuple(usb.devices),
        pci=tuple(pci.devices),
        dev_nodes=tuple(sorted(nodes)),
        warnings=tuple(usb.warnings) + tuple(pci.warnings),
    )


def host_exists(host: HostRoot) -> Callable[[str], bool]:
    return lambda p: os.path.exists(host.path(p))


# --------------------------------------------------------------------------- links and state


def _device_from_json(obj: dict[str, Any]) -> Device | None:
    try:
        return Device(
            id=str(obj["id"]),
            bus=str(obj["bus"]),
            location=str(obj["location"]),
            devnodes=tuple(str(n) for n in obj.get("devnodes", ())),
            state=str(obj.get("state", "")),
            ids=str(obj.get("ids", "")),
            numa_node=obj.get("numa_node"),
            present=False,
            reason="not seen since the plugin started",
            last_seen=float(obj.get("last_seen", 0.0)),
        )
    except (KeyError, TypeError, ValueError):
        return None


class LinkKeeper:
    """Keeps `<links>/<resource>/<id>/<n>` pointing at each present device's current node,
    and remembers the resource's devices across plugin restarts (`.known.json`)."""

    def __init__(self, layout: LinkLayout) -> None:
        self.layout = layout
        self._written: dict[str, Any] = {}

    def load_known(self, resource: str) -> list[Device]:
        rdir = self.layout.resource_dir(resource)
        if rdir is None:
            return []
        try:
            with open(os.path.join(rdir, KNOWN_FILE), encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return []
        devs = [_device_from_json(o) for o in data.get("devices", []) if isinstance(o, dict)]
        return [d for d in devs if d is not None]

    def sync(self, resource: str, devices: tuple[Device, ...]) -> None:
        rdir = self.layout.resource_dir(resource)
        if rdir is None:
            return
        try:
            os.makedirs(rdir, exist_ok=True)
            wanted: set[str] = set()
            for d in devices:
                wanted.add(d.id)
                ddir = os.path.join(rdir, d.id)
                os.makedirs(ddir, exist_ok=True)
                for n, node in enumerate(d.devnodes):
                    link = os.path.join(ddir, str(n))
                    if d.present and not d.reason:
                        _point(link, node)
                    else:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(link)
            for entry in os.listdir(rdir):
                full = os.path.join(rdir, entry)
                if entry not in wanted and os.path.isdir(full) and not os.path.islink(full):
                    for f in os.listdir(full):
                        with contextlib.suppress(OSError):
                            os.unlink(os.path.join(full, f))
                    with contextlib.suppress(OSError):
                        os.rmdir(full)
            self._save_known(resource, rdir, devices)
        except OSError as e:
            log.warning("%s: cannot maintain device links in %s: %s", resource, rdir, e)

    def _save_known(self, resource: str, rdir: str, devices: tuple[Device, ...]) -> None:
        # rewritten only when identity or location changes, not on every health flip
        body = [
            {k: v for k, v in d.to_json().items() if k not in ("health", "reason")} for d in devices
        ]
        if self._written.get(resource) == body:
            return
        for obj, d in zip(body, devices, strict=True):
            obj["last_seen"] = d.last_seen
        tmp = os.path.join(rdir, f".{KNOWN_FILE}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"resource": resource, "devices": body}, fh, indent=1, sort_keys=True)
        os.replace(tmp, os.path.join(rdir, KNOWN_FILE))
        self._written[resource] = [{k: v for k, v in o.items() if k != "last_seen"} for o in body]


def _point(link: str, target: str) -> None:
    """Make `link` a symlink to `target`, atomically (a reader never sees it missing)."""
    try:
        if os.readlink(link) == target:
            return
    except OSError:
        pass
    tmp = f"{link}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)


# --------------------------------------------------------------------------- metrics


class Metrics:
    def __init__(self) -> None:
        self.registry = Registry()
        r = self.registry
        self.devices = r.gauge(
            "edgefd_devplugin_devices", "Devices advertised to the kubelet, by resource and health"
        )
        self.allocations = r.counter(
            "edgefd_devplugin_allocations_total", "Container allocations answered, by resource"
        )
        self.allocate_errors = r.counter(
            "edgefd_devplugin_allocate_errors_total", "Allocate calls refused (unknown IDs)"
        )
        self.registrations = r.counter(
            "edgefd_devplugin_registrations_total", "Register calls to the kubelet, by result"
        )
        self.kubelet_restarts = r.counter(
            "edgefd_devplugin_kubelet_restarts_total", "Times kubelet.sock was seen recreated"
        )
        self.scans = r.counter("edgefd_devplugin_scans_total", "Host scans run")


# --------------------------------------------------------------------------- one resource


class ResourcePlugin:
    """Serves one resource and keeps it registered with the kubelet."""

    def __init__(self, state: ResourceState, plugin_dir: str, metrics: Metrics) -> None:
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
        self._thread = threading.Thread(
            target=self._run, name=f"register-{self.resource.short_name}", daemon=True
        )
        name = self.resource.name

        def on_allocate(n: int) -> None:
            if n < 0:
                metrics.allocate_errors.inc(resource=name)
            else:
                metrics.allocations.inc(resource=name)

        state.on_allocate = on_allocate

    def start(self) -> ResourcePlugin:
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

    def kick(self, reason: str) -> None:
        with self._lock:
            self._kick_locked(reason)

    def _kick_locked(self, reason: str) -> None:
        log.info("%s: re-registering: %s", self.resource.name, reason)
        self.registered.clear()
        self._trigger.set()
        self._abort.set()

    def _options(self) -> Any:
        from .api import deviceplugin_pb2 as pb

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
                self.metrics.registrations.inc(resource=self.resource.name, result="error")
                self.last_error = str(e)
                level = logging.WARNING if failures in (1, 10) or failures % 100 == 0 else 10
                log.log(level, "%s: registration failed (%d): %s", self.resource.name, failures, e)
                force = False
                self._retry_after(backoff.next_delay())
                continue
            if self._stopping:
                return
            self.metrics.registrations.inc(resource=self.resource.name, result="ok")
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

    def stop(self) -> None:
        """Stop serving and remove the socket; a Register in flight is abandoned."""
        self._stopping = True
        with self._lock:
            self._trigger.set()
            self._abort.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2)
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.stop()


# --------------------------------------------------------------------------- the plugin


@dataclass
class Options:
    plugin_dir: str
    host: HostRoot
    links_dir: str | None = None
    cdi_prefix: str | None = None
    listen: tuple[str, int] | None = None  # (host, port); port 0 picks a free one
    rescan_interval: float = 10.0
    poll_interval: float = 0.2
    debounce: float = 0.1
    max_delay: float = 0.3
    use_udev: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Plugin:
    """All resources of one configuration, kept in step with the host and the kubelet."""

    def __init__(
        self, opts: Options, config: Config, load_config: Callable[[], Config] | None = None
    ) -> None:
        self.opts = opts
        self.config = config
        self._load_config = load_config
        self.metrics = Metrics()
        self.links = LinkKeeper(LinkLayout(opts.links_dir))
        self.resources: dict[str, ResourcePlugin] = {}
        self.inventories: dict[str, Inventory] = {}
        self._scan_lock = threading.Lock()
        self._dir_watch: DirWatcher | None = None
        self._hotplug: Any = None
        self._health: HealthServer | None = None
        self.last_scan = 0.0

    # ------------------------------------------------------------ scanning

    def _globs(self) -> tuple[str, ...]:
        return tuple(sorted({g for r in self.config.resources for g in r.dev_globs}))

    def rescan(self) -> None:
        """Scan the host and publish each resource's devices (streams wake on change)."""
        with self._scan_lock:
            self.metrics.scans.inc()
            snap = scan_host(self.opts.host, self._globs())
            for w in snap.warnings:
                log.debug("scan: %s", w)
            exists = host_exists(self.opts.host)
            now = time.time()
            series = []
            for name, rp in list(self.resources.items()):
                res = rp.resource
                inv = self.inventories[name]
                found = match_devices(res, snap.usb, snap.pci, snap.dev_nodes, exists, now)
                devs = inv.update(found, now)
                self.links.sync(name, devs)
                adv = Advertised.build(devs, res.replicas)
                if rp.state.publish(adv):
                    healthy, unhealthy = adv.counts()
                    log.info("%s: %d healthy, %d unhealthy", name, healthy, unhealthy)
                healthy, unhealthy = adv.counts()
                series.append(({"resource": name, "health": "Healthy"}, healthy))
                series.append(({"resource": name, "health": "Unhealthy"}, unhealthy))
            self.metrics.devices.replace(series)
            self.last_scan = time.monotonic()

    # ------------------------------------------------------------ resources

    def _add(self, res: Resource) -> ResourcePlugin:
        state = ResourceState(res, self.links.layout, self.opts.cdi_prefix)
        inv = Inventory(self.config.forget_after, self.links.load_known(res.name))
        self.inventories[res.name] = inv
        rp = ResourcePlugin(state, self.opts.plugin_dir, self.metrics)
        self.resources[res.name] = rp
        return rp

    def _on_dir_change(self, name: str) -> None:
        if name in (KUBELET_SOCKET, "") and os.path.exists(
            os.path.join(self.opts.plugin_dir, KUBELET_SOCKET)
        ):
            ident = file_identity(os.path.join(self.opts.plugin_dir, KUBELET_SOCKET))
            if ident is not None and ident != self._kubelet_ident:
                if self._kubelet_ident is not None:
                    self.metrics.kubelet_restarts.inc()
                self._kubelet_ident = ident
        for rp in list(self.resources.values()):
            rp.notice(name)

    def start(self) -> Plugin:
        os.makedirs(self.opts.plugin_dir, exist_ok=True)
        self._kubelet_ident = file_identity(os.path.join(self.opts.plugin_dir, KUBELET_SOCKET))
        for res in self.config.resources:
            self._add(res)
        self.rescan()
        self._dir_watch = DirWatcher(self.opts.plugin_dir, self._on_dir_change).start()
        for rp in self.resources.values():
            rp.start()
        from tools.common.hotplug import Watcher

        self._hotplug = Watcher(
            self.opts.host,
            ("usb", "pci"),
            self.opts.rescan_interval,
            self.rescan,
            poll_interval=self.opts.poll_interval,
            debounce=self.opts.debounce,
            max_delay=self.opts.max_delay,
            use_udev=self.opts.use_udev,
        ).start()
        if self.opts.listen:
            host, port = self.opts.listen
            self._health = HealthServer(
                self.metrics.registry, host, port, healthz=self._healthz, readyz=self._readyz
            ).start()
        return self

    def _healthz(self) -> tuple[bool, str]:
        # alive while the hot-plug watcher keeps scanning (the backstop rescan guarantees it)
        age = time.monotonic() - self.last_scan
        limit = max(3 * self.opts.rescan_interval, 30.0)
        if age > limit:
            return False, f"no host scan for {age:.0f}s"
        return True, "ok"

    def _readyz(self) -> tuple[bool, str]:
        waiting = [n for n, rp in self.resources.items() if not rp.registered.is_set()]
        if waiting:
            details = "; ".join(
                f"{n}: {self.resources[n].last_error or 'registering'}" for n in waiting
            )
            return False, f"not registered: {details}"
        return True, f"{len(self.resources)} resource(s) registered"

    def reload(self) -> None:
        """Re-read the configuration; start, stop or restart the resources that changed."""
        if self._load_config is None:
            return
        try:
            new = self._load_config()
        except Exception as e:
            log.error("configuration reload failed, keeping the old one: %s", e)
            return
        old = self.config.by_name()
        wanted = new.by_name()
        started = []
        with self._scan_lock:  # a rescan on the hot-plug thread must not see half a change
            self.config = new
            for name, rp in list(self.resources.items()):
                if name not in wanted or wanted[name] != old.get(name):
                    log.info("%s: %s", name, "removed" if name not in wanted else "changed")
                    rp.stop()
                    del self.resources[name]
                    del self.inventories[name]
            for name, res in wanted.items():
                if name not in self.resources:
                    started.append(self._add(res))
            for inv in self.inventories.values():
                inv.forget_after = new.forget_after
        self.rescan()
        for rp in started:
            rp.start()
        log.info("configuration reloaded: %d resource(s)", len(self.resources))

    def stop(self) -> None:
        if self._hotplug is not None:
            self._hotplug.stop()
        if self._dir_watch is not None:
            self._dir_watch.stop()
        for rp in self.resources.values():
            rp._stopping = True
        for rp in self.resources.values():
            rp.stop()
        if self._health is not None:
            self._health.stop()
