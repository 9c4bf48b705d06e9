"""Health sources: each judges a present device on its own; the first that fails it decides
the reason and the condition, and every one still sees every scan."""

from __future__ import annotations

from edgefd.bus.key import DeviceKey, DevNode
from edgefd.inventory.device import Device
from edgefd.inventory.health_sources import HealthSources, NodesSource


class Fixed:
    """A source that fails every device with one reason, and counts what it saw."""

    def __init__(self, condition: str, reason: str) -> None:
        self.condition, self.reason = condition, reason
        self.checked: list[str] = []
        self.settled: list[frozenset[str]] = []

    def check(self, dev: Device) -> str:
        self.checked.append(dev.name)
        return self.reason

    def settle(self, names: frozenset[str]) -> None:
        self.settled.append(names)


def apex(*nodes: str) -> Device:
    key = DeviceKey("pci", "0000:02:00.0")
    devnodes = tuple(DevNode(n) for n in nodes)
    return Device("coral-pcie-0000-02-00-0", key, "coral-pcie", "edgetpu", nodes=devnodes)


def test_the_nodes_source_is_presences_node_check() -> None:
    nodes = NodesSource(lambda path: path == "/dev/apex_0")
    assert nodes.check(apex("/dev/apex_0")) == ""
    assert nodes.check(apex("/dev/apex_1")) == "device node /dev/apex_1 is missing"
    assert nodes.check(apex()).startswith("no device node (driver none)")


def test_the_first_failing_source_decides_and_every_source_is_consulted() -> None:
    first, second = Fixed("", ""), Fixed("overheating", "90.0 °C, above the limit 85 °C")
    third = Fixed("other", "something else")
    sources = HealthSources([first, second, third])
    dev = sources.judge(apex("/dev/apex_0"))
    assert dev.reason == "90.0 °C, above the limit 85 °C" and dev.condition == "overheating"
    assert not dev.healthy and dev.present
    assert first.checked == second.checked == third.checked == [dev.name]
    sources.settle(frozenset({dev.name}))
    assert third.settled == [frozenset({dev.name})]


def test_a_device_every_source_passes_is_returned_as_it_was() -> None:
    dev = apex("/dev/apex_0")
    assert HealthSources([NodesSource(lambda _: True), Fixed("", "")]).judge(dev) is dev
