"""Prometheus metrics and the small HTTP endpoint of the long-running containers.

Counters and gauges (with labels), each process with a registry of its own (no module-level
state: tests run several plugins in one process), exposed in the Prometheus text format
0.0.4 with the names, types, help and sample shapes the ecosystem's client gives them (a
counter is named `..._total`; labels sorted; no `_created` series). The probes and the
scrape are the only inbound traffic these containers get, so the server is a few lines over
the standard library's `socketserver`, on its own thread: GET /healthz, /readyz, /metrics.

Why not the ecosystem's client and `http.server`: importing `prometheus_client` (its package
imports its HTTP exposition, `http.server`, `urllib.request` and so `ssl`) cost every
long-running process 7.7 MiB of private memory (12.1 MiB resident) on the 2-core machine, and
`http.server` alone 4.3 of them: some 30 MiB a node across edgefd's four containers, on
1-4 GB Raspberry Pis. Only counters and gauges are used, and the text format is small and
fixed; tests/runtime/test_metrics.py reads the output back with the ecosystem's own parser.
"""

from __future__ import annotations

import math
import socketserver
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from edgefd.core.version import build_info

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_REQUEST_LINE = 8192  # bytes of a request line or a header line
MAX_HEADERS = 100


def _number(v: float) -> str:
    """A sample value as Prometheus reads it (`1.0`, `+Inf`, `NaN`)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _label_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


class Child:
    """One series: a value under a lock (the metric's own)."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        with self._lock:
            self.value += amount

    def set(self, value: float) -> None:
        with self._lock:
            self.value = float(value)


class Metric:
    """A counter or a gauge: one series, or one per set of label values."""

    def __init__(self, kind: str, name: str, help: str, labelnames: Sequence[str]) -> None:
        if kind == "counter" and not name.endswith("_total"):
            raise ValueError(f"counter {name}: a counter's name ends in _total")
        self.kind = kind
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        self._children: dict[tuple[str, ...], Child] = {}
        if not self.labelnames:  # an unlabelled metric exists (at 0) from the start
            self._children[()] = Child(self._lock)

    def labels(self, *values: str, **by_name: str) -> Child:
        if by_name:
            if values or set(by_name) != set(self.labelnames):
                raise ValueError(f"{self.name}: labels {sorted(by_name)}, not {self.labelnames}")
            values = tuple(str(by_name[n]) for n in self.labelnames)
        elif len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: {len(values)} label values for {self.labelnames}")
        key = tuple(str(v) for v in values)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = Child(self._lock)
        return child

    def _only(self) -> Child:
        if self.labelnames:
            raise ValueError(f"{self.name} has labels {self.labelnames}: use .labels()")
        return self._children[()]

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)

    def set(self, value: float) -> None:
        self._only().set(value)

    def clear(self) -> None:
        """Forget every labelled series (they come and go, like devices)."""
        with self._lock:
            if self.labelnames:
                self._children.clear()

    def samples(self) -> list[tuple[dict[str, str], float]]:
        with self._lock:
            items = [(k, c.value) for k, c in self._children.items()]
        return [(dict(zip(self.labelnames, k, strict=True)), v) for k, v in items]

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {_help(self.help)}", f"# TYPE {self.name} {self.kind}"]
        for labels, value in self.samples():
            shown = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(labels.items()))
            lines.append(f"{self.name}{{{shown}}} {_number(value)}" if shown else
                         f"{self.name} {_number(value)}")  # fmt: skip
        return lines


Counter = Gauge = Metric  # what a tool's metrics module declares its attributes as


class Metrics:
    """A registry and the metrics declared on it."""

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}
        self._lock = threading.Lock()
        self._watch_mode: Metric | None = None
        # every /metrics says which build it is (dashboards join on it; always 1)
        info = build_info()
        self.gauge("edgefd_build_info", "The running edgefd build.", list(info)).labels(**info).set(
            1
        )

    def _declare(self, kind: str, name: str, help: str, labels: Sequence[str]) -> Metric:
        m = Metric(kind, name, help, labels)
        with self._lock:
            if name in self._metrics:
                raise ValueError(f"{name}: declared twice on one registry")
            self._metrics[name] = m
        return m

    def counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Metric:
        return self._declare("counter", name, help, labels)

    def gauge(self, name: str, help: str, labels: Sequence[str] = ()) -> Metric:
        return self._declare("gauge", name, help, labels)

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

    def sample(self, name: str, **labels: str) -> float | None:
        """The current value of one sample, by its name and labels; None when there is none
        (not declared, or that series not there now)."""
        with self._lock:
            m = self._metrics.get(name)
        want = {k: str(v) for k, v in labels.items()}
        return next((v for lbl, v in m.samples() if lbl == want), None) if m else None

    def value(self, name: str, **labels: str) -> float:
        """`sample`, 0 when there is none yet: for logs and tests."""
        v = self.sample(name, **labels)
        return 0.0 if v is None else v

    def render(self) -> bytes:
        with self._lock:
            metrics = list(self._metrics.values())
        return "".join(f"{line}\n" for m in metrics for line in m.render()).encode()


def replace_series(gauge: Metric, values: Iterable[tuple[Mapping[str, str], float]]) -> None:
    """Swap a labelled gauge's whole series set (label sets that come and go, like devices)."""
    gauge.clear()
    for labels, v in values:
        gauge.labels(**labels).set(v)


Check = Callable[[], tuple[bool, str]]
REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


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

        def answer(method: str, path: str) -> tuple[int, bytes, str]:
            text = "text/plain; charset=utf-8"
            if method not in ("GET", "HEAD"):
                return 405, b"only GET\n", text
            if path == "/metrics":
                return 200, metrics.render(), CONTENT_TYPE
            if path in checks:
                check = checks[path]
                ok, detail = check() if check else (True, "ok")
                return (200 if ok else 503), (detail + "\n").encode(), text
            return 404, b"not found\n", text

        class Handler(socketserver.StreamRequestHandler):
            timeout = 10  # a client that connects and says nothing does not keep a thread

            def handle(self) -> None:
                line = self.rfile.readline(MAX_REQUEST_LINE)
                parts = line.decode("latin-1").split()
                if len(parts) < 2:
                    return
                for _ in range(MAX_HEADERS):  # read past the headers: nothing in them matters
                    if self.rfile.readline(MAX_REQUEST_LINE) in (b"\r\n", b"\n", b""):
                        break
                code, body, ctype = answer(parts[0], parts[1].split("?", 1)[0])
                head = (
                    f"HTTP/1.1 {code} {REASONS[code]}\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                )
                self.wfile.write(head.encode() + (body if parts[0] != "HEAD" else b""))

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self._server = Server((host, port), Handler)
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
