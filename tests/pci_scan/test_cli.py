"""pci-scan as a command (pci_scan/cli.py, on edgefd.cli.scanner's options): --explain naming
skipped devices, the JSON inventory (strict UTF-8 whatever sysfs says), a board without PCI, no
sysfs, ten thousand functions, durations checked when the command line is parsed, and exit codes
with one-line errors for a host that cannot be read or an output path that is no regular file
(the previous file kept)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgefd.bus import pci as discovery
from edgefd.core.hostroot import HostRoot
from edgefd.pci_scan.cli import main
from tests.fixturegen import HostBuilder, build_host

from .command import NFD, X86_CAPS, X86_NFD, file_labels, run


def test_explain_names_skipped_device(x86: Path) -> None:
    code, out, _ = run("--host-root", x86, "--explain")
    assert code == 0
    assert "pci 0000:00:1f.6" in out and "skipped: subsystem_vendor missing" in out
    assert "class 0880 (system peripheral) is not whitelisted" in out
    assert "coral-pcie" in out and "sriov_totalvfs present (16)" in out
    assert out.count("\npci ") == 13


def test_json_inventory(x86: Path) -> None:
    inv = json.loads(run("--host-root", x86, "-o", "json", "--dry-run")[1])
    coral = next(d for d in inv["devices"] if d["address"] == "0000:02:00.0")
    assert coral["accelerator"]["id"] == "coral-pcie" and coral["devnodes"] == ["/dev/apex_0"]
    assert coral["accelerator"]["resource"] == "edgefd.io/coral-pcie"
    assert sorted(inv["capabilities"]) == ["edgetpu", "hailo"]
    assert inv["labels"] == {**X86_NFD, **X86_CAPS}


def test_missing_bus_dir(tmp_path: Path) -> None:
    (tmp_path / "sys/bus/usb/devices").mkdir(parents=True)  # a board without PCI
    code, _out, err = run("--host-root", tmp_path, "--dry-run")
    assert code == 0 and "/sys/bus/pci/devices does not exist" in err


def test_no_sysfs_is_an_error(tmp_path: Path) -> None:
    code, out, err = run("--host-root", tmp_path, "--dry-run")
    assert code == 3 and out == "" and "is sysfs mounted there?" in err


@pytest.mark.slow
def test_ten_thousand_functions(tmp_path: Path) -> None:
    from tests.fixturegen.sysfs import synthetic_pci

    root = build_host(synthetic_pci(10_000), tmp_path)
    res = discovery.scan(HostRoot.of(root))
    assert len(res.devices) == 10_000 and res.warnings == ()
    _code, out, _ = run("--host-root", root, "--dry-run", "--no-capabilities")
    assert file_labels(out) == {
        NFD + "pci-0b40_8086.present": "true",
        NFD + "pci-0b40_8086.sriov.capable": "true",
    }


@pytest.mark.parametrize("option", ["--rescan-interval", "--poll-interval", "--hold"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e999", "9" * 400, "86401"])
def test_bad_durations_are_usage_errors_at_parse_time(x86: Path, option: str, value: str) -> None:
    code, out, err = run("--host-root", x86, "--dry-run", option, value)
    assert code == 2 and out == "", err
    assert f"Invalid value for '{option}'" in err and "Traceback" not in err


@pytest.mark.parametrize("broken", ["nonexistent-root", "no-sysfs", "pci-devices-is-a-file"])
def test_unreadable_sysfs_exits_3_and_keeps_the_file(tmp_path: Path, broken: str) -> None:
    host = tmp_path / "host"
    out_dir = tmp_path / "features.d"
    out_dir.mkdir()
    previous = "feature.node.kubernetes.io/pci-0302_10de.present=true\n"
    (out_dir / "pci-scan").write_text(previous)
    if broken == "nonexistent-root":
        host = tmp_path / "nonexistent"
    elif broken == "no-sysfs":
        host.mkdir()
    else:
        (host / "sys/bus/usb/devices").mkdir(parents=True)
        (host / "sys/bus/pci").mkdir(parents=True)
        (host / "sys/bus/pci/devices").write_text("")
    code, _out, err = run("--host-root", host, "--features-dir", out_dir)
    assert code == 3, err
    (line,) = err.splitlines()
    assert line.startswith("pci-scan: error: cannot "), line
    assert (out_dir / "pci-scan").read_text() == previous
    assert [p.name for p in out_dir.iterdir()] == ["pci-scan"]


def test_json_inventory_is_strict_utf8_whatever_sysfs_says(tmp_path: Path) -> None:
    """A driver name and a function address that are not UTF-8 reach the inventory as `\\xNN`
    text, never as lone surrogates that strict parsers refuse."""
    import json

    b = HostBuilder(tmp_path)
    (tmp_path / "sys/bus/usb/devices").mkdir(parents=True)
    real = b.add_pci(
        {"address": "0000:01:00.0", "class": "030200", "vendor": "10de", "device": "1eb8"}
    )
    drivers = os.fsencode(tmp_path / "sys/bus/pci/drivers")
    os.makedirs(drivers + b"/nv\xffidia\n")
    os.symlink(os.path.relpath(drivers + b"/nv\xffidia\n", os.fsencode(real)), real / "driver")
    other = b.add_pci(
        {"address": "0000:02:00.0", "class": "030000", "vendor": "8086", "device": "3e92"}
    )
    bus = tmp_path / "sys/bus/pci/devices"
    weird = os.fsencode(other.parent) + b"/0000:02:00.\xfe"
    os.rename(os.fsencode(other), weird)
    os.unlink(bus / "0000:02:00.0")
    os.symlink(os.path.relpath(weird, os.fsencode(bus)), os.fsencode(bus) + b"/0000:02:00.\xfe")
    res = CliRunner().invoke(main, ["--host-root", str(tmp_path), "--dry-run", "-o", "json"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout_bytes.decode("utf-8", "strict"))
    json.dumps(doc, ensure_ascii=False).encode("utf-8", "strict")  # no lone surrogate inside
    devs = {d["address"]: d for d in doc["devices"]}
    assert set(devs) == {"0000:01:00.0", "0000:02:00.\\xfe"}
    assert devs["0000:01:00.0"]["driver"] == "nv\\xffidia\n"
    code, out, err = run("--host-root", tmp_path, "--explain")
    assert code == 0, err
    assert "0000:02:00.\\xfe" in out and "nv\\xffidia\\n" in out


def test_a_pi5_with_a_hailo_says_its_driver_version_and_its_page_size(tmp_path: Path) -> None:
    host = build_host("rpi5-hailo8l", tmp_path / "host", devicetree=False)
    code, out, _ = run("--host-root", host, "--dry-run")
    labels = file_labels(out)
    assert code == 0
    assert labels["edgefd.io/hailo.driver-version"] == "4.20.0"
    assert labels["edgefd.io/kernel.page-size"] == "16384"
    # found through the driver's module: the driver is `hailo`, its module `hailo_pci`
    inv = json.loads(run("--host-root", host, "-o", "json", "--dry-run")[1])
    hailo = next(d for d in inv["devices"] if d["address"] == "0001:01:00.0")
    assert (hailo["driver"], hailo["driver_version"]) == ("hailo", "4.20.0")
    # NFD's labels only: no edgefd fact either
    code, out, _ = run("--host-root", host, "--dry-run", "--no-capabilities")
    assert code == 0 and not [k for k in file_labels(out) if k.startswith("edgefd.io/")]


@pytest.mark.parametrize(
    ("node", "kind", "accelerator", "bus", "place"),
    [
        ("rpi5-hailo10h", "hailo", "hailo10h", "pci", "0001:01:00.0"),
        ("rpi5-hailo10h-h1x", "hailo", "hailo10h", "pci", "0001:01:00.0"),
        ("x86-intel-npu", "npu", "intel-npu", "pci", "0000:00:0b.0"),
        ("rk3588-npu", "npu", "rockchip-npu", "platform", "rknn"),
    ],
)
def test_the_accelerators_of_issue_31_are_counted_once(
    tmp_path: Path, node: str, kind: str, accelerator: str, bus: str, place: str
) -> None:
    """Issue 31: a Hailo-10H (either node name), an Intel NPU beside another accel card, an
    RK3588's NPU on the platform bus: one capability each, the platform one too (it has no
    NFD label of its own: NFD has no platform source)."""
    root = build_host(node, tmp_path / node, devicetree=False)
    inv = json.loads(run("--host-root", root, "-o", "json", "--dry-run")[1])
    assert inv["capabilities"] == {
        kind: [{"accelerator": accelerator, "bus": bus, "device": place, "state": ""}]
    }
    caps = {k: v for k, v in inv["labels"].items() if k.startswith("edgefd.io/")}
    assert caps == {f"edgefd.io/{kind}.present": "true", f"edgefd.io/{kind}.count": "1"}
    if bus == "platform":
        assert not [k for k in inv["labels"] if k.startswith(NFD)]


def test_a_catalogue_of_ones_own_names_platform_devices_too(tmp_path: Path) -> None:
    """--catalogue: the platform bus is read for what that catalogue names (an i.MX93's
    Ethos-U65 here), not for the packaged one's compatibles only."""
    from tests.fixturegen.platform import add_platform

    root = tmp_path / "imx93"
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    add_platform(
        HostBuilder(root),
        {"name": "4a900000.npu", "compatible": ["fsl,imx93-npu", "arm,ethos-u65"],
         "driver": "ethosu",
         "class_devices": [{"class": "accel", "name": "accel0", "devname": "accel/accel0"}]},
    )  # fmt: skip
    cat = tmp_path / "cat.yaml"
    cat.write_text(
        "accelerators: [{id: ethos-u65, kind: ethosu, name: Arm Ethos-U65,\n"
        "  platform: [{compatible: 'arm,ethos-u65', driver: ethosu}]}]\n"
    )
    code, out, err = run("--host-root", root, "--catalogue", cat, "--dry-run")
    assert code == 0, err
    assert file_labels(out) == {"edgefd.io/ethosu.present": "true", "edgefd.io/ethosu.count": "1"}
    assert "edgefd.io/" not in run("--host-root", root, "--dry-run")[1]
