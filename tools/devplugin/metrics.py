"""The device plugin's Prometheus metrics, in one place so names stay consistent."""

from __future__ import annotations

from edgefd.runtime.metrics import Metrics


class PluginMetrics(Metrics):
    def __init__(self) -> None:
        super().__init__()
        self.devices = self.gauge(
            "edgefd_devplugin_devices",
            "Devices advertised to the kubelet, by resource and health",
            ["resource", "health"],
        )
        self.allocations = self.counter(
            "edgefd_devplugin_allocations_total",
            "Container allocations answered, by resource",
            ["resource"],
        )
        self.allocate_errors = self.counter(
            "edgefd_devplugin_allocate_errors_total",
            "Allocate calls refused (unknown IDs)",
            ["resource"],
        )
        self.registrations = self.counter(
            "edgefd_devplugin_registrations_total",
            "Register calls to the kubelet, by result",
            ["resource", "result"],
        )
        self.kubelet_restarts = self.counter(
            "edgefd_devplugin_kubelet_restarts_total", "Times kubelet.sock was seen recreated"
        )
        self.scans = self.counter("edgefd_devplugin_scans_total", "Host scans run")
        self.scan_failures = self.counter(
            "edgefd_devplugin_scan_failures_total",
            "Host scans that could not read a bus (the last known devices were kept)",
        )
        self.hotplug_mode = self.gauge(
            "edgefd_devplugin_hotplug_mode",
            "How device changes are seen (1 for the mode in use: uevent, inotify, poll)",
            ["mode"],
        )
