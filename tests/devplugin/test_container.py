"""What a container gets for its devices beyond their nodes, whichever API hands them out
(container.py): each resource's configured env, and `EDGEFD_<RESOURCE>_DEVICES` naming its
devices in order, each physical device once however often it is listed (replicas of a shared
device, a claim listing a device twice). The Allocate answer and the CDI specs that carry it
are v1beta1/test_allocate.py's and test_cdi.py's."""

from __future__ import annotations

from dataclasses import replace

from edgefd.devplugin.container import env
from tests.devplugin.devices import CORAL, PCIE, apex, coral


def test_each_resources_devices_once_in_order_with_its_env() -> None:
    usb = replace(CORAL, env=(("LIBEDGETPU", "1"),))
    pcie = replace(PCIE, env=(("APEX", "yes"),))
    second = coral(port="1-1.2")
    got = env([(coral(), usb), (second, usb), (coral(), usb), (apex(), pcie)])
    assert got == {
        "LIBEDGETPU": "1",
        "APEX": "yes",
        "EDGEFD_CORAL_USB_DEVICES": "coral-usb-2-1,coral-usb-1-1-2",
        "EDGEFD_CORAL_PCIE_DEVICES": "coral-pcie-0000-02-00-0",
    }


def test_no_device_no_environment_and_no_env_of_its_own() -> None:
    assert env([]) == {}
    assert env([(coral(), CORAL)]) == {"EDGEFD_CORAL_USB_DEVICES": "coral-usb-2-1"}
