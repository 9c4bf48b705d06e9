"""The v1beta1 front-end's metrics, declared on the registry it is handed."""

from __future__ import annotations

from edgefd.runtime.metrics import Metrics


class DevicePluginMetrics:
    def __init__(self, m: Metrics) -> None:
        self.devices = m.gauge(
            "edgefd_devplugin_devices",
            "Devices advertised to the kubelet, by resource and health",
            ["resource", "health"],
        )
        self.allocations = m.counter(
            "edgefd_devplugin_allocations_total",
            "Container allocations answered, by resource",
            ["resource"],
        )
        self.allocate_errors = m.counter(
            "edgefd_devplugin_allocate_errors_total",
            "Allocate calls refused (unknown IDs)",
            ["resource"],
        )
        self.registrations = m.counter(
            "edgefd_devplugin_registrations_total",
            "Register calls to the kubelet, by result",
            ["resource", "result"],
        )
        self.kubelet_restarts = m.counter(
            "edgefd_devplugin_kubelet_restarts_total", "Times kubelet.sock was seen recreated"
        )
