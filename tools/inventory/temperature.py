"""Temperature as a health source: a device too hot to work as asked is Unhealthy.

A Coral PCIe (gasket/apex driver) says its temperature in `/sys/class/apex/apex_N/temp`,
milli-degrees Celsius, and slows its own clock from `trip_point0_temp` up (85 °C unless the
module was given another; apex_driver.c). A throttling TPU still answers, slowly: the
scheduler should place new work elsewhere and the pod's status should say why. So a device
whose catalogue entry names a temperature (`temperature:` in accelerators.yaml) is unusable
from its limit up and usable again only once below the limit minus a hysteresis: a device
hovering at its limit must not flap between Healthy and Unhealthy on every scan.

The limit is the resource's (`temperature: {limit: 80}` in the resources config), else the
driver's own trip point read once when the device is first seen, else the catalogue's
constant from the driver's source. A temperature that cannot be read (no attribute, garbage,
EIO) is no verdict: the device keeps its health by the other sources, and the log says so
once per device. One small file read per such device per scan; none for any other device.

The reason keeps the temperature it was written with until the reading moves by a degree or
the verdict changes: a hot device's reason rewritten on every scan would be a "changed"
device in every log and a new health report every scan.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from edgefd.bus.catalogue import Catalogue, Thermal
from edgefd.core.hostroot import HostRoot
from edgefd.core.log import get_logger
from edgefd.core.record import Record
from edgefd.core.schema import Fields

from .device import Device

log = get_logger(__name__)

OVERHEATING = "overheating"
DEFAULT_HYSTERESIS = 5.0  # °C below the limit before a hot device is usable again
MIN_LIMIT, MAX_LIMIT = 1.0, 150.0  # °C a configured limit may be
MAX_HYSTERESIS = 50.0
PLAUSIBLE = (-55_000, 250_000)  # milli-°C a reading may be; beyond: garbage, no verdict
REWRITE = 1.0  # °C the reading moves before the reason says the new one


class TemperatureLimit(Record):
    """One resource's setting: the limit in °C (None: the driver's), the hysteresis in °C,
    or not judged at all."""

    limit: float | None = None
    hysteresis: float = DEFAULT_HYSTERESIS
    enabled: bool = True

    def __str__(self) -> str:
        """As a reload's log line says it: `limit 80 °C, hysteresis 5 °C`, `off`."""
        if not self.enabled:
            return "off"
        limit = "the driver's limit" if self.limit is None else f"limit {self.limit:g} °C"
        return f"{limit}, hysteresis {self.hysteresis:g} °C"


DEFAULT_SETTING = TemperatureLimit()


def celsius(milli: float) -> float:
    return milli / 1000.0


def describe(t: float, limit: float, hysteresis: float) -> str:
    """The reason of a hot device, in words: "82.1 °C, above the limit 80 °C"."""
    if t > limit:
        return f"{t:.1f} °C, above the limit {limit:g} °C"
    if t == limit:
        return f"{t:.1f} °C, at the limit {limit:g} °C"
    below = limit - hysteresis
    return f"{t:.1f} °C, not yet below {below:g} °C after reaching the limit {limit:g} °C"


class _State:
    __slots__ = ("base", "driver_limit", "hot", "shown")

    def __init__(self, base: str) -> None:
        self.base = base  # /sys/class/<class>/<node name>
        self.driver_limit: float | None = None  # °C, read once
        self.hot = False
        self.shown: tuple[float, str] | None = None  # the reading and reason last given


class TemperatureSource:
    """Reads and judges the temperature of the devices whose catalogue entry names one."""

    condition = OVERHEATING

    def __init__(
        self,
        host: HostRoot,
        catalogue: Catalogue | None,
        settings: Mapping[str, TemperatureLimit] | None = None,
    ) -> None:
        self.host = host
        self.catalogue = catalogue
        self.settings: Mapping[str, TemperatureLimit] = settings or {}
        self._states: dict[str, _State] = {}
        self._unreadable: set[str] = set()  # told once each, while it stays present
        self.readings: dict[str, float] = {}  # °C by device, as last read (for the metrics)
        # °C by device: the limit it is judged by, for as long as it has a reading (the metrics:
        # an alert compares the two, so it agrees with the verdict whatever set the limit)
        self.limits: dict[str, float] = {}

    def configure(self, settings: Mapping[str, TemperatureLimit]) -> None:
        """The resources' settings (a reload); hot devices are judged by them from the next scan."""
        self.settings = settings

    def thermal(self, dev: Device) -> Thermal | None:
        if self.catalogue is None or not dev.nodes:
            return None
        acc = self.catalogue.by_id(dev.model)
        return acc.temperature if acc is not None else None

    def setting(self, dev: Device) -> TemperatureLimit:
        """The first of its resources that says, in the configuration's order of them."""
        mine = (self.settings[r] for r in dev.resources if r in self.settings)
        return next(mine, DEFAULT_SETTING)

    def check(self, dev: Device) -> str:
        thermal = self.thermal(dev)
        setting = self.setting(dev)
        if thermal is None or not setting.enabled:
            self._states.pop(dev.name, None)
            self._forget_reading(dev.name)
            return ""
        node = dev.nodes[0].path.rpartition("/")[2]
        base = f"/sys/class/{thermal.cls}/{node}"
        st = self._states.get(dev.name)
        if st is None or st.base != base:  # new, or another node: its limit is read again
            st = self._states[dev.name] = _State(base)
        milli = self._read(dev, f"{base}/{thermal.input}")
        if milli is None:
            st.hot, st.shown = False, None
            self._forget_reading(dev.name)
            return ""
        self.readings[dev.name] = celsius(milli)
        if setting.limit is not None:
            limit = setting.limit
        else:
            if st.driver_limit is None:
                st.driver_limit = self._driver_limit(thermal, base)
            limit = st.driver_limit
        self.limits[dev.name] = limit
        t = celsius(milli)
        if t >= limit:
            st.hot = True
        elif t < limit - setting.hysteresis:
            st.hot = False
        if not st.hot:
            st.shown = None
            return ""
        reason = describe(t, limit, setting.hysteresis)
        shown = st.shown
        if shown is not None and _same_words(shown[1], reason) and abs(shown[0] - t) < REWRITE:
            return shown[1]
        st.shown = (t, reason)
        return reason

    def settle(self, names: frozenset[str]) -> None:
        for name in [n for n in self._states if n not in names]:
            del self._states[name]
        self.readings = {n: t for n, t in self.readings.items() if n in names}
        self.limits = {n: t for n, t in self.limits.items() if n in names}
        self._unreadable &= names

    def _forget_reading(self, name: str) -> None:
        self.readings.pop(name, None)
        self.limits.pop(name, None)

    def _read(self, dev: Device, path: str) -> int | None:
        """The reading in milli-°C, or None (said once per device) when there is none."""
        try:
            with open(self.host.path(path), "rb") as f:
                raw = f.read(64)
            value = int(raw.strip())
            if not PLAUSIBLE[0] <= value <= PLAUSIBLE[1]:
                raise ValueError(f"{value} is no temperature in milli-degrees Celsius")
        except (OSError, ValueError) as e:
            if dev.name not in self._unreadable:
                self._unreadable.add(dev.name)
                self._tell(dev, path, e)
            return None
        return value

    @staticmethod
    def _tell(dev: Device, path: str, e: Exception) -> None:
        """Once per device: no attribute at all (a driver without it) is a fact, at info; one
        that does not read (EIO, garbage) is a fault, a warning."""
        if isinstance(e, FileNotFoundError):
            log.info("device %s: no temperature at %s: not judged by it", dev.name, path)
            return
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        log.warning(
            "device %s: cannot read its temperature at %s (%s): its health does not depend on "
            "it until it can be read",
            dev.name,
            path,
            why,
        )

    def _driver_limit(self, thermal: Thermal, base: str) -> float:
        """The driver's trip point (°C) when it says one, else the catalogue's constant."""
        if thermal.limit is not None:
            try:
                with open(self.host.path(f"{base}/{thermal.limit}"), "rb") as f:
                    value = int(f.read(64).strip())
                if 1000 * MIN_LIMIT <= value <= 1000 * MAX_LIMIT:
                    return celsius(value)
            except (OSError, ValueError):
                pass  # the constant below is the driver's default for it
        return celsius(thermal.default_limit)


def _same_words(a: str, b: str) -> bool:
    """The same verdict, whatever the reading: above, at, or cooling down."""
    return a.partition(", ")[2] == b.partition(", ")[2]


SETTING_FIELDS = ("limit", "hysteresis")


def parse_setting(f: Fields, key: str = "temperature") -> TemperatureLimit:
    """A resource's `temperature:`: `{limit: 80, hysteresis: 5}` (°C, a number or `80C`; no
    limit: the driver's), `false` (not judged by temperature), absent or `true` (defaults)."""
    v = f.obj.get(key)
    if v is None or v is True:
        return DEFAULT_SETTING
    if v is False:
        return TemperatureLimit(enabled=False)
    if not isinstance(v, Mapping):
        raise f.error(f"{v!r} must be {{limit, hysteresis}} (°C) or false", key)
    t = f.child(key, SETTING_FIELDS)
    limit = _degrees(t, "limit", MIN_LIMIT, MAX_LIMIT)
    hysteresis = _degrees(t, "hysteresis", 0.0, MAX_HYSTERESIS)
    hysteresis = DEFAULT_HYSTERESIS if hysteresis is None else hysteresis
    if limit is not None and hysteresis >= limit:
        raise t.error(f"{hysteresis:g} °C must be less than the limit {limit:g} °C", "hysteresis")
    return TemperatureLimit(limit, hysteresis)


def _degrees(f: Fields, key: str, lo: float, hi: float) -> float | None:
    v = f.obj.get(key)
    if v is None:
        return None
    text = v.strip().removesuffix("C").removesuffix("°").strip() if isinstance(v, str) else v
    try:
        if isinstance(text, bool) or not isinstance(text, int | float | str):
            raise ValueError
        c = float(text)
        if not math.isfinite(c):
            raise ValueError
    except ValueError:
        raise f.error(f"{v!r} must be degrees Celsius (80, 82.5 or 80C)", key) from None
    if not lo <= c <= hi:
        raise f.error(f"{v!r} is out of range (must be {lo:g} to {hi:g} °C)", key)
    return c
