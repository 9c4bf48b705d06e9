"""Prometheus metrics and the small HTTP endpoint of the long-running containers.

Metrics go through the ecosystem's client (`prometheus_client`), each process with a registry
of its own (no module-level state: tests run several plugins in one process). The probes and
the scrape are the only inbound traffic these containers get, so the server itself is the
standard library's, on its own thread: /healthz, /readyz, /metrics.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from edgefd.core.version import build_info

# `*_created` series double every counter's output and no dashboard of ours reads them
disable_created_metrics()


class Metrics:
    """A registry and the metrics declared on it."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._watch_mode: Gauge | None = None
        # every /metrics says which build it is (dashboards join on it; always 1)
        info = build_info()
        self.gauge("edgefd_build_info", "The running edgefd build.", list(info)).labels(**info).set(
            1
        )

    def counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(name, help, labelnames=tuple(labels), registry=self.registry)

    def gauge(self, name: str, help: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(name, help, labelnames=tuple(labels), registry=self.registry)

    def watch_mode(self, component: str, mode: str) -> None:
        """`edgefd_watch_mode{component,mode} 1`: how a watcher of this process sees changes
        (uevent, inotify, poll). One name for every tool, so one alert rule ("a pod fell back
        to polling") covers them all; it replaced `edgefd_inventory_watch_mode` and
        `edgefd_sink_watch_mode`."""
        if self._watch_mode is None:
            self._watch_mode = self.gauge(
                "edgefd_watch_mode",
                "How changes are seen, per watching component (1 for the mode in use: uevent, "
                "inotify, poll).",
                ["component", "mode"],
            )
        self._watch_mode.labels(component=component, mode=mode).set(1)

    def value(self, name: str, **labels: str) -> float:
        """The current value of one sample (0 when it has none yet): for logs and tests."""
        v = self.registry.get_sample_value(name, labels)
        return 0.0 if v is None else v

    def render(self) -> bytes:
        return generate_latest(self.registry)


def replace_series(gauge: Gauge, values: Iterable[tuple[Mapping[str, str], float]]) -> None:
    """Swap a labelled gauge's whole series set (label sets that come and go, like devices)."""
    gauge.clear()
    for labels, v in values:
        gauge.labels(**labels).set(v)


Check = Callable[[], tuple[bool, str]]


class HealthServer:
    """Serves /healthz, /readyz and /metrics; each check returns (ok, one-line detail)."""

    def __init__(
        self,
        metrics: Metrics,
        host: str = "0.0.0.0",
        port: int = 0,
        healthz: Check | None = None,
        readyz: Check | None = None,
    ) -> None:
        checks = {"/healthz": healthz, "/readyz": readyz}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._reply(200, metrics.render(), CONTENT_TYPE_LATEST)
                elif path in checks:
                    check = checks[path]
                    ok, detail = check() if check else (True, "ok")
                    body = (detail + "\n").encode()
                    self._reply(200 if ok else 503, body, "text/plain; charset=utf-8")
                else:
                    self._reply(404, b"not found\n", "text/plain; charset=utf-8")

            def _reply(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # probes every few seconds would drown the real logs

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, daemon=True, name="health-http"
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
