"""Health sources: what decides, scan by scan, whether a present device can be used.

A device that is there may still be unusable: its node is missing (the driver is not loaded),
it is too hot (temperature.py). Each such judgement is a source of its own beside the others,
consulted for every present device on every scan, so a new one (a temperature today) is added
without touching presence or the ones already there. The first source that fails a device
gives its reason (`Device.reason`, the words both APIs show) and its condition
(`Device.condition`, one word a DRA taint carries); every source is still consulted, so one
that keeps a state (a hysteresis) sees every scan. Absence is not judged here: presence.py
says why a device that is gone is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from .device import Device, health_reason

NO_NODE = "no-device-node"


class HealthSource(Protocol):
    """One judgement of a present device."""

    condition: str  # the word for "failed by this source" (a DRA taint's value)

    def check(self, dev: Device) -> str:
        """Why `dev` cannot be used now ("" when it can, or when this cannot tell)."""
        ...

    def settle(self, names: frozenset[str]) -> None:
        """The scan is over and these devices were present: forget what is kept of others."""
        ...


class NodesSource:
    """The device nodes: every node a device has must be there (none at all: no driver)."""

    condition = NO_NODE

    def __init__(self, exists: Callable[[str], bool]) -> None:
        self.exists = exists

    def check(self, dev: Device) -> str:
        return health_reason(dev, self.exists)

    def settle(self, names: frozenset[str]) -> None:
        pass


class HealthSources:
    """The sources, in order; the first that fails a device decides its reason."""

    def __init__(self, sources: Iterable[HealthSource]) -> None:
        self.sources = tuple(sources)

    def judge(self, dev: Device) -> Device:
        reason, condition = "", ""
        for source in self.sources:
            why = source.check(dev)
            if why and not reason:
                reason, condition = why, source.condition
        if not reason:
            return dev
        return dev._replace(reason=reason, condition=condition)

    def settle(self, names: frozenset[str]) -> None:
        for source in self.sources:
            source.settle(names)
