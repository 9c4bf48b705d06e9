"""Write realistic sysfs trees (USB, PCI) and /dev under a fixture host root.

The layout follows the kernel's: real device directories under `/sys/devices/...` (a USB device
inside its hub inside its root hub inside its host controller), and `/sys/bus/<bus>/devices/*`
as *relative* symlinks into them, `driver` / `subsystem` / `iommu_group` as relative symlinks,
attribute values formatted the way the kernel prints them (`0x030200`, `1a6e`, `fe`, decimal
`busnum`). Device nodes under `/dev` are empty regular files: creating real character devices
needs `mknod` privileges (CAP_MKNOD, and most CI containers drop it), and no scanner opens them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

USB_CTRL_DEFAULT = "/sys/devices/pci0000:00/0000:00:14.0"


def _write(path: Path, text: str) -> None:
    try:  # the directory is there nearly always: a mkdir per file doubled a 10,000-device tree
        path.write_text(text)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _rel_symlink(link: Path, target: Path) -> None:
    """Create `link` -> `target` as a relative symlink, as the kernel's sysfs does."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(os.path.relpath(target, link.parent), link)


def _hex(value: Any, width: int) -> str:
    """Normalise a description value (`"1a6e"`, `0x1a6e`, `6766`) to `width` hex digits."""
    if isinstance(value, int):
        return f"{value:0{width}x}"
    v = str(value).lower().removeprefix("0x")
    return v.zfill(width)


class HostBuilder:
    """Add and remove devices in a fixture root; each call leaves a consistent tree."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._devnums: dict[int, int] = {}

    def p(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")

    # ------------------------------------------------------------------ USB

    def usb_real_path(self, name: str, controller: str = USB_CTRL_DEFAULT) -> Path:
        """Where the kernel puts device `name`: inside its parent hub's directory."""
        if name.startswith("usb"):
            return self.p(controller) / name
        bus, _, ports = name.partition("-")
        parent = f"{bus}-{ports.rsplit('.', 1)[0]}" if "." in ports else f"usb{bus}"
        existing = self.p("/sys/bus/usb/devices") / parent
        if existing.is_symlink():
            return Path(os.path.realpath(existing)) / name
        return self.usb_real_path(parent, controller) / name

    def add_usb(self, dev: Mapping[str, Any], controller: str = USB_CTRL_DEFAULT) -> Path:
        """Create one USB device (and its interfaces) from a description mapping."""
        name = str(dev["port"])
        root_hub = name.startswith("usb")
        busnum = int(name[3:]) if root_hub else int(name.split("-", 1)[0])
        devnum = dev.get("devnum")
        if devnum is None:
            devnum = 1 if root_hub else self._devnums.get(busnum, 1) + 1
        self._devnums[busnum] = max(self._devnums.get(busnum, 1), int(devnum))
        real = self.usb_real_path(name, dev.get("controller", controller))
        real.mkdir(parents=True, exist_ok=True)
        vendor = _hex(dev["vendor"], 4)
        product = _hex(dev["product"], 4)
        dclass = _hex(dev.get("class", "00"), 2)
        sub = _hex(dev.get("subclass", "00"), 2)
        proto = _hex(dev.get("protocol", "00"), 2)
        bcd = _hex(dev.get("bcd_device", "0100"), 4)
        devpath = "0" if root_hub else name.split("-", 1)[1]
        attrs = {
            "idVendor": vendor,
            "idProduct": product,
            "bDeviceClass": dclass,
            "bDeviceSubClass": sub,
            "bDeviceProtocol": proto,
            "bcdDevice": bcd,
            "bNumConfigurations": "1",
            "bConfigurationValue": "1",
            "bNumInterfaces": f"{len(dev.get('interfaces', ())):2d}",
            "busnum": str(busnum),
            "devnum": str(devnum),
            "devpath": devpath,
            "speed": str(dev.get("speed", "480")),
            "maxchild": str(dev.get("maxchild", 4 if dclass == "09" else 0)),
            "authorized": "1",
            "removable": dev.get("removable", "fixed" if root_hub else "removable"),
        }
        for key, attr in (("manufacturer", "manufacturer"), ("product_name", "product")):
            if dev.get(key) is not None:
                attrs[attr] = str(dev[key])
        if dev.get("serial") is not None:
            attrs["serial"] = str(dev["serial"])
        for k, v in attrs.items():
            _write(real / k, v + "\n")
        devname = f"bus/usb/{busnum:03d}/{int(devnum):03d}"
        minor = (busnum - 1) * 128 + int(devnum) - 1
        _write(
            real / "uevent",
            f"MAJOR=189\nMINOR={minor}\nDEVNAME={devname}\nDEVTYPE=usb_device\nDRIVER=usb\n"
            f"PRODUCT={int(vendor, 16):x}/{int(product, 16):x}/{int(bcd, 16):x}\n"
            f"TYPE={int(dclass, 16)}/{int(sub, 16)}/{int(proto, 16)}\n"
            f"BUSNUM={busnum:03d}\nDEVNUM={int(devnum):03d}\n",
        )
        _write(real / "dev", f"189:{minor}\n")
        _rel_symlink(real / "subsystem", self.p("/sys/bus/usb"))
        if dev.get("driver", "usb"):
            drv = self.p(f"/sys/bus/usb/drivers/{dev.get('driver', 'usb')}")
            drv.mkdir(parents=True, exist_ok=True)
            _rel_symlink(real / "driver", drv)
        ifprefix = f"{busnum}-0" if root_hub else name
        for n, intf in enumerate(dev.get("interfaces", ())):
            iname = f"{ifprefix}:1.{n}"
            idir = real / iname
            icls = _hex(intf["class"], 2)
            isub = _hex(intf.get("subclass", "00"), 2)
            iproto = _hex(intf.get("protocol", "00"), 2)
            for k, v in {
                "bInterfaceNumber": f"{n:02x}",
                "bAlternateSetting": " 0",
                "bInterfaceClass": icls,
                "bInterfaceSubClass": isub,
                "bInterfaceProtocol": iproto,
                "bNumEndpoints": "01",
            }.items():
                _write(idir / k, v + "\n")
            _write(
                idir / "uevent",
                f"DEVTYPE=usb_interface\n"
                f"PRODUCT={int(vendor, 16):x}/{int(product, 16):x}/{int(bcd, 16):x}\n"
                f"TYPE={int(dclass, 16)}/{int(sub, 16)}/{int(proto, 16)}\n"
                f"INTERFACE={int(icls, 16)}/{int(isub, 16)}/{int(iproto, 16)}\n",
            )
            _rel_symlink(idir / "subsystem", self.p("/sys/bus/usb"))
            if intf.get("driver"):
                drv = self.p(f"/sys/bus/usb/drivers/{intf['driver']}")
                drv.mkdir(parents=True, exist_ok=True)
                _rel_symlink(idir / "driver", drv)
            _rel_symlink(self.p("/sys/bus/usb/devices") / iname, idir)
        _rel_symlink(self.p("/sys/bus/usb/devices") / name, real)
        node = self.p("/dev") / devname
        node.parent.mkdir(parents=True, exist_ok=True)
        node.touch()
        return real

    def describe_usb(self, name: str) -> dict[str, Any]:
        """The description `add_usb` takes, read back from the tree (with its `devnum`), so a
        device (not a hub) of any host tree can be unplugged and plugged in again."""
        real = Path(os.path.realpath(self.p("/sys/bus/usb/devices") / name))

        def attr(d: Path, key: str) -> str | None:
            try:
                return (d / key).read_text().strip()
            except OSError:
                return None

        def driver(d: Path) -> str | None:
            return (
                os.path.basename(os.readlink(d / "driver")) if (d / "driver").is_symlink() else None
            )

        desc: dict[str, Any] = {"port": name, "driver": driver(real)}
        for key, a in (
            ("vendor", "idVendor"),
            ("product", "idProduct"),
            ("class", "bDeviceClass"),
            ("subclass", "bDeviceSubClass"),
            ("protocol", "bDeviceProtocol"),
            ("bcd_device", "bcdDevice"),
            ("devnum", "devnum"),
            ("speed", "speed"),
            ("maxchild", "maxchild"),
            ("removable", "removable"),
            ("manufacturer", "manufacturer"),
            ("product_name", "product"),
            ("serial", "serial"),
        ):
            if (v := attr(real, a)) is not None:
                desc[key] = v
        interfaces = []
        for idir in sorted(real.glob(f"{'*-0' if name.startswith('usb') else name}:1.*")):
            intf = {
                "class": attr(idir, "bInterfaceClass"),
                "subclass": attr(idir, "bInterfaceSubClass"),
                "protocol": attr(idir, "bInterfaceProtocol"),
            }
            if d := driver(idir):
                intf["driver"] = d
            interfaces.append(intf)
        desc["interfaces"] = interfaces
        return desc

    def remove_usb(self, name: str) -> None:
        """Unplug: remove the device, its interfaces, children, bus links and /dev node."""
        link = self.p("/sys/bus/usb/devices") / name
        real = Path(os.path.realpath(link))
        devname = None
        try:
            for line in (real / "uevent").read_text().splitlines():
                if line.startswith("DEVNAME="):
                    devname = line.split("=", 1)[1]
        except OSError:
            pass
        # the kernel removes the bus links first, then the directories
        busdir = self.p("/sys/bus/usb/devices")
        for entry in list(busdir.iterdir()):
            if entry.is_symlink():
                target = os.path.realpath(entry)
                if target == str(real) or target.startswith(str(real) + "/"):
                    entry.unlink()
        shutil.rmtree(real, ignore_errors=True)
        if devname:
            (self.p("/dev") / devname).unlink(missing_ok=True)

    # ------------------------------------------------------------------ PCI

    def add_pci(self, dev: Mapping[str, Any], parent: str | None = None) -> Path:
        """Create one PCI function (and its SR-IOV virtual functions) from a description."""
        addr = str(dev["address"])
        domain_bus = addr.rsplit(":", 1)[0].split(":")
        host_bridge = f"pci{domain_bus[0]}:{domain_bus[1] if parent is None else '00'}"
        par = dev.get("parent", parent)
        if par:
            base = self.p("/sys/bus/pci/devices") / par
            real = (
                Path(os.path.realpath(base)) / addr
                if base.is_symlink()
                else self.p(f"/sys/devices/{host_bridge}/{par}/{addr}")
            )
        else:
            real = self.p(f"/sys/devices/{dev.get('host_bridge', host_bridge)}/{addr}")
        real.mkdir(parents=True, exist_ok=True)
        missing = set(dev.get("missing", ()))
        cls = _hex(dev["class"], 6)
        attrs = {
            "class": f"0x{cls}",
            "vendor": f"0x{_hex(dev['vendor'], 4)}",
            "device": f"0x{_hex(dev['device'], 4)}",
            "subsystem_vendor": f"0x{_hex(dev.get('subsystem_vendor', dev['vendor']), 4)}",
            "subsystem_device": f"0x{_hex(dev.get('subsystem_device', '0000'), 4)}",
            "revision": f"0x{_hex(dev.get('revision', '01'), 2)}",
            "numa_node": str(dev.get("numa_node", -1)),
            "enable": "1",
            "irq": str(dev.get("irq", 16)),
            "local_cpulist": str(dev.get("local_cpulist", "0-7")),
        }
        vfs = dev.get("vfs") or []
        if "sriov_totalvfs" in dev or vfs:
            attrs["sriov_totalvfs"] = str(dev.get("sriov_totalvfs", len(vfs)))
            attrs["sriov_numvfs"] = str(len(vfs))
        for k, v in attrs.items():
            if k not in missing:
                _write(real / k, v + "\n")
        for k, v in (dev.get("extra_attrs") or {}).items():
            _write(real / k, str(v) + "\n")
        drv_name = dev.get("driver")
        uevent = [
            f"PCI_CLASS={int(cls, 16):X}",
            f"PCI_ID={_hex(dev['vendor'], 4).upper()}:{_hex(dev['device'], 4).upper()}",
            f"PCI_SLOT_NAME={addr}",
        ]
        if drv_name:
            uevent.insert(0, f"DRIVER={drv_name}")
            drv = self.p(f"/sys/bus/pci/drivers/{drv_name}")
            drv.mkdir(parents=True, exist_ok=True)
            _rel_symlink(real / "driver", drv)
            _rel_symlink(drv / addr, real)
            self.add_module(drv, dev)
        _write(real / "uevent", "\n".join(uevent) + "\n")
        _rel_symlink(real / "subsystem", self.p("/sys/bus/pci"))
        if dev.get("iommu_group") is not None:
            grp = self.p(f"/sys/kernel/iommu_groups/{dev['iommu_group']}")
            (grp / "devices").mkdir(parents=True, exist_ok=True)
            _write(grp / "type", "DMA\n")
            _rel_symlink(real / "iommu_group", grp)
            _rel_symlink(grp / "devices" / addr, real)
        for child in dev.get("class_devices") or ():
            # e.g. {class: apex, name: apex_0, devname: apex_0, major: 120, minor: 0,
            #       attributes: {temp: 45300}}; linked from /sys/class/<class>/<name>
            cdir = real / child["class"] / child["name"]
            devname = child.get("devname", child["name"])
            major, minor = child.get("major", 240), child.get("minor", 0)
            _write(cdir / "dev", f"{major}:{minor}\n")
            _write(cdir / "uevent", f"MAJOR={major}\nMINOR={minor}\nDEVNAME={devname}\n")
            # the class device's own attributes (apex: temp, trip_point0_temp, ...) as text
            for attr, value in (child.get("attributes") or {}).items():
                _write(cdir / attr, f"{value}\n")
            cls = self.p(f"/sys/class/{child['class']}")
            cls.mkdir(parents=True, exist_ok=True)
            _rel_symlink(cls / child["name"], cdir)
            node = self.p("/dev") / devname
            node.parent.mkdir(parents=True, exist_ok=True)
            node.touch()
        _rel_symlink(self.p("/sys/bus/pci/devices") / addr, real)
        for i, vf in enumerate(vfs):
            vf_desc = {
                "class": dev["class"],
                "vendor": dev["vendor"],
                "subsystem_vendor": dev.get("subsystem_vendor", dev["vendor"]),
                "numa_node": dev.get("numa_node", -1),
                **vf,
            }
            vf_real = self.add_pci(vf_desc, parent=dev.get("parent", parent))
            _rel_symlink(real / f"virtfn{i}", vf_real)
            _rel_symlink(vf_real / "physfn", real)
        return real

    def add_module(self, drv: Path, dev: Mapping[str, Any]) -> None:
        """A driver built as a module: `drivers/<driver>/module` -> `/sys/module/<module>`,
        with its `version` file when the module declares one (MODULE_VERSION). The module's
        name is not the driver's: hailort's `hailo_pci` registers the PCI driver `hailo`,
        its `hailo1x_pci` the driver `hailo1x` (common/pcie_common.h, DRIVER_NAME). A
        description without `module` or `module_version` is a built-in driver: no link."""
        name, version = dev.get("module"), dev.get("module_version")
        if not (name or version):
            return
        mod = self.p(f"/sys/module/{name or drv.name}")
        mod.mkdir(parents=True, exist_ok=True)
        if version is not None:
            _write(mod / "version", f"{version}\n")
        _rel_symlink(mod / "drivers" / f"pci:{drv.name}", drv)
        if not (drv / "module").is_symlink():
            _rel_symlink(drv / "module", mod)

    def remove_pci(self, addr: str) -> None:
        link = self.p("/sys/bus/pci/devices") / addr
        real = Path(os.path.realpath(link))
        link.unlink(missing_ok=True)
        shutil.rmtree(real, ignore_errors=True)


def write_usb(builder: HostBuilder, usb: Mapping[str, Any]) -> None:
    """`usb:` section: `{controller: <sysfs path>, devices: [...]}` or a list of those."""
    sections = usb if isinstance(usb, list) else [usb]
    for sec in sections:
        ctrl = sec.get("controller", USB_CTRL_DEFAULT)
        # parents first, whatever order the description lists them in
        devices = sorted(sec.get("devices", ()), key=lambda d: (str(d["port"]).count("."), 0))
        roots = [d for d in devices if str(d["port"]).startswith("usb")]
        others = [d for d in devices if not str(d["port"]).startswith("usb")]
        for d in [*roots, *sorted(others, key=lambda d: len(str(d["port"])))]:
            builder.add_usb(d, ctrl)


def write_pci(builder: HostBuilder, pci: list[Mapping[str, Any]]) -> None:
    for d in pci:
        builder.add_pci(d)


# ---------------------------------------------------------------------- synthetic nodes
# Large generated descriptions for scale tests and benchmarks (build with build_host()).

_USB_KINDS: tuple[dict[str, Any], ...] = (
    {
        "vendor": "1a6e",
        "product": "089a",
        "class": "00",
        "interfaces": [{"class": "fe", "subclass": "01", "protocol": "02"}],
    },
    {
        "vendor": "0403",
        "product": "6010",
        "class": "00",
        "interfaces": [
            {"class": "ff", "driver": "ftdi_sio"},
            {"class": "ff", "driver": "ftdi_sio"},
        ],
    },
    {
        "vendor": "046d",
        "product": "c31c",
        "class": "00",
        "interfaces": [{"class": "03", "driver": "usbhid"}],
    },
    {
        "vendor": "046d",
        "product": "0825",
        "class": "ef",
        "serial": "8F2E2A10",
        "interfaces": [{"class": "0e", "driver": "uvcvideo"}, {"class": "01"}],
    },
    {
        "vendor": "0781",
        "product": "5583",
        "class": "00",
        "serial": "4C530001",
        "interfaces": [
            {"class": "08", "subclass": "06", "protocol": "50", "driver": "usb-storage"}
        ],
    },
)


def synthetic_usb(n: int, per_bus: int = 100) -> dict[str, Any]:
    """`n` USB devices (plus one root hub per `per_bus` devices) of a few realistic kinds."""
    devices: list[dict[str, Any]] = []
    buses = max(1, -(-n // per_bus))
    for b in range(1, buses + 1):
        devices.append(
            {
                "port": f"usb{b}",
                "vendor": "1d6b",
                "product": "0002",
                "class": "09",
                "interfaces": [{"class": "09", "driver": "hub"}],
            }
        )
    for i in range(n):
        b, port = i // per_bus + 1, i % per_bus + 1
        devices.append(
            {"port": f"{b}-{port}", "devnum": port + 1, **_USB_KINDS[i % len(_USB_KINDS)]}
        )
    return {
        "name": f"synthetic-usb-{n}",
        "usb": {"controller": USB_CTRL_DEFAULT, "devices": devices},
    }


def synthetic_pci(n: int, vfs_per_pf: int = 7) -> dict[str, Any]:
    """`n` PCI functions: SR-IOV physical functions, each followed by its virtual functions,
    mixing co-processors (0b40, labelled) and NICs (0200, not labelled by default)."""
    pci: list[dict[str, Any]] = []
    i = 0
    group = vfs_per_pf + 1
    while i < n:

        def addr(k: int) -> str:
            return f"{k // 65536:04x}:{k // 256 % 256:02x}:{k // 8 % 32:02x}.{k % 8}"

        nic = (i // group) % 2 == 1
        pf: dict[str, Any] = {
            "address": addr(i),
            "class": "020000" if nic else "0b4000",
            "vendor": "8086",
            "device": "1572" if nic else "37c8",
            "subsystem_device": "0001",
            "driver": "i40e" if nic else "c6xx",
            "numa_node": (i // group) % 2,
            "sriov_totalvfs": 64,
            "vfs": [
                {
                    "address": addr(i + j),
                    "device": "154c" if nic else "37c9",
                    "driver": "iavf" if nic else "c6xxvf",
                }
                for j in range(1, min(group, n - i))
            ],
        }
        pci.append(pf)
        i += group
    return {"name": f"synthetic-pci-{n}", "pci": pci}
