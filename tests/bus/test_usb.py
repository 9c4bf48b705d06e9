"""edgefd.bus.usb: what /sys/bus/usb/devices says is plugged in, as records (the rpi4-coral
sample's devices, interfaces, drivers and nodes), and every way an entry or attribute can be
wrong (a dangling or looping link, a directory that is no device, an unreadable file, a
garbage `dev`) reported in the warnings and left out, never a crash; ten thousand devices
read without a warning."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgefd.bus import usb
from edgefd.core.hostroot import HostRoot
from tests.fixturegen import HostBuilder, build_host
from tests.usb_scan.command import run

from .hosts import two_corals


def test_a_garbage_dev_attribute_is_reported_and_left_out(tmp_path: Path) -> None:
    bus = two_corals(tmp_path)
    (Path(os.path.realpath(bus / "1-1")) / "dev").write_text("lots\n")
    res = usb.scan(HostRoot.of(tmp_path))
    dev = next(d for d in res.devices if d.name == "1-1")
    assert dev.dev is None and dev.nodes[0].dev is None
    assert any("1-1" in w and "'lots' is not major:minor" in w for w in res.warnings)


def test_discovery_records(rpi4: Path) -> None:
    res = usb.scan(HostRoot.of(rpi4))
    assert res.warnings == ()
    by = {d.name: d for d in res.devices}
    assert sorted(by) == ["1-1", "1-1.1", "1-1.2", "1-1.3", "1-1.4", "2-1", "usb1", "usb2"]
    coral = by["2-1"]
    assert (coral.vendor, coral.product, coral.device_class) == ("1a6e", "089a", "00")
    assert coral.busnum == 2 and coral.devnum == 2
    assert coral.devnode == "/dev/bus/usb/002/002"
    assert coral.sysfs_path.endswith("/0000:01:00.0/usb2/2-1")
    assert coral.interfaces[0].cls == "fe" and coral.interfaces[0].subclass == "01"
    assert coral.serial is None
    cam = by["1-1.3"]
    assert [i.driver for i in cam.interfaces][:2] == ["uvcvideo", "uvcvideo"]
    assert cam.serial == "8F2E2A10"
    assert by["usb1"].driver == "usb" and by["usb1"].interfaces[0].name == "1-0:1.0"


def test_broken_symlink_and_loop_reported(tmp_path: Path) -> None:
    b = HostBuilder(tmp_path)
    b.add_usb({"port": "usb1", "vendor": "1d6b", "product": "0002", "class": "09"})
    bus = tmp_path / "sys/bus/usb/devices"
    os.symlink("../../../devices/gone/1-7", bus / "1-7")
    os.symlink("1-8", bus / "1-9")
    os.symlink("1-9", bus / "1-8")
    (bus / "1-5").mkdir()  # a plain directory without idProduct
    res = usb.scan(HostRoot.of(tmp_path))
    assert [d.name for d in res.devices] == ["usb1"]
    text = "\n".join(res.warnings)
    for name in ("1-5", "1-7", "1-8", "1-9"):
        assert f"/{name}" in text or f"usb {name}" in text, text
    code, _, err = run("--host-root", tmp_path, "--explain")
    assert code == 0 and "Traceback" not in err


def test_unreadable_file_via_monkeypatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # tests run as root, so chmod 000 would not stop a read: make os.read fail instead
    b = HostBuilder(tmp_path)
    b.add_usb({"port": "1-1", "vendor": "1a6e", "product": "089a", "class": "fe"})
    import edgefd.bus.sysfs as sysfs

    real_read = os.read

    def failing_read(fd: int, n: int) -> bytes:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/idProduct"):
            raise PermissionError(13, "Permission denied")
        return real_read(fd, n)

    monkeypatch.setattr(sysfs.os, "read", failing_read)
    res = usb.scan(HostRoot.of(tmp_path))
    assert res.devices[0].product is None
    assert any("idProduct: cannot read (Permission denied)" in w for w in res.warnings)


@pytest.mark.slow
def test_ten_thousand_devices(tmp_path: Path) -> None:
    from tests.fixturegen.sysfs import synthetic_usb

    root = build_host(synthetic_usb(10_000), tmp_path)
    res = usb.scan(HostRoot.of(root))
    assert len(res.devices) == 10_000 + 100 and res.warnings == ()
