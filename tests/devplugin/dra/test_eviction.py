"""`--evict-after`: an absent device's taint turns NoExecute after the hold plus the duration
counted from when the inventory found it missing (a scan the front-end asks the inventory for
at the deadline, nothing else happening then), stays put across rewrites, and goes when the device
returns; within the hold (a re-enumeration) it never does. The slice is what the DRA front-end
of a running App publishes (over the stand-in slice API; the real API server's acceptance of
the NoExecute taint is tested in tests/k8s/test_dra_apiserver.py, the eviction itself by the
real node's end-to-end)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgefd.core.hostroot import HostRoot
from edgefd.core.service import WatchSettings
from edgefd.devplugin.app import App, Options
from edgefd.devplugin.dra import slices
from edgefd.devplugin.dra.eviction import NEVER, Eviction
from edgefd.devplugin.dra.frontend import DraFrontend, DraOptions
from edgefd.inventory.resources import default_config
from tests.devplugin.dra.fakeapi import FakeSliceApi
from tests.devplugin.dra.test_cdi import coral
from tests.devplugin.test_one_source import short_dir  # noqa: F401
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
# last seen at 1000, found missing by the scan at 1010
GONE = coral(
    present=False, reason="unplugged from port 2-1", last_seen=1000.0, missing_since=1010.0
)


def test_deadline_is_missing_since_plus_hold_plus_the_duration() -> None:
    ev = Eviction(after=2.0, hold=3.0)
    assert ev.deadline(GONE) == 1015.0  # from when it was found missing, not its last_seen
    assert not ev.due(GONE, 1014.9) and ev.due(GONE, 1015.0)
    assert ev.deadline(coral()) is None  # present: never
    assert ev.deadline(GONE._replace(missing_since=None)) is None  # not known missing: never
    assert NEVER.deadline(GONE) is None  # off by default
    assert ev.next_deadline([GONE, coral()], 1011.0) == 1015.0
    assert ev.next_deadline([GONE], 1016.0) is None  # past: nothing to wait for


def test_the_taint_turns_noexecute_with_its_deadline_as_time() -> None:
    ev = Eviction(after=2.0, hold=3.0)
    [before] = slices.taints(GONE, ev, 1014.0)
    assert before["effect"] == "NoSchedule"
    [after] = slices.taints(GONE, ev, 1015.5)
    assert after == {
        "key": "edgefd.io/unhealthy",
        "value": "unplugged",
        "effect": "NoExecute",
        "timeAdded": "1970-01-01T00:16:55Z",  # the deadline, so tolerationSeconds count from it
    }
    assert slices.taints(GONE, ev, 1015.5) == slices.taints(GONE, ev, 9999.0)
    present_unusable = coral(reason="device node /dev/bus/usb/002/003 is missing")
    assert slices.taints(present_unusable, ev, 1e12)[0]["effect"] == "NoSchedule"


def _effect(api: FakeSliceApi, name: str) -> str | None:
    taints = api.devices().get(name, {}).get("taints") or [{}]
    return taints[0].get("effect")


def test_an_unplugged_device_is_tainted_noexecute_after_hold_and_duration(
    short_dir: Path,  # noqa: F811
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

    def make(cfg, links, m) -> DraFrontend:  # type: ignore[no-untyped-def]
        fe.append(DraFrontend(dra_opts, cfg, links, api, m))
        return fe[0]

    app = App(opts, default_config(), dra=make)
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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--evict-after", "2s"], "--evict-after needs --api dra or both"),
        (["--api", "dra", "--node-name", "n", "--evict-after", "soon"], "is not a duration"),
    ],
)
def test_evict_after_usage(args: list[str], message: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "edgefd.devplugin", *args, "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and message in out.stderr, out.stderr
