"""The kubelet's pod-resources answer the keeper's tests ask about: pods whose containers hold
devices through either API (`plugin`: a device plugin's resource and IDs; `dra`: a claim's
driver, pool and device), `PODS`, a node where exactly three containers hold `CORAL`, and
`handout`: a device as devplugin's decisions say it is handed out."""

from __future__ import annotations

from edgefd.device_keeper.api import podresources_pb2 as pr
from edgefd.inventory.decisions import GivenNode, Handout

NAME = "coral-usb-1-1-3"
PATH = f"/dev/edgefd/{NAME}"


def handout(
    name: str = NAME,
    number: str = "c:189:5",
    path: str = "",
    plugin: tuple = (("edgefd.io/coral-usb", (NAME,)),),
    dra: tuple = (("edgefd.io", "node1", NAME),),
    was: tuple = (),
    present: bool = True,
) -> Handout:
    """One device as devplugin hands it out (by default: `CORAL` at 189:5)."""
    node = GivenNode(path or f"/dev/edgefd/{name}", number, was)
    return Handout(name, (node,), plugin, dra, present)


CORAL = handout()


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
    pod("ns", "detector", [plugin("app", "edgefd.io/coral-usb", NAME)]),
    pod("ns", "shared", [plugin("a", "edgefd.io/coral-usb", f"{NAME}-r1")]),
    pod("ns", "dra", [dra("app", "edgefd.io", "node1", NAME), SIDECAR]),
    pod("ns", "other-port", [plugin("app", "edgefd.io/coral-usb", "coral-usb-1-1-4")]),
    pod("ns", "other-resource", [plugin("app", "edgefd.io/ncs2", NAME)]),
    pod("ns", "other-pool", [dra("app", "edgefd.io", "node2", NAME)]),
    pod("ns", "other-driver", [dra("app", "gpu.example.com", "node1", NAME)]),
    pod("ns", "lookalike", [plugin("app", "edgefd.io/coral-usb", f"{NAME}-rx")]),
]  # fmt: skip
