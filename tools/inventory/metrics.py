"""The inventory's metrics, declared on the registry it is handed (one /metrics per process)."""

from __future__ import annotations

from edgefd.runtime.metrics import Metrics


class InventoryMetrics:
    def __init__(self, m: Metrics) -> None:
        self.m = m
        self.scans = m.counter("edgefd_inventory_scans_total", "Host scans run")
        self.scan_failures = m.counter(
            "edgefd_inventory_scan_failures_total",
            "Host scans that could not read a bus (the last known devices were kept)",
        )
        self.held = m.gauge(
            "edgefd_inventory_held_records",
            "Bus records that vanished and still count, within their hold",
        )
        self.devices = m.gauge(
            "edgefd_inventory_devices", "Devices known, by presence", ["presence"]
        )
        self.temperature = m.gauge(
            "edgefd_inventory_device_temperature_celsius",
            "The temperature a device says (devices whose catalogue entry names one, read "
            "at the last scan; none while it cannot be read)",
            ["device"],
        )
        self.temperature_limit = m.gauge(
            "edgefd_inventory_device_temperature_limit_celsius",
            "The limit that device is judged by (the resource's, else its driver's), for each "
            "device with a temperature: from it up the device is Unhealthy, until it is below it "
            "by the hysteresis",
            ["device"],
        )
