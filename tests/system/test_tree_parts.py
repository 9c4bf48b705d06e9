"""The e2e's parts for trees beyond USB and PCI Coral hosts, without a node: a platform NPU's
expectations and re-plug (rk3588-npu), and what the checks expect of a device "unplugged" from
a tree as the tools list it (gone, or staying unusable without its node); a Coral PCIe's
temperature (x86-coral-pcie) where check 6t finds and writes it, read back by the device
plugin's own dry run; CI's scenario list covering every check on a tree where it applies."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixturegen import build_host

from . import checks_dra
from .checks_thermal import OVER_C, set_reading, thermal_device
from .expect import plugin_offer, producer_labels, unplugged_reason
from .hosttree import SampleHost, device_nodes
from .scenario import CHECKS, Scenario


class NoNamespace:
    """A stand-in for the node's mount namespace: nothing is made or removed in any /dev."""

    def __init__(self) -> None:
        self.ran: list[list[str]] = []

    def same_as_host(self) -> bool:
        return False

    def run(self, argv: list[str]) -> None:
        self.ran.append(argv)


def test_a_platform_npu_is_expected_from_its_tree(tmp_path: Path) -> None:
    tree = build_host("rk3588-npu", tmp_path / "rk")
    offer = plugin_offer(tree, "n")
    assert offer.primary() == "edgefd.io/rockchip-npu"
    assert {r: n for r, n in offer.allocatable().items() if n != "0"} == {
        "edgefd.io/rockchip-npu": "1"
    }
    (npu,) = offer.resources["edgefd.io/rockchip-npu"]
    assert (npu.bus, npu.location, npu.kind, npu.model) == (
        "platform",
        "rknn",
        "npu",
        "rockchip-npu",
    )
    assert npu.node.path == "/dev/accel/accel0" and (npu.node.major, npu.node.minor) == (261, 0)
    assert npu.container_paths == ("/dev/accel/accel0",) and not npu.usb_bus_mount
    assert npu.device_class == "npu.edgefd.io" and offer.by_dra_name(npu.dra_name) is npu
    labels = producer_labels(tree)
    assert labels["edgefd.io/npu.present"] == "true" and labels["edgefd.io/npu.count"] == "1"


def test_a_platform_device_is_unplugged_and_back_with_its_node(tmp_path: Path) -> None:
    tree = build_host("rk3588-npu", tmp_path / "host")
    (npu,) = plugin_offer(tree, "n").resources["edgefd.io/rockchip-npu"]
    ns = NoNamespace()
    host = SampleHost(tree, ns)  # type: ignore[arg-type]
    old = host.unplug(npu.bus, npu.location)
    assert old == npu.node and not (tree / "sys/bus/platform/devices/rknn").exists()
    assert npu.node not in device_nodes(tree)
    assert ns.ran == [["rm", "-f", "/dev/accel/accel0"]]
    # its SoC block stays: listed, unusable, so the checks expect a taint and no eviction
    why = unplugged_reason(tree, "n", npu)
    assert why.startswith("no device node (driver rocket)")
    (listed,) = plugin_offer_json(tree)
    assert (listed["health"], listed["devnodes"]) == ("Unhealthy", [])
    new = host.plug(npu.bus, npu.location)
    assert new == old and (tree / "sys/bus/platform/devices/rknn").is_symlink()
    assert "mknod -m 0664 /dev/accel/accel0 c 261 0" in ns.ran[-1][-1]
    assert plugin_offer(tree, "n").resources["edgefd.io/rockchip-npu"] == [npu]
    assert unplugged_reason(tree, "n", npu) == "Healthy"  # back: listed, nothing wrong


def test_a_pci_function_unplugged_is_absent(tmp_path: Path) -> None:
    tree = build_host("x86-coral-pcie", tmp_path / "host")
    (apex,) = plugin_offer(tree, "n").resources["edgefd.io/coral-pcie"]
    host = SampleHost(tree, NoNamespace())  # type: ignore[arg-type]
    host.unplug(apex.bus, apex.location)
    assert unplugged_reason(tree, "n", apex) == ""
    host.plug(apex.bus, apex.location)
    assert plugin_offer(tree, "n").resources["edgefd.io/coral-pcie"] == [apex]


def plugin_offer_json(tree: Path) -> list[dict[str, Any]]:
    """The devices `devplugin --dry-run` offers on the tree, of every resource."""
    out = run_dry(tree)
    return [d for r in out["resources"] for d in r["devices"]]


def run_dry(tree: Path) -> dict[str, Any]:
    r = subprocess.run(
        ["devplugin", f"--host-root={tree}", "--dry-run", "--node-name=n", "--output=json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(r.stdout)


def test_the_coral_pcies_temperature_is_where_the_device_plugin_reads_it(tmp_path: Path) -> None:
    tree = build_host("x86-coral-pcie", tmp_path / "x86")
    hot = thermal_device(plugin_offer(tree, "n"), tree)
    assert hot is not None and hot.device.resource == "edgefd.io/coral-pcie"
    assert hot.path == tree / "sys/class/apex/apex_0/temp" and hot.limit_c == 84.8
    assert hot.original.strip() == "45300"
    set_reading(hot.path, hot.limit_c + OVER_C)
    (apex,) = plugin_offer_json(tree)
    assert apex["health"] == "Unhealthy" and "above the limit 84.8" in apex["reason"]
    set_reading(hot.path, hot.limit_c - 5 - OVER_C)
    (apex,) = plugin_offer_json(tree)
    assert (apex["health"], apex["reason"]) == ("Healthy", "")
    assert not list(hot.path.parent.glob(".*.e2e"))  # written by a rename, nothing left


@pytest.mark.parametrize("node", ["rk3588-npu", "rpi4-coral", "x86-coral-m2"])
def test_trees_without_a_temperature_have_no_check_6t(tmp_path: Path, node: str) -> None:
    """x86-coral-m2's apex_0 says no temperature: the check has nothing to heat."""
    tree = build_host(node, tmp_path / node)
    assert thermal_device(plugin_offer(tree, "n"), tree) is None


def test_check_6t_runs_in_both_apis_after_the_workload() -> None:
    for keys in ([k for k, _, _ in CHECKS], [k for k, _, _ in checks_dra.CHECKS]):
        assert keys.index("4_workload") < keys.index("6t_overheating") < keys.index("6k_keeper")
        assert keys.index("6k_keeper") < keys.index("6o_keeper_opt_out")
    for spec in ("device-plugin@x86-coral-pcie", "dra@x86-coral-pcie", "helm+dra@rk3588-npu"):
        sc = Scenario.parse(spec)
        assert "6t_overheating" in [k for k, _, _ in sc.checks(first_of_way=False)]


def test_cis_scenarios_cover_every_check_on_a_tree_it_applies_to() -> None:
    """Each check of each API is reported by a scenario of CI's list; 6t by one whose tree has
    a device that says its temperature, the platform bus by a scenario of its own."""
    from .test_e2e import SCENARIOS

    reported: dict[str, set[str]] = {}
    for spec, checks in SCENARIOS.values():
        sc = Scenario.parse(spec)
        for k in checks:
            reported.setdefault(f"{sc.api} {k}", set()).add(sc.tree or "rpi4-coral")
    for api, checks in (("device-plugin", CHECKS), ("dra", checks_dra.CHECKS)):
        missing = [k for k, _, _ in checks if f"{api} {k}" not in reported]
        assert not missing, f"{api}: no scenario reports {missing}"
    assert "x86-coral-pcie" in reported["device-plugin 6t_overheating"]
    assert "rk3588-npu" in reported["dra 6_hotplug"]
    # the keeper at a PCI device's own path, and on a tree of every USB state (two Corals on
    # two buses, one in its boot state; an NCS2 whose boot device has a serial), both APIs
    assert "x86-coral-pcie" in reported["device-plugin 6k_keeper"]
    for api in ("device-plugin", "dra"):
        assert "rpi4-mixed-states" in reported[f"{api} 6k_keeper"]
