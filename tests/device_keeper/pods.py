"""The kubelet's pod-resources answer the keeper's tests ask about: pods whose containers hold
devices through either API (`plugin`: a device plugin's resource and IDs; `dra`: a claim's
driver, pool and device), and `PODS`, a node where exactly three containers hold `CORAL`."""

from __future__ import annotations

from edgefd.device_keeper.api import podresources_pb2 as pr
from edgefd.device_keeper.holders import DeviceRef

CORAL = DeviceRef(
    "coral-usb-1-1-3",
    plugin=frozenset({("edgefd.io/coral-usb", "usb-1-1.3")}),
    dra=frozenset({("edgefd.io", "node1", "usb-1-1-3")}),
)


def pod(ns, name, containers):
    return pr.PodResources(namespace=ns, name=name, containers=containers)


def plugin(name, resource, *ids):
    return pr.ContainerResources(
        name=name, devices=[pr.ContainerDevices(resource_name=resource, device_ids=list(ids))]
    )


def dra(name, driver, pool, device):
    res = pr.ClaimResource(
        driver_name=driver,
        pool_name=pool,
        device_name=device,
        cdi_devices=[pr.CDIDevice(name=f"edgefd.io/claim=uid-{device}")],
    )
    claim = pr.DynamicResource(claim_name="tpu", claim_namespace="ns", claim_resources=[res])
    return pr.ContainerResources(name=name, dynamic_resources=[claim])


SIDECAR = pr.ContainerResources(name="side")  # same pod, no device
PODS = [
    pod("ns", "detector", [plugin("app", "edgefd.io/coral-usb", "usb-1-1.3")]),
    pod("ns", "shared", [plugin("a", "edgefd.io/coral-usb", "usb-1-1.3-r1")]),
    pod("ns", "dra", [dra("app", "edgefd.io", "node1", "usb-1-1-3"), SIDECAR]),
    pod("ns", "other-port", [plugin("app", "edgefd.io/coral-usb", "usb-1-1.4")]),
    pod("ns", "other-resource", [plugin("app", "edgefd.io/ncs2", "usb-1-1.3")]),
    pod("ns", "other-pool", [dra("app", "edgefd.io", "node2", "usb-1-1-3")]),
    pod("ns", "other-driver", [dra("app", "gpu.example.com", "node1", "usb-1-1-3")]),
    pod("ns", "lookalike", [plugin("app", "edgefd.io/coral-usb", "usb-1-1.3-rx")]),
]  # fmt: skip
