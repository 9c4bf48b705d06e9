"""Temperature as a health source, on a fixture host with a Coral PCIe whose class device says
its temperature as the gasket driver does (/sys/class/apex/apex_0/temp, milli-°C)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from edgefd.core.errors import BadInput
from edgefd.core.schema import Fields
from edgefd.inventory.device import Device
from edgefd.inventory.inventory import Inventory
from edgefd.inventory.temperature import TemperatureLimit, describe, parse_setting
from tests.fixturegen import build_host
from tests.inventory.inventories import inventory

RES = "edgefd.io/coral-pcie"
NAME = "coral-pcie-0000-02-00-0"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return build_host("x86-coral-pcie", tmp_path / "host", devicetree=False)


def apex(root: Path) -> Path:
    return root / "sys/class/apex/apex_0"


def set_temp(root: Path, text: str) -> None:
    (apex(root) / "temp").write_text(text)


def coral(inv: Inventory) -> Device:
    snap = inv.scan()
    return next(d for d in snap.devices if d.name == NAME)


def judged(root: Path, setting: TemperatureLimit | None = None) -> Inventory:
    """The device plugin's kind of inventory: the catalogue's resources, health judged."""
    from edgefd.devplugin.resources import default_config

    settings = {RES: setting} if setting is not None else {}
    return inventory(root, selectors=default_config().selectors, temperature=settings)


def test_a_cool_coral_is_healthy_and_a_hot_one_is_not_with_its_temperature(root: Path) -> None:
    inv = judged(root)
    assert coral(inv).healthy
    set_temp(root, "86100\n")
    dev = coral(inv)
    assert not dev.healthy and dev.present
    # the driver's trip_point0_temp (84800 as its default 85000 reads back) is the limit
    assert dev.reason == "86.1 °C, above the limit 84.8 °C"
    assert dev.condition == "overheating"


def test_the_hysteresis_edges_with_the_drivers_limit(root: Path) -> None:
    inv = judged(root)
    set_temp(root, "84800")  # the driver throttles from its trip point on: so does the health
    assert coral(inv).reason == "84.8 °C, at the limit 84.8 °C"
    set_temp(root, "84550")  # below the limit, not below limit - 5 °C: still unusable
    assert coral(inv).reason == ("84.5 °C, not yet below 79.8 °C after reaching the limit 84.8 °C")
    set_temp(root, "79800")  # exactly limit - hysteresis is not below it
    assert not coral(inv).healthy
    set_temp(root, "79550")
    assert coral(inv).healthy
    set_temp(root, "84550")  # healthy and below the limit: stays healthy (it is rising)
    assert coral(inv).healthy


def test_the_resources_limit_and_hysteresis_come_first(root: Path) -> None:
    inv = judged(root, TemperatureLimit(limit=80.0, hysteresis=2.0))
    set_temp(root, "79800")
    assert coral(inv).healthy
    set_temp(root, "80050")
    assert coral(inv).reason == "80.0 °C, above the limit 80 °C"
    set_temp(root, "78050")
    assert not coral(inv).healthy
    set_temp(root, "77800")
    assert coral(inv).healthy


def test_zero_hysteresis_is_healthy_just_below_the_limit(root: Path) -> None:
    inv = judged(root, TemperatureLimit(limit=80.0, hysteresis=0.0))
    set_temp(root, "80000")
    assert not coral(inv).healthy
    set_temp(root, "79999")
    assert coral(inv).healthy


def test_without_the_trip_point_the_drivers_default_is_the_limit(root: Path) -> None:
    (apex(root) / "trip_point0_temp").unlink()
    inv = judged(root)
    set_temp(root, "84900")
    assert coral(inv).healthy  # 85 °C (DEFAULT_TRIP_POINT0_TEMP), not the 84.8 it reads as
    set_temp(root, "85050")
    assert coral(inv).reason == "85.0 °C, above the limit 85 °C"


def test_a_garbage_trip_point_falls_back_to_the_drivers_default(root: Path) -> None:
    (apex(root) / "trip_point0_temp").write_text("hot\n")
    inv = judged(root)
    set_temp(root, "85300")
    assert coral(inv).reason == "85.3 °C, above the limit 85 °C"


@pytest.mark.parametrize("bad", ["", "warm\n", "99999999\n", None])
def test_an_unreadable_temperature_never_makes_it_unhealthy_and_is_said_once(
    root: Path, bad: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    inv = judged(root)
    set_temp(root, "90000")
    assert not coral(inv).healthy
    if bad is None:
        (apex(root) / "temp").unlink()
    else:
        set_temp(root, bad)
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            assert coral(inv).healthy
    said = [r for r in caplog.records if "temperature" in r.getMessage()]
    assert len(said) == 1, said
    assert NAME in said[0].getMessage() and "/sys/class/apex/apex_0/temp" in said[0].getMessage()
    # no attribute at all (a driver without it) is a fact; one that does not read, a fault
    assert said[0].levelno == (logging.INFO if bad is None else logging.WARNING)


def test_an_eio_reading_is_no_verdict(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = judged(root)
    set_temp(root, "90000")
    assert not coral(inv).healthy
    real_open = open

    def failing(path: object, *a: object, **kw: object) -> object:
        if str(path).endswith("apex_0/temp"):
            raise OSError(5, "Input/output error")
        return real_open(path, *a, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", failing)
    assert coral(inv).healthy


def test_the_reason_moves_with_a_degree_not_with_every_reading(root: Path) -> None:
    inv = judged(root)
    set_temp(root, "86050")
    first = coral(inv).reason
    set_temp(root, "86800")
    assert coral(inv).reason == first  # no change: no "changed" device, no new report
    set_temp(root, "87050")
    assert coral(inv).reason == "87.0 °C, above the limit 84.8 °C"


def test_a_resource_may_turn_it_off_and_a_reload_turns_it_on(root: Path) -> None:
    inv = judged(root, TemperatureLimit(enabled=False))
    set_temp(root, "95000")
    assert coral(inv).healthy
    from dataclasses import replace

    from edgefd.devplugin.resources import default_config

    config = default_config()
    hot = replace(config.by_name()[RES], temperature=TemperatureLimit(limit=90.0))
    inv.reconfigure(replace(config, resources=(hot,)))  # a reload: its settings, then a scan
    assert coral(inv).reason == "95.0 °C, above the limit 90 °C"


def test_an_inventory_without_temperature_settings_never_reads_it(root: Path) -> None:
    from edgefd.devplugin.resources import default_config

    inv = inventory(root, selectors=default_config().selectors)  # the scanners' kind
    set_temp(root, "95000")
    assert coral(inv).healthy


def test_a_missing_node_is_said_before_the_temperature(root: Path) -> None:
    inv = judged(root)
    set_temp(root, "95000")
    (root / "dev/apex_0").unlink()
    dev = coral(inv)
    assert dev.reason == "device node /dev/apex_0 is missing"
    assert dev.condition == "no-device-node"


def test_gone_it_is_absent_with_no_condition(root: Path) -> None:
    from tests.fixturegen.sysfs import HostBuilder

    inv = judged(root)
    set_temp(root, "95000")
    assert coral(inv).condition == "overheating"
    HostBuilder(root).remove_pci("0000:02:00.0")
    dev = coral(inv)
    assert not dev.present and dev.condition == ""


def test_describe_says_the_temperature_and_the_limit() -> None:
    assert describe(82.1, 80.0, 5.0) == "82.1 °C, above the limit 80 °C"


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (None, TemperatureLimit()),
        (True, TemperatureLimit()),
        (False, TemperatureLimit(enabled=False)),
        ({"limit": 80}, TemperatureLimit(80.0)),
        ({"limit": "82.5C", "hysteresis": "3 °C"}, TemperatureLimit(82.5, 3.0)),
        ({"hysteresis": 0}, TemperatureLimit(None, 0.0)),
    ],
)
def test_settings(raw: object, want: TemperatureLimit) -> None:
    assert parse_setting(Fields({"temperature": raw}, "resources[0]", ("temperature",))) == want


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ({"limit": "80F"}, "temperature.limit: '80F' must be degrees Celsius (80, 82.5 or 80C)"),
        ({"limit": 151}, "temperature.limit: 151 is out of range (must be 1 to 150 °C)"),
        ({"limit": True}, "temperature.limit: True must be degrees Celsius"),
        ({"limit": float("inf")}, "temperature.limit: inf must be degrees Celsius"),
        ({"hysteresis": 51}, "temperature.hysteresis: 51 is out of range (must be 0 to 50 °C)"),
        ({"limit": 5, "hysteresis": 5}, "hysteresis: 5 °C must be less than the limit 5 °C"),
        ({"max": 80}, "temperature.max: unknown field (known: hysteresis, limit)"),
        ("hot", "temperature: 'hot' must be {limit, hysteresis} (°C) or false"),
    ],
)
def test_bad_settings_say_what_in_one_line(raw: object, why: str) -> None:
    with pytest.raises(BadInput) as e:
        parse_setting(Fields({"temperature": raw}, "resources[0]", ("temperature",), "c.yaml"))
    assert why in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("c.yaml: resources[0].temperature")


def test_the_temperature_is_a_metric_while_it_can_be_read(root: Path) -> None:
    from edgefd.devplugin.resources import default_config
    from edgefd.runtime.metrics import Metrics

    m = Metrics()
    inv = inventory(root, selectors=default_config().selectors, temperature={}, metrics=m)
    name = "edgefd_inventory_device_temperature_celsius"
    limit = "edgefd_inventory_device_temperature_limit_celsius"
    inv.scan()
    assert m.sample(name, device=NAME) == 45.3
    # the limit it is judged by beside it (the driver's trip point here), for the alert
    assert m.sample(limit, device=NAME) == 84.8
    from dataclasses import replace

    config = default_config()
    cool = replace(config.by_name()[RES], temperature=TemperatureLimit(limit=70.0))
    inv.reconfigure(replace(config, resources=(cool,)))  # a reload, and its scan
    assert m.sample(limit, device=NAME) == 70.0
    set_temp(root, "EIO?")
    inv.scan()
    assert m.sample(name, device=NAME) is None
    assert m.sample(limit, device=NAME) is None
