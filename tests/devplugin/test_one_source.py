"""One device source: in the devplugin process, a hot-plug event reaches the kubelet's
ListAndWatch and the ResourceSlice through one inventory: one watcher of the buses (the one
uevent subscriber), one scan per change, and each scan's snapshot handed to both front-ends
(issue 19, "Done when")."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import edgefd.runtime.watch as watch_mod
from edgefd.bus import pci, usb
from edgefd.bus.enumerate import BusReader
from edgefd.core.hostroot import HostRoot
from edgefd.core.service import WatchSettings
from edgefd.devplugin.app import App, Options
from edgefd.devplugin.dra.frontend import DraFrontend, DraOptions
from edgefd.devplugin.v1beta1.frontend import DevicePluginFrontend
from edgefd.inventory.resources import default_config
from tests.devplugin.dra.fakeapi import FakeSliceApi
from tests.devplugin.test_grpc import CORAL, FakeKubelet
from tests.fixturegen import HostBuilder, build_host
from tests.helpers import wait_until


@pytest.fixture
def short_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="one-"))  # unix socket paths are limited to 107 bytes
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


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
    app = App(
        opts,
        default_config(),
        dra=lambda cfg, links, m: DraFrontend(dra_opts, cfg, links, api, m),
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
        assert len(bus_watchers) == 1 and bus_watchers[0].uevent_subsystems == ("usb", "pci")
        # every scan's snapshot went to both front-ends, once each
        assert got["v1beta1"] == got["dra"] == list(range(1, after + 1))
    finally:
        app.stop()
        kubelet.stop()
