"""A tiny health and Prometheus metrics endpoint for the long-running containers.

The probes and the scrape are the only inbound traffic these containers get, so a stdlib HTTP
server on its own thread is enough; it avoids a dependency and starts in microseconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LabelSet = tuple[tuple[str, str], ...]


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt_labels(labels: LabelSet) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


def _fmt_value(v: float) -> str:
    return repr(float(v)) if v != int(v) or abs(v) >= 1e15 else str(int(v))


@dataclass
class Metric:
    name: str
    help: str
    kind: str  # "counter" | "gauge"
    _values: dict[LabelSet, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def set(self, value: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values[key] = float(value)

    def replace(self, values: Iterable[tuple[dict[str, str], float]]) -> None:
        """Swap the whole series set at once (gauges whose label sets come and go)."""
        new = {tuple(sorted(lbl.items())): float(v) for lbl, v in values}
        with self._lock:
            self._values = new

    def get(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> str:
        with self._lock:
            items = sorted(self._values.items())
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        if not items and self.kind == "counter":
            items = [((), 0.0)]
        lines += [f"{self.name}{_fmt_labels(k)} {_fmt_value(v)}" for k, v in items]
        return "\n".join(lines) + "\n"


class Registry:
    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}

    def counter(self, name: str, help: str) -> Metric:
        return self._metrics.setdefault(name, Metric(name, help, "counter"))

    def gauge(self, name: str, help: str) -> Metric:
        return self._metrics.setdefault(name, Metric(name, help, "gauge"))

    def render(self) -> str:
        return "".join(m.render() for m in self._metrics.values())


Check = Callable[[], tuple[bool, str]]


class HealthServer:
    """Serves /healthz, /readyz and /metrics; each check returns (ok, one-line detail)."""

    def __init__(
        self,
        registry: Registry,
        host: str = "0.0.0.0",
        port: int = 0,
        healthz: Check | None = None,
        readyz: Check | None = None,
    ) -> None:
        self.registry = registry
        checks = {"/healthz": healthz, "/readyz": readyz}
        reg = registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._reply(200, reg.render(), "text/plain; version=0.0.4; charset=utf-8")
                elif path in checks:
                    check = checks[path]
                    ok, detail = check() if check else (True, "ok")
                    self._reply(200 if ok else 503, detail + "\n", "text/plain; charset=utf-8")
                else:
                    self._reply(404, "not found\n", "text/plain; charset=utf-8")

            def _reply(self, code: int, body: str, ctype: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

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
