"""The devplugin process put together (app.py): the inventory it makes of a sample host and
what each resource selects there (`make_inventory`: both buses, the catalogue, the resources'
selectors; one name per device through re-enumeration, a second bus entry, a serial), one
inventory feeding both front-ends (a hot-plug reaches the kubelet's ListAndWatch and the
ResourceSlice through one scan, issue 19), and readiness: a configuration with no resources
is valid but never ready."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import edgefd.runtime.watch as watch_mod
from edgefd.bus import pci, usb
from edgefd.bus.enumerate import BusReader
from edgefd.bus.key import DeviceKey
from edgefd.core.hostroot import HostRoot
from edgefd.core.service import WatchSettings
from edgefd.devplugin.app import Options, make_inventory
from edgefd.devplugin.dra.frontend import DraFrontend, DraOptions
from edgefd.devplugin.resources import Config, Resource, default_config, parse_config
from edgefd.devplugin.v1beta1.advertised import health
from edgefd.devplugin.v1beta1.frontend import DevicePluginFrontend
from edgefd.inventory.device import Device
from edgefd.runtime.runner import serve_probes
from tests.devplugin.dra.fakeapi import FakeSliceApi
from tests.devplugin.kubelet import FakeKubelet
from tests.devplugin.running import Running
from tests.fixturegen import HostBuilder, build_host
from tests.helpers import wait_until

CORAL = "edgefd.io/coral-usb"
SLOW_RESCAN = WatchSettings(rescan_interval=30)

# --------------------------------------------------------------------------- what is selected


def _cfg(*resources: dict, **top: object) -> dict:
    return {"resources": list(resources), **top}


def _devices(root: Path, res: Resource) -> list[Device]:
    cfg = Config(resources=(res,))
    snap = make_inventory(Options("/nonexistent", HostRoot.of(root)), cfg).scan()
    return list(snap.of_resource(res.name))


def test_rpi4_coral_and_ncs2_in_boot_state(host: Path) -> None:
    by = default_config().by_name()
    [coral] = _devices(host, by["edgefd.io/coral-usb"])
    assert (coral.name, coral.state, coral.ids, health(coral)) == (
        "coral-usb-2-1",
        "boot",
        "1a6e:089a",
        "Healthy",
    )
    assert coral.devnodes[0].startswith("/dev/bus/usb/002/")
    [ncs2] = _devices(host, by["edgefd.io/ncs2"])
    assert (ncs2.name, ncs2.state) == ("ncs2-1-1-1", "boot")
    assert _devices(host, by["edgefd.io/coral-pcie"]) == []


def test_a_device_behind_two_bus_entries_is_one_device(host: Path) -> None:
    """Issue 11 item 10: a second sysfs name for the Coral (here one that sorts first) must
    neither advertise it twice nor give it a name from the wrong entry."""
    bus = host / "sys/bus/usb/devices"
    os.symlink("2-1", bus / "1-0")
    res = default_config().by_name()["edgefd.io/coral-usb"]
    assert [d.name for d in _devices(host, res)] == ["coral-usb-2-1"]


def test_reenumeration_keeps_the_name(host: Path) -> None:
    """Coral 1a6e:089a -> 18d1:9302 on the same port with a new devnum: same device name."""
    res = default_config().by_name()["edgefd.io/coral-usb"]
    [before] = _devices(host, res)
    hb = HostBuilder(host)
    hb.remove_usb("2-1")
    assert _devices(host, res) == []
    hb.add_usb({"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 7})
    [after] = _devices(host, res)
    assert after.name == before.name == "coral-usb-2-1"
    assert (after.state, after.ids) == ("runtime", "18d1:9302")
    assert after.devnodes == ("/dev/bus/usb/002/007",) != before.devnodes


def test_id_from_serial_follows_the_stick(host: Path) -> None:
    res = parse_config(
        _cfg({"name": "edgefd.io/ncs2", "accelerator": "ncs2", "id_from": "serial"}), "x"
    ).resources[0]
    [d] = _devices(host, res)
    assert d.name == "ncs2-sn-03e72485" and d.by_serial
    # a device without a serial falls back to its port
    coral = parse_config(
        _cfg({"name": "edgefd.io/c", "accelerator": "coral-usb", "id_from": "serial"}), "x"
    ).resources[0]
    assert [d.name for d in _devices(host, coral)] == ["coral-usb-2-1"]


def test_own_ids_of_a_catalogue_device_still_name_it_by_its_model(host: Path) -> None:
    """A resource that lists the Coral's boot ID by hand selects the same device as the
    default resource, under the same name: the catalogue says what it is."""
    res = parse_config(
        _cfg({"name": "example.com/tpu", "usb": [{"vendor": "1a6e", "product": "089a"}]}), "x"
    ).resources[0]
    [d] = _devices(host, res)
    assert (d.name, d.model, d.state) == ("coral-usb-2-1", "coral-usb", "boot")


def test_a_kind_selects_every_model_of_it(tmp_path: Path) -> None:
    root = build_host("x86-server", tmp_path / "x86", devicetree=False)
    res = parse_config(_cfg({"name": "example.com/tpu", "kind": "edgetpu"}), "x").resources[0]
    assert [d.name for d in _devices(root, res)] == ["coral-pcie-0000-02-00-0", "coral-usb-2-3"]


def test_missing_device_node_is_unhealthy(host: Path) -> None:
    res = default_config().by_name()["edgefd.io/coral-usb"]
    [d] = _devices(host, res)
    (host / d.devnodes[0].lstrip("/")).unlink()
    [d2] = _devices(host, res)
    assert health(d2) == "Unhealthy" and "missing" in d2.reason


def test_pci_coral_and_driverless_pci(tmp_path: Path) -> None:
    root = build_host("x86-server", tmp_path / "x86", devicetree=False)
    res = default_config().by_name()["edgefd.io/coral-pcie"]
    [d] = _devices(root, res)
    assert (d.name, d.devnodes, d.numa_node, health(d)) == (
        "coral-pcie-0000-02-00-0",
        ("/dev/apex_0",),
        0,
        "Healthy",
    )
    hb = HostBuilder(root)
    hb.remove_pci("0000:02:00.0")
    hb.add_pci(
        {
            "address": "0000:02:00.0",
            "class": "088000",
            "vendor": "1ac1",
            "device": "089a",
            "subsystem_vendor": "1ac1",
            "subsystem_device": "089a",
        }
    )
    [d] = _devices(root, res)
    assert health(d) == "Unhealthy" and "driver" in d.reason


def test_dev_glob_only_resource(tmp_path: Path) -> None:
    root = build_host("x86-server", tmp_path / "x86", devicetree=False)
    res = parse_config(_cfg({"name": "example.com/dri", "dev_globs": ["/dev/dri/render*"]}), "x")
    [d] = _devices(root, res.resources[0])
    assert d.devnodes == ("/dev/dri/renderD128",) and d.key == DeviceKey("dev", d.devnodes[0])
    assert d.name.startswith("dri-dri-renderd128-")  # upper case is lossy: a hash suffix


# --------------------------------------------------------------------------- one device source


def test_hot_plug_reaches_both_apis_through_one_scan(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = build_host("rpi4-coral", short_dir / "host", devicetree=False)
    scans = {"usb": 0, "pci": 0}
    for mod in (usb, pci):
        reader = mod.READER

        def counted(h: HostRoot, scan: Any = reader.scan, bus: str = reader.bus) -> Any:
            scans[bus] += 1
            return scan(h)

        monkeypatch.setattr(mod, "READER", BusReader(reader.bus, counted))
    bus_watchers: list[Any] = []
    real_start = watch_mod.Watcher.start

    def start(self: Any) -> Any:
        if self.uevent_subsystems:
            bus_watchers.append(self)
        return real_start(self)

    monkeypatch.setattr(watch_mod.Watcher, "start", start)
    got: dict[str, list[int]] = {"v1beta1": [], "dra": []}
    for name, cls in (("v1beta1", DevicePluginFrontend), ("dra", DraFrontend)):
        real = cls.on_snapshot

        def on_snapshot(self: Any, snap: Any, real: Any = real, name: str = name) -> None:
            got[name].append(snap.seq)
            real(self, snap)

        monkeypatch.setattr(cls, "on_snapshot", on_snapshot)

    plugin_dir = short_dir / "dp"
    plugin_dir.mkdir()
    kubelet = FakeKubelet(plugin_dir)
    api = FakeSliceApi()
    dra_opts = DraOptions(node="n1", kubelet_dir=str(short_dir / "k"), cdi_dir=str(short_dir / "c"))
    opts = Options(
        plugin_dir=str(plugin_dir),
        host=HostRoot.of(host),
        links_dir=str(short_dir / "links"),
        api="both",
        settings=WatchSettings(rescan_interval=3600),
    )
    app = Running(
        opts,
        default_config(),
        dra=lambda cfg, links, m, inv, dirs: DraFrontend(dra_opts, cfg, links, api, m, inv, dirs),
    )
    try:
        app.start()
        wait_until(lambda: kubelet.last(CORAL) == [("coral-usb-2-1", "Healthy")])
        wait_until(lambda: "coral-usb-2-1" in api.devices())
        before = app.inventory.scans
        assert scans == {"usb": before, "pci": before}

        HostBuilder(host).remove_usb("2-1")
        wait_until(lambda: kubelet.last(CORAL) == [("coral-usb-2-1", "Unhealthy")], timeout=3)
        wait_until(lambda: "taints" in api.devices()["coral-usb-2-1"], timeout=3)
        time.sleep(0.5)  # any late event would show up as another scan
        after = app.inventory.scans
        assert 1 <= after - before <= 2  # one change, one scan (a slow disk: a second burst)
        assert scans == {"usb": after, "pci": after}  # every scan is the inventory's
        # one watcher for the three buses (issue 31: uevents with SUBSYSTEM=platform too)
        subsystems = ("usb", "pci", "platform")
        assert len(bus_watchers) == 1 and bus_watchers[0].uevent_subsystems == subsystems
        # every scan's snapshot went to both front-ends, once each
        assert got["v1beta1"] == got["dra"] == list(range(1, after + 1))
    finally:
        app.stop()
        kubelet.stop()


# --------------------------------------------------------------------------- empty configuration


def test_a_device_two_resources_select_is_a_warning(
    host: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 46 item 7: two resources selecting one Coral advertise it twice (two pods may get
    it at once); said once when it is added, naming both, and not for a device one selects."""
    from edgefd.devplugin.app import Bookkeeping

    cfg = parse_config(
        _cfg(
            {"name": "edgefd.io/coral-a", "accelerator": "coral-usb"},
            {"name": "edgefd.io/coral-b", "usb": [{"vendor": "1a6e", "product": "089a"}]},
            {"name": "edgefd.io/ncs2", "accelerator": "ncs2"},
        ),
        "test",
    )
    opts = Options("/nonexistent", HostRoot.of(host))
    inventory = make_inventory(opts, cfg)
    Bookkeeping(opts, cfg, inventory)
    with caplog.at_level("WARNING", logger="edgefd.devplugin.app"):
        inventory.scan()  # its subscribers hear it, the device log among them
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert line.startswith(
        "device coral-usb-2-1 is selected by edgefd.io/coral-a and edgefd.io/coral-b: the "
        "device plugin advertises it under each"
    )


@pytest.mark.parametrize("text", ["", "resources: []\n", "forget_after: 60\n"])
def test_a_configuration_with_no_resources_warns_and_is_not_ready(
    host: Path, plugin_dir: Path, tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 11 item 10: valid YAML with no resources ran a plugin that served nothing, silently."""
    from edgefd.devplugin.resources import load_config

    cfg_path = tmp_path / "resources.yaml"
    cfg_path.write_text(text)
    with caplog.at_level("WARNING"):
        cfg = load_config(cfg_path)
    reason = f"{cfg_path}: no resources configured, so nothing is advertised to the kubelet"
    assert reason in caplog.text
    opts = Options(
        plugin_dir=str(plugin_dir),
        host=HostRoot.of(host),
        listen=("127.0.0.1", 0),
        settings=SLOW_RESCAN,
    )
    p = Running(opts, cfg).start()
    server = serve_probes(opts.listen, p.metrics, p.components)  # as the runner serves them
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/readyz")
        assert e.value.code == 503
        assert reason in e.value.read().decode()
    finally:
        server.stop()
        p.stop()


def test_cdi_specs_see_the_hosts_nodes_where_the_pod_mounts_them(tmp_path: Path) -> None:
    """The pod has the host's /dev at /host/dev: a spec's node group is read there, not from
    the container's own /dev (cdi.py node_group)."""
    host = HostRoot.of(tmp_path / "host")
    layout = Options(str(tmp_path / "plugins"), host, cdi_spec_dir=str(tmp_path / "cdi")).layout
    assert layout.host == host
