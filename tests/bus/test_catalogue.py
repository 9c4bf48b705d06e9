"""The accelerator catalogue: packaged data valid, matching across states, errors named."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefd.bus.catalogue import Catalogue, PciId, Thermal, UsbId, load_catalogue
from edgefd.core.errors import BadInput
from edgefd.core.schema import parse_yaml


def test_packaged_catalogue() -> None:
    cat = load_catalogue()
    assert isinstance(cat, Catalogue)
    acc, uid = cat.match_usb("1a6e", "089a") or (None, None)
    assert acc is not None and acc.id == "coral-usb" and acc.kind == "edgetpu"
    assert uid == UsbId("1a6e", "089a", "boot")
    acc2, uid2 = cat.match_usb("18D1", "9302") or (None, None)
    assert acc2 is acc and uid2 is not None and uid2.state == "runtime"
    assert cat.match_usb("03e7", "2485")[0].id == "ncs2"  # type: ignore[index]
    assert cat.match_usb("03e7", "f63b")[0].id == "ncs2"  # type: ignore[index]
    assert cat.match_usb("03e7", "2150")[0].id == "ncs1"  # type: ignore[index]
    pcie = cat.match_pci("1ac1", "089a", "088000")
    assert pcie is not None and pcie.kind == "edgetpu" and pcie.dev_globs == ("/dev/apex_*",)
    assert pcie.resource == "edgefd.io/coral-pcie"
    assert cat.match_pci("1e60", "2864", "0b4000").id == "hailo8"  # type: ignore[union-attr]
    assert cat.match_pci("10de", "1eb8", "030200") is None
    assert cat.match_usb("046d", "0825") is None
    assert "edgetpu" in {a.kind for a in cat.accelerators}


def test_class_prefix_match() -> None:
    p = PciId("10de", None, "0302")
    assert p.matches("10de", "1eb8", "030200") and not p.matches("10de", "1eb8", "030000")


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cat.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "accelerators: [{id: x, kind: k, name: n}]",
            "needs at least one 'usb', 'pci' or 'platform'",
        ),
        ("accelerators: [{id: X!, kind: k, name: n, usb: []}]", "accelerators[0].id: 'X!' must be"),
        (
            "accelerators: [{id: x, kind: k, name: n, usb: [{vendor: 1a6, product: '0001'}]}]",
            "accelerators[0].usb[0].vendor: '1a6' is not 4 hex digits",
        ),
        (
            "accelerators: [{id: x, kind: k, name: n,"
            " usb: [{vendor: '1a6e', product: '0001', state: warm}]}]",
            "accelerators[0].usb[0].state: 'warm'",
        ),
        (
            "accelerators: [{id: x, kind: k, name: n, pci: [{vendor: '1ac1'}], resource: nope}]",
            "accelerators[0].resource: 'nope'",
        ),
        (
            "accelerators: [{id: x, kind: k, name: n, pci: [{vendor: '1ac1'}], colour: red}]",
            "unknown field",
        ),
        (
            "accelerators: [{id: x, kind: k, name: n, pci: [{vendor: '1ac1'}],"
            " dev_globs: [/tmp/x]}]",
            "dev_globs",
        ),
        (
            "accelerators: [{id: a, kind: k, name: n, usb: [{vendor: '0001', product: '0002'}]},"
            " {id: b, kind: k, name: n, usb: [{vendor: '0001', product: '0002'}]}]",
            "listed by both",
        ),
        (
            "accelerators: [{id: a, kind: k, name: n, pci: [{vendor: '0001'}]},"
            " {id: a, kind: k, name: n, pci: [{vendor: '0002'}]}]",
            "duplicate id",
        ),
        (
            "accelerators: [{id: x, kind: k, name: n, pci: [{vendor: '1ac1'}],"
            " temperature: {class: apex, input: ../temp, default_limit: 85000}}]",
            "accelerators[0].temperature.input: '../temp' must be one sysfs name",
        ),
        (
            "accelerators: [{id: x, kind: k, name: n, pci: [{vendor: '1ac1'}],"
            " temperature: {class: apex, input: temp}}]",
            "accelerators[0].temperature.default_limit: required (milli-degrees Celsius",
        ),
        (
            "accelerators: [{id: x, kind: k, name: n, pci: [{vendor: '1ac1'}],"
            " temperature: {class: apex, input: temp, default_limit: 85}}]",
            "accelerators[0].temperature.default_limit: 85 is out of range",
        ),
        ("[1, 2]", "must be a mapping"),
        ("accelerators: {", ":2:1: did not find expected node content"),
    ],
)
def test_invalid_catalogue_names_the_field(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(BadInput, match=None) as e:
        load_catalogue(write(tmp_path, text))
    assert needle in str(e.value)


def test_coral_pcie_says_where_its_temperature_is() -> None:
    # apex_driver.c: the class device's `temp` and `trip_point0_temp` (milli-°C), default
    # DEFAULT_TRIP_POINT0_TEMP 85000; no other entry has one
    cat = load_catalogue()
    thermal = Thermal(cls="apex", input="temp", limit="trip_point0_temp", default_limit=85000)
    assert cat.by_id("coral-pcie").temperature == thermal  # type: ignore[union-attr]
    others = [a.id for a in cat.accelerators if a.temperature and a.id != "coral-pcie"]
    assert others == []


def test_env_and_custom_catalogue(tmp_path: Path) -> None:
    cat = load_catalogue(
        write(
            tmp_path,
            "accelerators:\n- {id: my-npu, kind: npu, name: My NPU, pci: [{vendor: '1234',"
            " class_prefix: '1200'}], env: {NPU_VISIBLE: all}, resource: example.com/npu}\n",
        )
    )
    acc = cat.match_pci("1234", "ffff", "120000")
    assert acc is not None and acc.env == (("NPU_VISIBLE", "all"),)


def test_one_match_for_any_record(tmp_path: Path) -> None:
    """catalogue.match(record): the one answer to "which accelerator is this?", for USB and
    PCI records alike, with the key the record carries and the life stage its IDs mean."""
    from edgefd.bus import pci, usb
    from edgefd.bus.key import DeviceKey
    from edgefd.core.hostroot import HostRoot
    from tests.fixturegen import build_host

    cat = load_catalogue()
    rpi = HostRoot.of(build_host("rpi4-coral", tmp_path / "rpi", devicetree=False))
    found = {m.key: (m.accelerator.id, m.state) for m in map(cat.match, usb.scan(rpi).devices) if m}
    assert found == {
        DeviceKey("usb", "2-1"): ("coral-usb", "boot"),
        DeviceKey("usb", "1-1.1"): ("ncs2", "boot"),
    }
    x86 = HostRoot.of(build_host("x86-server", tmp_path / "x86", devicetree=False))
    hits = [m for m in map(cat.match, pci.scan(x86).devices) if m]
    assert [(m.key, m.accelerator.id, m.bus, m.device) for m in hits] == [
        (DeviceKey("pci", "0000:02:00.0"), "coral-pcie", "pci", "0000:02:00.0"),
        (DeviceKey("pci", "0000:04:00.0"), "hailo8", "pci", "0000:04:00.0"),
    ]


def test_the_packaged_file_reads_the_same_as_json() -> None:
    """It is read as a Python literal (no json import at start-up): that must be exactly what
    the JSON reading of it gives."""
    import json

    from edgefd.bus.catalogue import DEFAULT_PATH, _parse_yaml

    text = DEFAULT_PATH.read_text()
    body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    assert _parse_yaml(text, DEFAULT_PATH) == json.loads(body)
    # and what the YAML reader gives, which refuses a key given twice (a literal does not)
    assert _parse_yaml(text, DEFAULT_PATH) == parse_yaml(text, DEFAULT_PATH)


def test_a_json_catalogue_with_a_key_given_twice_is_refused_naming_both_lines(
    tmp_path: Path,
) -> None:
    """Issue 46 item 7: JSON, the fast path for a catalogue, keeps the last of two equal keys
    as PyYAML did; such a file goes to the YAML reader, which refuses it."""
    p = tmp_path / "cat.yaml"
    p.write_text('# mine\n{"accelerators": [],\n "accelerators": []}\n')
    with pytest.raises(BadInput, match=r"cat.yaml:3:2: duplicate key 'accelerators' \(first at"):
        load_catalogue(p)


# Issue 31 item 1: the accelerators of 2026, each ID as its driver lists it
INTEL_NPU_IDS = ("7d1d", "ad1d", "643e", "b03e", "fd3e", "d71d")  # ivpu_drv.h MTL..NVL


def test_hailo10h_and_the_intel_npu_by_pci_id() -> None:
    cat = load_catalogue()
    h10 = cat.match_pci("1e60", "45C4", "0b4000")
    assert h10 is not None and (h10.id, h10.kind, h10.resource) == (
        "hailo10h",
        "hailo",
        "edgefd.io/hailo10h",
    )
    assert h10.dev_globs == ("/dev/hailo*", "/dev/h1x-*")  # hailort-drivers <= 5.2, >= 5.3
    for device in INTEL_NPU_IDS:
        npu = cat.match_pci("8086", device, "120000")
        assert npu is not None and npu.id == "intel-npu" and npu.kind == "npu", device
    assert cat.by_id("intel-npu").resource == "edgefd.io/intel-npu"  # type: ignore[union-attr]
    assert cat.match_pci("8086", "7e4c", "120000") is None  # not in the driver's table
    assert cat.match_pci("17cb", "a100", "120000") is None  # another accel driver's card


def test_the_rockchip_npu_by_compatible_and_driver() -> None:
    cat = load_catalogue()
    core = ("rockchip,rk3588-rknn-core",)
    npu = cat.match_platform(core, "rocket")
    assert npu is not None and (npu.id, npu.kind, npu.resource) == (
        "rockchip-npu",
        "npu",
        "edgefd.io/rockchip-npu",
    )
    assert cat.match_platform(core, None) is npu  # unbound: still the NPU (no node yet)
    assert cat.match_platform(core, "rknpu") is None  # the vendor driver's: not this
    assert cat.match_platform(("rockchip,rk3588-rknpu",), "rknpu") is None
    [rule] = cat.platform_ids
    assert rule.device == "rknn"  # rocket_drv.c: platform_device_register_simple("rknn")


@pytest.mark.parametrize(
    ("platform", "needle"),
    [
        ("[{driver: rocket}]", "platform[0].compatible"),
        ("[{compatible: 'a b'}]", "is not a devicetree/sysfs name"),
        ("[{compatible: x, device: ../etc}]", "platform[0].device"),
        ("[{compatible: x, colour: red}]", "colour"),
    ],
)
def test_bad_platform_ids_are_named(tmp_path: Path, platform: str, needle: str) -> None:
    text = f"accelerators: [{{id: x, kind: k, name: n, platform: {platform}}}]"
    with pytest.raises(BadInput) as e:
        load_catalogue(write(tmp_path, text))
    assert needle in str(e.value)
