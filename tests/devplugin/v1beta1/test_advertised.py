"""What the kubelet is told about one resource (advertised.py): every device the inventory
gives, present or remembered, as kubelet IDs (the device's name; `<name>-r<k>` for each of a
shared device's replicas) with a health (Unhealthy while absent or unusable, so a pod holding
it keeps a known device) and its NUMA node when it has one, each ID mapping back to its
device, and the healthy and unhealthy counts the metrics report."""

from __future__ import annotations

from edgefd.devplugin.v1beta1.advertised import HEALTHY, UNHEALTHY, Advertised, health
from tests.devplugin.devices import apex, coral

GONE = coral(port="1-1.2", present=False, reason="unplugged from port 1-1.2")
UNUSABLE = coral(port="1-1.3", reason="device node /dev/bus/usb/002/003 is missing")


def test_health_is_usable_now() -> None:
    assert health(coral()) == HEALTHY == "Healthy"
    assert health(GONE) == health(UNUSABLE) == UNHEALTHY == "Unhealthy"


def test_one_id_per_device_with_its_health_and_numa_node() -> None:
    pci = apex(numa_node=1)
    adv = Advertised.build([coral(), GONE, pci], 1)
    assert adv.list_entries == (
        ("coral-usb-2-1", "Healthy", None),
        ("coral-usb-1-1-2", "Unhealthy", None),  # absent, still listed
        ("coral-pcie-0000-02-00-0", "Healthy", 1),
    )
    assert adv.by_kubelet_id == {
        "coral-usb-2-1": coral(),
        "coral-usb-1-1-2": GONE,
        "coral-pcie-0000-02-00-0": pci,
    }
    assert adv.counts() == (2, 1)


def test_a_shared_device_is_listed_once_per_replica() -> None:
    adv = Advertised.build([coral(), UNUSABLE], 3)
    ids = [i for i, _, _ in adv.list_entries]
    assert ids == [
        "coral-usb-2-1-r0",
        "coral-usb-2-1-r1",
        "coral-usb-2-1-r2",
        "coral-usb-1-1-3-r0",
        "coral-usb-1-1-3-r1",
        "coral-usb-1-1-3-r2",
    ]
    assert {adv.by_kubelet_id[i].name for i in ids[:3]} == {"coral-usb-2-1"}
    assert [h for _, h, _ in adv.list_entries[3:]] == ["Unhealthy"] * 3
    assert adv.counts() == (3, 3) and adv.replicas == 3
    assert adv.devices == (coral(), UNUSABLE)


def test_no_device_is_an_empty_list() -> None:
    adv = Advertised.build((), 2)
    assert (adv.list_entries, adv.by_kubelet_id, adv.counts()) == ((), {}, (0, 0))
