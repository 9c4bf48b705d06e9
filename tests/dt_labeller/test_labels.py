"""Label derivation from devicetree nodes (pure functions: no files, no processes)."""

from __future__ import annotations

import pytest

from edgefd.dt_labeller.labels import (
    derive,
    is_available,
    label_name,
    name_matcher,
    origins,
    reference_format,
    split_compatible,
)
from edgefd.dt_labeller.tree import DtNode


def node(path: str, *compat: str, status: str | None = None) -> DtNode:
    raw = b"".join(c.encode() + b"\0" for c in compat) if compat else None
    return DtNode(path, raw, status.encode() + b"\0" if status is not None else None)


RPI4 = (
    node("/", "raspberrypi,4-model-b", "brcm,bcm2711"),
    node("/cpus"),
    *(node(f"/cpus/cpu@{i}", "arm,cortex-a72") for i in range(4)),
    node("/cpus/l2-cache0", "cache"),
    node("/gpu", "brcm,bcm2711-vc5", status="okay"),
    node("/soc", "simple-bus"),
    node("/soc/serial@7e201000", "arm,pl011", "arm,primecell"),
    node("/thermal-zones/cpu-thermal"),
)


def test_rpi4_labels_match_the_reference_article() -> None:
    assert derive(RPI4).labels == {
        "beta.devicetree.org/raspberrypi-4-model-b": "1",
        "beta.devicetree.org/brcm-bcm2711": "1",
        "beta.devicetree.org/arm-cortex-a72": "4",
        "beta.devicetree.org/brcm-bcm2711-vc5": "1",
    }


@pytest.mark.parametrize(
    ("name", "matches"),
    [
        ("cpu", True),
        ("cpu@0", True),
        ("cpu@100", True),
        ("cpu0@0", True),  # the reference's `name<digits>@addr` form
        ("cpus", False),
        ("cpu-thermal", False),
        ("cpu0", False),
        ("mycpu@0", False),
        ("gpu", True),
        ("gpu@57000000", True),
        ("gpus", False),
    ],
)
def test_node_name_matching(name: str, matches: bool) -> None:
    assert bool(name_matcher(["cpu", "gpu"]).fullmatch(name)) is matches


def test_node_names_are_literal_not_regex() -> None:
    m = name_matcher(["a.b"])
    assert m.fullmatch("a.b@1")
    assert not m.fullmatch("axb")


def test_empty_name_list_matches_nothing_but_root_is_still_visited() -> None:
    d = derive(RPI4, node_names=())
    assert [v.path for v in d.reports] == ["/"]
    assert set(d.labels) == {
        "beta.devicetree.org/raspberrypi-4-model-b",
        "beta.devicetree.org/brcm-bcm2711",
    }


def test_matching_works_at_any_depth_and_extra_names_add_nodes() -> None:
    nodes = (node("/"), node("/a/b/c/pwm-fan", "pwm-fan"), node("/x/cpu@0", "arm,a53"))
    d = derive(nodes, node_names=("cpu", "pwm-fan"))
    assert d.labels == {"beta.devicetree.org/pwm-fan": "1", "beta.devicetree.org/arm-a53": "1"}


@pytest.mark.parametrize(
    ("compatible", "expected"),
    [
        ("brcm,bcm2711", "brcm-bcm2711"),
        ("pwm-fan", "pwm-fan"),  # no comma: used as is, like the reference
        ("xlnx,zynq-7000", "xilinx-zynq-7000"),  # the reference's vendor alias
        ("acme,widget,rev2", "acme-widget"),  # the reference keeps the first two parts only
        ("nvidia,tegra210-gm20b", "nvidia-tegra210-gm20b"),
    ],
)
def test_label_name(compatible: str, expected: str) -> None:
    assert label_name(compatible) == expected


def test_count_is_nodes_carrying_a_string() -> None:
    nodes = (
        node("/"),
        node("/cpus/cpu@0", "arm,cortex-a53", "arm,armv8"),
        node("/cpus/cpu@1", "arm,cortex-a53", "arm,armv8"),
        node("/cpus/cpu@100", "arm,cortex-a72", "arm,armv8"),
    )
    assert derive(nodes).labels == {
        "beta.devicetree.org/arm-cortex-a53": "2",
        "beta.devicetree.org/arm-armv8": "3",
        "beta.devicetree.org/arm-cortex-a72": "1",
    }


def test_two_strings_mapping_to_one_label_count_the_node_once() -> None:
    d = derive((node("/", "xlnx,zynq", "xilinx,zynq"),))
    assert d.labels == {"beta.devicetree.org/xilinx-zynq": "1"}


def test_invalid_label_is_rejected_with_node_and_reason_and_others_survive() -> None:
    nodes = (node("/", "nvidia,p3449-0000-b00+p3448-0000-b00", "nvidia,jetson-nano"),)
    d = derive(nodes)
    assert d.labels == {"beta.devicetree.org/nvidia-jetson-nano": "1"}
    (r,) = d.rejected
    assert r.source == "/"
    assert r.key == "beta.devicetree.org/nvidia-p3449-0000-b00+p3448-0000-b00"
    assert "'+'" in r.reason
    assert "nvidia,p3449-0000-b00+p3448-0000-b00" in r.reason


def test_too_long_label_name_is_rejected() -> None:
    d = derive((node("/", "vendor," + "m" * 70),))
    assert d.labels == {}
    assert "63" in d.rejected[0].reason


def test_non_utf8_compatible_is_rejected_not_fatal() -> None:
    d = derive((DtNode("/", b"good,one\0bad,\xff\xfe\0"),))
    assert d.labels == {"beta.devicetree.org/good-one": "1"}
    assert "UTF-8" in d.rejected[0].reason


@pytest.mark.parametrize(
    ("status", "available"),
    [
        (None, True),
        ("okay", True),
        ("ok", True),
        ("disabled", False),
        ("reserved", False),
        ("fail", False),
        ("fail-sss", False),
        ("fail-123", False),
        ("", False),
    ],
)
def test_status_availability(status: str | None, available: bool) -> None:
    assert is_available(status) is available


def test_disabled_nodes_are_not_counted_unless_asked() -> None:
    nodes = (
        node("/", "acme,board"),
        node("/gpu@0", "acme,gpu", status="okay"),
        node("/gpu@1", "acme,gpu", status="disabled"),
        node("/cpus/cpu@0", "arm,a", status="fail"),
    )
    d = derive(nodes)
    assert d.labels == {"beta.devicetree.org/acme-board": "1", "beta.devicetree.org/acme-gpu": "1"}
    skipped = {v.path: v.note for v in d.reports if not v.counted}
    assert skipped == {
        "/gpu@1": 'status is "disabled"; not counted',
        "/cpus/cpu@0": 'status is "fail"; not counted',
    }
    d = derive(nodes, include_disabled=True)
    assert d.labels["beta.devicetree.org/acme-gpu"] == "2"
    assert d.labels["beta.devicetree.org/arm-a"] == "1"


def test_prefix_is_configurable() -> None:
    d = derive(RPI4[:1], prefix="devicetree.example.com")
    assert set(d.labels) == {
        "devicetree.example.com/raspberrypi-4-model-b",
        "devicetree.example.com/brcm-bcm2711",
    }


def test_origins_name_the_nodes() -> None:
    d = derive(RPI4)
    assert origins(d)["beta.devicetree.org/arm-cortex-a72"] == tuple(
        f"/cpus/cpu@{i}" for i in range(4)
    )
    assert origins(d)["beta.devicetree.org/brcm-bcm2711-vc5"] == ("/gpu",)


def test_split_compatible_ignores_empty_strings() -> None:
    assert split_compatible(b"a,b\0\0c\0") == (["a,b", "c"], [])
    assert split_compatible(b"no-terminator") == (["no-terminator"], [])
    assert split_compatible(None) == ([], [])


def test_reference_format() -> None:
    out = reference_format({"beta.devicetree.org/b": "1", "beta.devicetree.org/a": "4"})
    assert out == (
        b"Discovered the following devicetree properties:\n\n"
        b"beta.devicetree.org/a: 4\nbeta.devicetree.org/b: 1\n"
    )
