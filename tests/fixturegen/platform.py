"""Write platform-bus devices into a fixture host root, laid out as the kernel does.

A devicetree device is `/sys/devices/platform/<unit-address>.<node-name>` (`fdab0000.npu`),
with `of_node` a relative link into `/sys/firmware/devicetree/base/<node>` whose `compatible`
holds NUL-terminated strings, `driver` a link into `/sys/bus/platform/drivers/<name>`, and a
`uevent` with DRIVER, OF_* and MODALIAS lines. A software-made one (`rknn`, registered by the
rocket driver) has no `of_node`. Class devices (`accel/accel0`) carry `dev` and a `uevent`
with DEVNAME, and are linked from `/sys/class/<class>/`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .sysfs import HostBuilder, _rel_symlink, _write


def add_platform(builder: HostBuilder, dev: Mapping[str, Any]) -> Path:
    """One platform device from `{name, compatible?, of_node?, driver?, class_devices?}`."""
    name = str(dev["name"])
    real = builder.p(f"/sys/devices/platform/{name}")
    real.mkdir(parents=True, exist_ok=True)
    compatible = list(dev.get("compatible") or ())
    uevent = []
    drv_name = dev.get("driver")
    if drv_name:
        uevent.append(f"DRIVER={drv_name}")
        drv = builder.p(f"/sys/bus/platform/drivers/{drv_name}")
        drv.mkdir(parents=True, exist_ok=True)
        _rel_symlink(real / "driver", drv)
        _rel_symlink(drv / name, real)
    if compatible:
        unit, _, node_name = name.partition(".")
        of_name = dev.get("of_node") or (f"{node_name}@{unit}" if node_name else name)
        node = builder.p("/sys/firmware/devicetree/base") / of_name
        node.mkdir(parents=True, exist_ok=True)
        (node / "compatible").write_bytes(b"".join(c.encode() + b"\x00" for c in compatible))
        (node / "name").write_bytes(of_name.partition("@")[0].encode() + b"\x00")
        _rel_symlink(real / "of_node", node)
        uevent += [f"OF_NAME={of_name.partition('@')[0]}", f"OF_FULLNAME=/{of_name}"]
        uevent += [f"OF_COMPATIBLE_{i}={c}" for i, c in enumerate(compatible)]
        uevent += [f"OF_COMPATIBLE_N={len(compatible)}"]
        modalias = f"of:N{of_name.partition('@')[0]}T(null)" + "".join(f"C{c}" for c in compatible)
    else:
        modalias = f"platform:{name}"
    uevent.append(f"MODALIAS={modalias}")
    _write(real / "modalias", modalias + "\n")
    _write(real / "uevent", "\n".join(uevent) + "\n")
    _write(real / "driver_override", "(null)\n")
    _rel_symlink(real / "subsystem", builder.p("/sys/bus/platform"))
    for child in dev.get("class_devices") or ():
        # e.g. {class: accel, name: accel0, devname: accel/accel0, major: 261, minor: 0}
        cdir = real / child["class"] / child["name"]
        devname = child.get("devname", child["name"])
        major, minor = child.get("major", 261), child.get("minor", 0)
        _write(cdir / "dev", f"{major}:{minor}\n")
        _write(cdir / "uevent", f"MAJOR={major}\nMINOR={minor}\nDEVNAME={devname}\n")
        _rel_symlink(cdir / "device", real)
        _rel_symlink(builder.p(f"/sys/class/{child['class']}") / child["name"], cdir)
        node_path = builder.p("/dev") / devname
        node_path.parent.mkdir(parents=True, exist_ok=True)
        node_path.touch()
    _rel_symlink(builder.p("/sys/bus/platform/devices") / name, real)
    return real


def remove_platform(builder: HostBuilder, name: str) -> None:
    """Unbind and remove a platform device, its links, class devices and /dev nodes."""
    import shutil

    link = builder.p("/sys/bus/platform/devices") / name
    real = Path(os.path.realpath(link))
    for cls in ("accel", "drm", "misc"):
        for cdir in (real / cls).glob("*") if (real / cls).is_dir() else ():
            (builder.p(f"/sys/class/{cls}") / cdir.name).unlink(missing_ok=True)
            text = (cdir / "uevent").read_text() if (cdir / "uevent").exists() else ""
            for line in text.splitlines():
                if line.startswith("DEVNAME="):
                    (builder.p("/dev") / line.split("=", 1)[1]).unlink(missing_ok=True)
    drv = real / "driver"
    if drv.is_symlink():
        (Path(os.path.realpath(drv)) / name).unlink(missing_ok=True)
    link.unlink(missing_ok=True)
    shutil.rmtree(real, ignore_errors=True)


def write_platform(builder: HostBuilder, devices: list[Mapping[str, Any]]) -> None:
    builder.p("/sys/bus/platform/devices").mkdir(parents=True, exist_ok=True)
    for d in devices:
        add_platform(builder, d)


_SOC_KINDS = (
    ("serial", ("snps,dw-apb-uart",), "dw-apb-uart"),
    ("i2c", ("rockchip,rk3588-i2c", "rockchip,rk3399-i2c"), "rk3x-i2c"),
    ("gpio", ("rockchip,gpio-bank",), "rockchip-gpio"),
    ("iommu", ("rockchip,rk3588-iommu", "rockchip,rk3568-iommu"), "rk_iommu"),
    ("clock-controller", ("rockchip,rk3588-cru",), None),
    ("pinctrl", ("rockchip,rk3588-pinctrl",), "rockchip-pinctrl"),
)


def synthetic_platform(n: int) -> list[dict[str, Any]]:
    """`n` SoC platform devices of a few realistic kinds (plus a few without a devicetree
    node), none of them an accelerator: the background a platform scan reads through."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i % 10 == 9:
            out.append({"name": f"alarmtimer.{i}.auto"})
            continue
        node, compat, driver = _SOC_KINDS[i % len(_SOC_KINDS)]
        d: dict[str, Any] = {"name": f"{0xFE000000 + i * 0x1000:x}.{node}", "compatible": compat}
        if driver:
            d["driver"] = driver
        out.append(d)
    return out
