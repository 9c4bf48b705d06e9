"""Device selectors evaluated as the scheduler evaluates them (cel-python in Kubernetes' DRA
environment): attributes by domain, versions, errors counted as no match."""

from __future__ import annotations

import pytest

from edgefd.kubectl_edgefd.cel import Selector, Semver, evaluate_all, failing

DEV = {
    "name": "hailo8-0000-03-00-0",
    "attributes": {
        "kind": {"string": "hailo"},
        "model": {"string": "hailo8"},
        "usbBus": {"int": 2},
        "driverVersion": {"version": "4.20.0"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
    },
}


@pytest.mark.parametrize(
    ("expression", "matched"),
    [
        ('device.driver == "edgefd.io" && device.attributes["edgefd.io"].kind == "hailo"', True),
        ('device.attributes["edgefd.io"].model in ["hailo8", "hailo10h"]', True),
        ('device.attributes["edgefd.io"].model == "hailo10h"', False),
        ('device.attributes["edgefd.io"].usbBus > 1', True),
        ('device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00"', True),
        ('device.attributes["edgefd.io"].driverVersion.compareTo(semver("4.20.0")) == 0', True),
        ('device.attributes["edgefd.io"].driverVersion.isGreaterThan(semver("4.9.0"))', True),
        ('device.attributes["edgefd.io"].driverVersion.isLessThan(semver("4.20.0-rc1"))', False),
        ('device.attributes["edgefd.io"].driverVersion.major() == 4', True),
        ('has(device.attributes["edgefd.io"].serial)', False),
        ('device.attributes["edgefd.io"].model.startsWith("hailo")', True),
        ('device.attributes["edgefd.io"].model.matches("^hailo[0-9]+$")', True),
    ],
)
def test_selectors(expression: str, matched: bool) -> None:
    verdict = Selector(expression).evaluate(DEV, "edgefd.io")
    assert verdict.error is None and verdict.matched is matched


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ('device.attributes["edgefd.io"].modle == "hailo8"', "modle"),
        ('device.attributes["other.io"].model == "hailo8"', "model"),  # an empty domain
        ('device.attributes["edgefd.io"].model.compareTo(semver("1.0.0")) == 0', "not a version"),
        ('device.attributes["edgefd.io"].model == ', ""),  # a syntax error
        ('device.attributes["edgefd.io"].model', "not a bool"),
    ],
)
def test_errors_are_no_match_with_a_reason(expression: str, says: str) -> None:
    verdict = Selector(expression).evaluate(DEV, "edgefd.io")
    assert not verdict.matched and verdict.error and says in verdict.error


def test_a_list_of_selectors_is_anded_and_the_first_failure_named() -> None:
    exprs = [
        'device.attributes["edgefd.io"].kind == "hailo"',
        'device.attributes["edgefd.io"].model == "x"',
    ]
    assert not evaluate_all(exprs, DEV, "edgefd.io").matched
    assert failing(exprs, DEV, "edgefd.io")[0] == exprs[1]
    assert evaluate_all(exprs[:1], DEV, "edgefd.io").matched
    assert evaluate_all([], DEV, "edgefd.io").matched


def test_semver_precedence() -> None:
    order = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0",
        "1.0.1",
        "1.10.0",
    ]
    assert sorted(order, key=Semver) == order
    assert Semver("1.0.0+build") == Semver("1.0.0")
    with pytest.raises(ValueError):
        Semver("1.2")
