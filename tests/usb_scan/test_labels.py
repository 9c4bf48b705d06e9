"""The USB label rules (usb_scan/labels.py): NFD's `usb-<fields>.present`, identical to NFD's
on the sample nodes (boot and runtime Coral, NCS2, webcam, FT2232) with the capability labels
beside them or without; fields always in NFD's order, unknown ones falling back like NFD, a
missing serial left out rather than empty; a device or interface whose attributes are garbage
or unreadable skipped with a warning, the others still labelled; `derive` pure on hand-made
records."""

from __future__ import annotations

import os
from pathlib import Path

from edgefd.bus import usb as discovery
from edgefd.scan.config import SourceConfig
from edgefd.usb_scan.labels import RULES, derive
from tests.fixturegen import HostBuilder, build_host

from .command import NFD, RPI4_CAPS, RPI4_NFD, file_labels, run


def test_rpi4_default_labels_are_nfds(rpi4: Path) -> None:
    code, out, _ = run("--host-root", rpi4, "--dry-run")
    assert code == 0
    assert file_labels(out) == {**RPI4_NFD, **RPI4_CAPS}
    assert out.startswith("# written by usb-scan")


def test_no_capabilities_gives_exactly_nfd(rpi4: Path) -> None:
    code, out, _ = run("--host-root", rpi4, "--dry-run", "--no-capabilities")
    assert code == 0 and file_labels(out) == RPI4_NFD


def test_runtime_variant(tmp_path: Path) -> None:
    root = build_host("rpi4-coral-runtime", tmp_path, devicetree=False)
    labels = file_labels(run("--host-root", root, "--dry-run")[1])
    assert NFD + "usb-ff_18d1_9302.present" in labels
    assert NFD + "usb-fe_1a6e_089a.present" not in labels
    assert labels["edgefd.io/edgetpu.count"] == "1"


def test_class_whitelist_and_fields_options(rpi4: Path) -> None:
    out = run(
        "--host-root",
        rpi4,
        "--dry-run",
        "--no-capabilities",
        "--class-whitelist",
        "03,09",
        "--label-fields",
        "vendor,class",
    )[1]
    # fields are always joined in NFD's order (class, vendor, device, serial)
    assert file_labels(out) == {
        NFD + "usb-03_046d.present": "true",
        NFD + "usb-09_1d6b.present": "true",
        NFD + "usb-09_2109.present": "true",
    }


def test_unknown_fields_fall_back_like_nfd(rpi4: Path) -> None:
    code, out, err = run(
        "--host-root", rpi4, "--dry-run", "--no-capabilities", "--label-fields", "bogus"
    )
    assert code == 0 and file_labels(out) == RPI4_NFD
    assert "bogus" in err


def test_serial_field_omitted_when_missing(rpi4: Path) -> None:
    out = run(
        "--host-root",
        rpi4,
        "--dry-run",
        "--no-capabilities",
        "--label-fields",
        "class,vendor,device,serial",
    )[1]
    labels = file_labels(out)
    assert NFD + "usb-ff_03e7_2485_03e72485.present" in labels
    assert NFD + "usb-ff_0403_6010.present" in labels  # no serial: field left out, not empty
    assert NFD + "usb-ef_046d_0825_8F2E2A10.present" in labels


def test_derive_is_pure() -> None:
    dev = discovery.UsbDevice(
        name="3-1",
        sysfs_path="/x",
        busnum=3,
        devnum=2,
        vendor="1a86",
        product="7523",
        device_class="ff",
        serial=None,
        manufacturer=None,
        product_name=None,
        speed="12",
        interfaces=(),
        devnode=None,
        driver=None,
        numa_node=None,
    )
    cfg = SourceConfig(RULES.default_whitelist, RULES.default_fields)
    assert dict(derive([dev], cfg).labels) == {NFD + "usb-ff_1a86_7523.present": "true"}


def test_garbage_and_unreadable_attributes(tmp_path: Path) -> None:
    b = HostBuilder(tmp_path)
    b.add_usb({"port": "usb1", "vendor": "1d6b", "product": "0002", "class": "09"})
    good = b.add_usb(
        {
            "port": "1-1",
            "vendor": "1a6e",
            "product": "089a",
            "interfaces": [{"class": "fe"}, {"class": "ff"}],
        }
    )
    bad = b.add_usb({"port": "1-2", "vendor": "03e7", "product": "2485", "class": "ff"})
    (bad / "idVendor").write_text("zz!!\n")  # garbage
    (good / "1-1:1.1" / "bInterfaceClass").unlink()
    (good / "1-1:1.1" / "bInterfaceClass").mkdir()  # a directory where a file should be
    os.mkfifo(good / "serial")  # a FIFO would block a naive open()
    code, out, err = run("--host-root", tmp_path, "--dry-run", "--no-capabilities")
    assert code == 0 and "Traceback" not in err
    assert file_labels(out) == {NFD + "usb-fe_1a6e_089a.present": "true"}
    assert "usb 1-2: /sys/" in err and "'zz!!' is not hex" in err
    assert "bInterfaceClass: not a regular file" in err
    assert "serial: not a regular file" in err
