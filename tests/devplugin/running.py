"""devplugin as a test holds it: its components (edgefd.devplugin.app.build) started in the
runner's order and stopped in reverse, with the runner's own functions, and what the tests read
of them (the inventory, the front-ends, the metrics, /readyz as the runner combines it)."""

from __future__ import annotations

from typing import Any

from edgefd.devplugin.app import DraFactory, Options, build
from edgefd.devplugin.resources import Config
from edgefd.runtime.metrics import Metrics
from edgefd.runtime.runner import combined, readiness, start_in_order, stop_in_reverse


class Running:
    def __init__(self, opts: Options, config: Config, dra: DraFactory | None = None) -> None:
        self.metrics = Metrics()
        self.parts = build(opts, config, dra, self.metrics)
        self.inventory = self.parts.inventory
        self.v1: Any = self.parts.v1
        self.dra: Any = self.parts.dra
        self._started: list[Any] = []

    @property
    def components(self) -> list[Any]:
        return self.parts.components

    def start(self) -> Running:
        start_in_order(self.components, self._started)
        return self

    def stop(self) -> None:
        stop_in_reverse(self._started)
        self._started = []

    def ready(self) -> tuple[bool, str]:
        return combined(readiness(self.components))()
