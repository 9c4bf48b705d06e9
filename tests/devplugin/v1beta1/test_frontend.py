"""The v1beta1 front-end (frontend.py) in a running devplugin, against the stand-in kubelet
(tests/devplugin/kubelet.py): which resources it serves and registers (only those with a
device: no `edgefd.io/hailo: 0`), that a hot-plug reaches the kubelet's ListAndWatch within a
second with the full list and only on a change, and what it counts and reports (the
allocation metrics, /readyz once every served resource is registered). One resource's
registration lifecycle is test_resource.py's, the gRPC service's behaviour test_server.py's."""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from edgefd.devplugin.api import deviceplugin_pb2 as pb
from edgefd.devplugin.v1beta1.resource import socket_name
from tests.devplugin.kubelet import FakeKubelet
from tests.devplugin.running import Running
from tests.fixturegen import HostBuilder
from tests.helpers import wait_until

CORAL = "edgefd.io/coral-usb"


def test_registers_every_resource_with_a_device_and_serves_inside_register(
    plugin: Running, kubelet: FakeKubelet, plugin_dir: Path
) -> None:
    names = [CORAL, "edgefd.io/ncs2"]  # the node has a device of these, none of the others
    wait_until(lambda: all(kubelet.last(n) is not None for n in names))
    assert kubelet.last(CORAL) == [("coral-usb-2-1", "Healthy")]
    assert kubelet.last("edgefd.io/ncs2") == [("ncs2-1-1-1", "Healthy")]
    time.sleep(0.3)
    assert kubelet.last("edgefd.io/hailo") is None  # no device: not registered, no `hailo: 0`
    assert not kubelet.options[CORAL].get_preferred_allocation_available
    endpoints = {e for _, _, e in kubelet.registrations}
    assert endpoints == {socket_name(n) for n in names}
    assert all((plugin_dir / e).is_socket() for e in endpoints)


def test_allocate_and_unknown_ids(plugin: Running, kubelet: FakeKubelet, plugin_dir: Path) -> None:
    wait_until(lambda: kubelet.last(CORAL))
    stub = kubelet.stub(CORAL)
    resp = stub.Allocate(
        pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=["coral-usb-2-1"])]
        )
    )
    [cr] = resp.container_responses
    assert cr.envs["EDGEFD_CORAL_USB_DEVICES"] == "coral-usb-2-1"
    [spec] = cr.devices
    link = plugin_dir / "links" / "edgefd.io_coral-usb" / "coral-usb-2-1" / "0"
    assert spec.host_path == str(link)
    assert os.readlink(link).startswith("/dev/bus/usb/002/")  # a host path, not under the root
    with pytest.raises(grpc.RpcError) as e:
        stub.Allocate(
            pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=["coral-usb-7-7"])]
            )
        )
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert "unknown device ID(s) coral-usb-7-7" in e.value.details()
    # metrics reflect it
    port = plugin.port  # type: ignore[attr-defined]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    assert 'edgefd_devplugin_allocations_total{resource="edgefd.io/coral-usb"} 1' in text
    assert 'edgefd_devplugin_allocate_errors_total{resource="edgefd.io/coral-usb"} 1' in text
    assert 'edgefd_devplugin_devices{health="Healthy",resource="edgefd.io/coral-usb"} 1' in text
    # ready once every resource is registered (under load the last ones take a moment)
    served = [rp for rp in plugin.v1.resources.values() if rp.started]
    assert served and len(served) < len(plugin.v1.resources)  # not the ones with no device
    wait_until(lambda: all(rp.registered.is_set() for rp in served))
    ok = urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz").read().decode()
    assert "registered" in ok


def test_unplug_replug_and_reenumeration(
    plugin: Running, kubelet: FakeKubelet, host: Path, plugin_dir: Path
) -> None:
    wait_until(lambda: kubelet.last(CORAL))
    hb = HostBuilder(host)
    link = plugin_dir / "links" / "edgefd.io_coral-usb" / "coral-usb-2-1" / "0"
    t0 = time.monotonic()
    hb.remove_usb("2-1")
    wait_until(lambda: kubelet.last(CORAL) == [("coral-usb-2-1", "Unhealthy")], timeout=2)
    assert time.monotonic() - t0 < 1.0
    assert not os.path.lexists(link)  # no stale grant while it is away
    t0 = time.monotonic()
    hb.add_usb({"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 9})
    wait_until(lambda: kubelet.last(CORAL) == [("coral-usb-2-1", "Healthy")], timeout=2)
    assert time.monotonic() - t0 < 1.0
    assert os.readlink(link) == "/dev/bus/usb/002/009"
    # every message carries the full list, and only changes are sent
    with kubelet.lock:
        msgs = list(kubelet.lists[CORAL])
    assert msgs == [
        [("coral-usb-2-1", "Healthy")],
        [("coral-usb-2-1", "Unhealthy")],
        [("coral-usb-2-1", "Healthy")],
    ]
