"""A real Prometheus (Debian's `prometheus`, the package that brings promtool) scraping a node's
edgefd pod and evaluating edgefd's own alerting rules (charts/edgefd/alerts), as a cluster's
Prometheus does through the PodMonitor and the PrometheusRule.

The pod's listeners are on the node's loopback (hostNetwork), so the targets are
``127.0.0.1:<port>``; each series gets the labels the PodMonitor's scrape would give it
(``namespace``, ``pod``, and ``node`` by the PodMonitor's relabeling), which the rules group
by. Scrapes and evaluations every second: an alert's time to fire is then its ``for`` plus at
most a couple of seconds, as a real cluster's is its ``for`` plus its intervals. Its TSDB, log
and configuration live in the run's directory; it listens on a free loopback port.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.alerts.rules import write_rule_file
from tests.helpers import free_ports
from tests.peers.processes import kill, spawn, tail


class PrometheusError(RuntimeError):
    pass


class Prometheus:
    def __init__(self, workdir: Path, targets: list[str], labels: dict[str, str]) -> None:
        self.dir = Path(workdir)
        self.targets = targets
        self.labels = labels
        (self.port,) = free_ports(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.dir / "prometheus.log"
        self._proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> Prometheus:
        binary = shutil.which("prometheus")
        if binary is None:
            raise PrometheusError("no prometheus on PATH (Debian package prometheus)")
        self.dir.mkdir(parents=True, exist_ok=True)
        rules = write_rule_file(self.dir / "edgefd-rules.yaml")
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [
                {
                    "job_name": "edgefd",
                    "static_configs": [{"targets": self.targets, "labels": self.labels}],
                }
            ],
        }
        cfg = self.dir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(config))
        argv = [
            binary,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        self._proc = spawn(argv, self.log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise PrometheusError(f"prometheus exited:\n{tail(self.log)}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise PrometheusError(f"prometheus not ready in {timeout}s:\n{tail(self.log)}")

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as r:
            return json.loads(r.read())["data"]

    def alerts(self) -> list[dict[str, Any]]:
        return self.get("/api/v1/alerts")["alerts"]

    def firing(self, name: str) -> list[dict[str, Any]]:
        return [
            a for a in self.alerts() if a["labels"]["alertname"] == name and a["state"] == "firing"
        ]

    def up(self) -> dict[str, float]:
        """Each target's `up` now."""
        result = self.get("/api/v1/query?query=up")["result"]
        return {r["metric"]["instance"]: float(r["value"][1]) for r in result}

    def stop(self) -> None:
        kill(self._proc, grace=5.0)
        self._proc = None
