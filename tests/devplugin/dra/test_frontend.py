"""The DRA front-end (frontend.py) in a running devplugin over the stand-in slice API
(fakeapi.FakeSliceApi): with `--evict-after`, an unplugged device's taint turns from
NoSchedule to NoExecute after the inventory's hold plus the duration counted from the unplug
(a scan the front-end asks the inventory for at the deadline, nothing else happening then),
stays put across rewrites, and goes when the device returns. The real API server's acceptance
of the NoExecute taint is tested in tests/k8s/test_dra_apiserver.py, the eviction itself by
the real node's end-to-end."""

from __future__ import annotations

import time
from pathlib import Path

from edgefd.core.hostroot import HostRoot
from edgefd.core.service import WatchSettings
from edgefd.devplugin.app import Options
from edgefd.devplugin.dra.frontend import DraFrontend, DraOptions
from edgefd.devplugin.resources import default_config
from tests.devplugin.dra.fakeapi import FakeSliceApi
from tests.devplugin.running import Running
from tests.fixturegen import HostBuilder, build_host
from tests.helpers import wait_until

CORAL_BOOT = {
    "port": "2-1",
    "vendor": "1a6e",
    "product": "089a",
    "class": "00",
    "speed": 5000,
    "interfaces": [{"class": "fe", "subclass": "01", "protocol": "02"}],
}


def _effect(api: FakeSliceApi, name: str) -> str | None:
    taints = api.devices().get(name, {}).get("taints") or [{}]
    return taints[0].get("effect")


def test_an_unplugged_device_is_tainted_noexecute_after_hold_and_duration(
    short_dir: Path,
) -> None:
    host = build_host("rpi4-coral", short_dir / "host", devicetree=False)
    api = FakeSliceApi()
    dra_opts = DraOptions(
        node="n1", kubelet_dir=str(short_dir / "k"), cdi_dir=str(short_dir / "c"), evict_after=0.5
    )
    opts = Options(
        plugin_dir=str(short_dir / "dp"),
        host=HostRoot.of(host),
        links_dir=str(short_dir / "links"),
        api="dra",
        settings=WatchSettings(rescan_interval=3600),
    )
    fe: list[DraFrontend] = []

    def make(cfg, links, m, inv, dirs) -> DraFrontend:  # type: ignore[no-untyped-def]
        fe.append(DraFrontend(dra_opts, cfg, links, api, m, inv, dirs))
        return fe[0]

    app = Running(opts, default_config(), dra=make)
    try:
        app.start()
        wait_until(lambda: "coral-usb-2-1" in api.devices())
        hold = app.inventory.hold
        # no scan meanwhile (rescans hourly): its last_seen is older than the unplug by this,
        # and the eviction must still count from the unplug
        time.sleep(1.5)
        gone = time.time()
        HostBuilder(host).remove_usb("2-1")
        wait_until(lambda: _effect(api, "coral-usb-2-1") == "NoSchedule", timeout=3)
        wait_until(lambda: _effect(api, "coral-usb-2-1") == "NoExecute", timeout=hold + 3)
        took = time.time() - gone
        assert hold + 0.5 - 0.1 <= took <= hold + 0.5 + 1.0, took
        assert fe[0].tainting.evicting == {"coral-usb-2-1"}
        gen = api.generation()
        time.sleep(0.3)
        assert api.generation() == gen  # the deadline is fixed: no rewrite while it is away

        HostBuilder(host).add_usb(CORAL_BOOT)
        wait_until(lambda: _effect(api, "coral-usb-2-1") is None, timeout=3)
        assert fe[0].tainting.evicting == set()
    finally:
        app.stop()


def test_after_a_restart_a_device_away_at_the_first_scan_gets_the_whole_hold(
    short_dir: Path,
) -> None:
    """Issue 30 item 3: the state file says the Coral has been missing for an hour (the last
    run stopped while it was away); the plugin starts while it is away again (loading its
    firmware). The NoExecute taint came 0.9 s after the start, dated in the past, and the
    eviction controller evicted a pod whose Coral was back 2.7 s later; now it comes no
    earlier than the hold plus `--evict-after` after the start, dated then."""
    from edgefd.devplugin.links import STATE_FILE
    from edgefd.inventory import state
    from tests.devplugin.devices import coral

    host = build_host("rpi4-coral", short_dir / "host", devicetree=False)
    HostBuilder(host).remove_usb("2-1")
    links = short_dir / "links"
    links.mkdir()
    now = time.time()
    old = coral(
        port="2-1",
        present=False,
        resources=("edgefd.io/coral-usb",),
        last_seen=now - 3600,
        missing_since=now - 3000,
    )
    state.save(links / STATE_FILE, [old])
    api = FakeSliceApi()
    dra_opts = DraOptions(
        node="n1", kubelet_dir=str(short_dir / "k"), cdi_dir=str(short_dir / "c"), evict_after=0.5
    )
    opts = Options(
        plugin_dir=str(short_dir / "dp"),
        host=HostRoot.of(host),
        links_dir=str(links),
        api="dra",
        settings=WatchSettings(rescan_interval=3600),
    )
    app = Running(
        opts,
        default_config(),
        dra=lambda cfg, lk, m, inv, dirs: DraFrontend(dra_opts, cfg, lk, api, m, inv, dirs),
    )
    start = time.time()
    try:
        app.start()
        wait_until(lambda: _effect(api, "coral-usb-2-1") == "NoSchedule", timeout=5)
        hold = app.inventory.hold
        time.sleep(hold)  # well past the 0.9 s the state file's times gave
        assert _effect(api, "coral-usb-2-1") == "NoSchedule"
        wait_until(lambda: _effect(api, "coral-usb-2-1") == "NoExecute", timeout=hold + 3)
        assert time.time() - start >= hold + 0.5
        [taint] = api.devices()["coral-usb-2-1"]["taints"]
        added = time.mktime(time.strptime(taint["timeAdded"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
        assert added >= int(start + hold + 0.5) - 1  # dated at this run's deadline, not the past
    finally:
        app.stop()
