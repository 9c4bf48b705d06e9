"""`devplugin --api dra` start-up against the real API server when its state on the host is
not what it wrote. Absurd last-seen times still publish the slice. A FIFO (or a symlink to
/dev/zero, a huge file) at the checkpoint, at the inventory's state file, at a `.known.json`,
at claim-named files in `--cdi-dir`, never blocks start-up (the slices are published, every
such file is left alone or moved aside); a FIFO, a directory or a device node under either
release's claim spec name is never opened, and the plugin registers; SIGTERM at any point
of start-up ends the process, exit 0, within a bounded time."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from edgefd.bus.key import DeviceKey, DevNode
from edgefd.inventory import state
from edgefd.inventory.device import Device
from tests.devplugin.dra.peer import ROOT, Api, DraPlugin, start
from tests.fixturegen import build_host
from tests.helpers import wait_until

pytestmark = pytest.mark.realpeer

START_S = 20.0  # /metrics up and the first slice, on a loaded 2-core machine
STOP_S = 10.0


def plant(path: Path, what: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if what == "fifo":
        os.mkfifo(path)
    elif what == "symlink":
        path.symlink_to("/dev/zero")
    else:
        with open(path, "wb") as fh:
            fh.truncate(256 << 20)


@pytest.mark.parametrize("what", ["fifo", "symlink", "huge"])
@pytest.mark.parametrize("state", ["devices.json", ".known.json"])
def test_state_that_is_not_a_regular_file_never_blocks_start_up(
    api: Api, node: str, plugins: list, tmp_path: Path, what: str, state: str
) -> None:
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    work = Path(tempfile.mkdtemp(prefix="dra-"))  # unix socket paths: at most 107 bytes
    plugin = work / "kubelet" / "plugins" / "edgefd.io"
    links = plugin / "edgefd-links"
    planted = [
        plugin / "checkpoint.json",
        links / "devices.json"
        if state == "devices.json"
        else links / "edgefd.io_coral-usb" / state,
        work / "cdi" / f"edgefd.io-claim_{uuid.uuid4()}.json",
        work / "cdi" / f"edgefd.io-{uuid.uuid4()}.json",
    ]
    for p in planted:
        plant(p, what)
    t0 = time.monotonic()
    p = start(plugins, api, host, node, work=work)
    assert time.monotonic() - t0 < START_S
    assert "coral-usb-2-1" in api.devices(node)
    log = p.stderr()
    assert "checkpoint.json is unreadable" in log and "moved to" in log
    for cdi_file in planted[2:]:  # not ours to read or remove
        assert os.path.lexists(cdi_file)
    t0 = time.monotonic()
    assert p.stop(timeout=STOP_S) == 0
    assert time.monotonic() - t0 < STOP_S


def test_junk_under_claim_spec_names_is_left_alone_and_the_plugin_registers(
    api: Api, node: str, plugins: list, tmp_path: Path
) -> None:
    """Issue 30 item 9: a FIFO under the old name (`edgefd.io-<UID>.json`) of a claim the
    checkpoint holds, a directory and a device node under both names: a warning each, none
    opened or removed, the slices published, the registration socket served."""
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    work = Path(tempfile.mkdtemp(prefix="dra-"))
    plugin = work / "kubelet" / "plugins" / "edgefd.io"
    plugin.mkdir(parents=True)
    uid = str(uuid.uuid4())
    held = {"uid": uid, "namespace": "default", "name": "c", "devices": []}
    (plugin / "checkpoint.json").write_text(
        json.dumps({"version": 1, "node": node, "claims": [held]})
    )
    cdi = work / "cdi"
    cdi.mkdir()
    fifo = cdi / f"edgefd.io-{uid}.json"
    os.mkfifo(fifo)
    junk = [fifo]
    for prefix in ("edgefd.io-", "edgefd.io-claim_"):
        (cdi / f"{prefix}{uuid.uuid4()}.json").mkdir()
        device = cdi / f"{prefix}{uuid.uuid4()}.json"
        os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        junk += [cdi / f"{prefix}{uuid.uuid4()}.json", device]
    p = start(plugins, api, host, node, work=work)
    assert "coral-usb-2-1" in api.devices(node)
    wait_until(
        lambda: list((work / "kubelet" / "plugins_registry").glob("edgefd.io-reg-*.sock")),
        10,
        0.05,
        "the registration socket",
    )
    log = p.stderr()
    assert f"{fifo}: a FIFO, not a regular file, under a claim spec's name" in log
    assert log.count("not a regular file, under a claim spec's name") == 5
    assert len(list(cdi.glob("edgefd.io-*.json"))) == 5 and "Traceback" not in log
    assert p.stop(timeout=STOP_S) == 0


def test_sigterm_while_start_up_is_blocked_ends_it(
    api: Api, node: str, plugins: list, tmp_path: Path
) -> None:
    """A kubeconfig named on the command line may be a pipe (`--kubeconfig <(...)`), so it is
    read to its end; a writer that never comes blocks start-up, and SIGTERM still ends it."""
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    fifo = tmp_path / "kubeconfig"
    os.mkfifo(fifo)
    p = DraPlugin(host, node, str(fifo), work=Path(tempfile.mkdtemp(prefix="dra-")))
    plugins.append(p)
    with open(p.log, "ab") as fh:
        p.proc = subprocess.Popen(p.args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=fh)
    wait_until(lambda: _blocked_in_fifo_open(p.proc.pid), 20, 0.05, "the kubeconfig open")
    t0 = time.monotonic()
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(STOP_S) == 0, p.stderr()
    assert time.monotonic() - t0 < STOP_S
    assert "SIGTERM during start-up: stopping" in p.stderr()


@pytest.mark.parametrize("delay", [0.3, 0.8, 1.3, 2.0, 3.0])
def test_sigterm_at_any_point_of_start_up_ends_it(
    api: Api, node: str, plugins: list, tmp_path: Path, delay: float
) -> None:
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    p = DraPlugin(host, node, api.kubeconfig, work=Path(tempfile.mkdtemp(prefix="dra-")))  # type: ignore[attr-defined]
    plugins.append(p)
    with open(p.log, "ab") as fh:
        p.proc = subprocess.Popen(p.args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=fh)
    time.sleep(delay)
    p.proc.send_signal(signal.SIGTERM)
    # before the interpreter has set up its handlers the default action ends it (-15)
    assert p.proc.wait(STOP_S) in (0, -signal.SIGTERM), p.stderr()
    assert "Traceback" not in p.stderr()


def _blocked_in_fifo_open(pid: int) -> bool:
    """Whether the process waits in open() for a FIFO's writer (the kernel's wait_for_partner)."""
    with open(f"/proc/{pid}/wchan") as fh:
        return fh.read().strip() == "wait_for_partner"


def test_absurd_last_seen_times_in_the_state_still_publish_slices(
    api: Api, node: str, plugins: list, tmp_path: Path
) -> None:
    """Issue 22 item 6: a state file from a clock that was wrong (1e300, 4e11: a Pi without
    an RTC, a bad NTP step) or garbage (negative, NaN, a string): the far-future times count
    as now (the devices stay known, tainted, with a time the API server takes), the garbage
    is dropped, one warning each, and the node's slice is published."""
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    work = Path(tempfile.mkdtemp(prefix="dra-"))
    links = work / "kubelet" / "plugins" / "edgefd.io" / "edgefd-links"
    links.mkdir(parents=True)
    times: dict[str, object] = {"2-2": 1e300, "2-3": 4e11, "2-4": -1.0, "2-5": "yesterday"}
    entries = []
    for port, t in times.items():
        d = Device(
            name=f"coral-usb-{port}",
            key=DeviceKey("usb", port),
            model="coral-usb",
            kind="edgetpu",
            state="runtime",
            ids="18d1:9302",
            nodes=(DevNode("/dev/bus/usb/002/009", "189:136"),),
            resources=("edgefd.io/coral-usb",),
            present=False,
        )
        entries.append({**state.device_to_json(d), "last_seen": t})
    nan = {**entries[0], "name": "coral-usb-2-6", "place": "2-6", "last_seen": float("nan")}
    (links / "devices.json").write_text(json.dumps({"version": 1, "devices": [*entries, nan]}))
    p = start(plugins, api, host, node, work=work)
    devices = wait_until(lambda: api.devices(node), 10)
    assert sorted(devices) == ["coral-usb-2-1", "coral-usb-2-2", "coral-usb-2-3", "ncs2-1-1-1"]
    now = time.time()
    for name in ("coral-usb-2-2", "coral-usb-2-3"):
        [taint] = devices[name]["taints"]
        added = datetime.fromisoformat(taint["timeAdded"].replace("Z", "+00:00")).timestamp()
        assert taint["value"] == "unplugged" and abs(added - now) < 600, taint
    log = p.stderr()
    assert "2 last-seen time(s) in the future" in log and "3 entries dropped" in log
    assert "Traceback" not in log
    assert p.stop(timeout=STOP_S) == 0
