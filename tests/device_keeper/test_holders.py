"""Who holds a device, from the kubelet's pod-resources answer (pure functions: `holders`):
exactly the containers the kubelet gave it to, through either API, as devplugin's decisions
say it is handed out: a shared device's replica IDs included (also those of a `replicas` that
was configured before), look-alike IDs, other resources, pools and drivers not."""

from __future__ import annotations

from edgefd.device_keeper.holders import Holder, holders

from .pods import CORAL, PODS, dra, handout, plugin, pod


def test_exactly_the_holders_through_either_api():
    assert holders(PODS, CORAL) == [
        Holder("ns", "detector", "app", "device-plugin"),
        Holder("ns", "dra", "app", "dra"),
        Holder("ns", "shared", "a", "device-plugin"),
    ]


def test_nobody_holds_an_unknown_device():
    assert holders(PODS, handout("ncs2-1-2", plugin=(), dra=())) == []


def test_the_handout_finds_holders_under_each_of_its_resources() -> None:
    name = "coral-usb-2-1"
    h = handout(
        name,
        plugin=(("edgefd.io/coral-usb", (name,)), ("example.com/tpu", (f"{name}-r0",))),
        dra=(("edgefd.io", "node7", name),),
    )
    pods = [
        pod("ns", "plugin", [plugin("app", "edgefd.io/coral-usb", name)]),
        pod("ns", "custom", [plugin("app", "example.com/tpu", f"{name}-r2")]),  # replicas was 3
        pod("ns", "dra", [dra("app", "edgefd.io", "node7", name)]),
        pod("ns", "neighbour", [plugin("app", "edgefd.io/coral-usb", "coral-usb-2-2")]),
        pod("ns", "lookalike", [plugin("app", "edgefd.io/coral-usb", f"{name}-rx")]),
        pod("ns", "not-its-resource", [plugin("app", "example.com/gpu", name)]),
        pod("ns", "other-pool", [dra("app", "edgefd.io", "node8", name)]),
        pod("ns", "other-driver", [dra("app", "gpu.example.com", "node7", name)]),
    ]  # fmt: skip
    assert [(h.pod, h.via) for h in holders(pods, h)] == [
        ("custom", "device-plugin"),
        ("dra", "dra"),
        ("plugin", "device-plugin"),
    ]
