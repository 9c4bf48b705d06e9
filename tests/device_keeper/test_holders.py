"""Who holds a device, from the kubelet's pod-resources answer (pure functions: `holders`):
exactly the containers the kubelet gave it to, through either API, a shared device's replica
IDs included and look-alike IDs, other resources, pools and drivers not."""

from __future__ import annotations

from edgefd.device_keeper.holders import DeviceRef, Holder, holders

from .pods import CORAL, PODS, dra, plugin, pod


def test_exactly_the_holders_through_either_api():
    assert holders(PODS, CORAL) == [
        Holder("ns", "detector", "app", "device-plugin"),
        Holder("ns", "dra", "app", "dra"),
        Holder("ns", "shared", "a", "device-plugin"),
    ]


def test_nobody_holds_an_unknown_device():
    assert holders(PODS, DeviceRef("ncs2-1-2")) == []


def test_the_ref_finds_holders_by_either_api_under_any_resource() -> None:
    inv_name = "coral-usb-2-1"
    ref = DeviceRef(
        inv_name, ids=frozenset({inv_name}), dra=frozenset({("edgefd.io", "", inv_name)})
    )
    pods = [
        pod("ns", "plugin", [plugin("app", "edgefd.io/coral-usb", inv_name)]),
        pod("ns", "custom", [plugin("app", "example.com/tpu", f"{inv_name}-r2")]),
        pod("ns", "dra", [dra("app", "edgefd.io", "node7", inv_name)]),
        pod("ns", "neighbour", [plugin("app", "edgefd.io/coral-usb", "coral-usb-2-2")]),
        pod("ns", "lookalike", [plugin("app", "edgefd.io/coral-usb", f"{inv_name}-rx")]),
        pod("ns", "other-driver", [dra("app", "gpu.example.com", "node7", inv_name)]),
    ]  # fmt: skip
    assert [(h.pod, h.via) for h in holders(pods, ref)] == [
        ("custom", "device-plugin"),
        ("dra", "dra"),
        ("plugin", "device-plugin"),
    ]
