"""Which running containers hold a device, by what the kubelet assigned, through either API.

The kubelet's pod-resources API (`List`, socket `/var/lib/kubelet/pod-resources/kubelet.sock`)
is the authority: for every container of every pod it lists the device-plugin devices (resource
name + device IDs) and the DRA claims' devices (driver, pool, device name, CDI IDs). A device
node inside a container is no proof: a container may mknod `/dev/edgefd/<name>` itself (runc
allows `c *:* m`) and must not be handed a device for it.

How one device appears in those APIs is what devplugin decided (a `Handout` of its decisions
file): the resources and kubelet IDs it is advertised as, and its DRA device. A kubelet ID
that names the device under one of those resources is the device even when it is not among
the IDs listed now (a replica ID handed out before the resource's `replicas` changed:
naming.names_device). Pure functions: the gRPC calls are in podresources.py, the containers
in containers.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from edgefd.inventory.decisions import Handout
from edgefd.inventory.naming import names_device


@dataclass(frozen=True, order=True)
class Holder:
    """A container the kubelet gave the device to."""

    namespace: str
    pod: str
    container: str
    via: str  # "device-plugin" / "dra"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.container}"


def _plugin_match(h: Handout, resource: str, device_id: str) -> bool:
    """`device_id` under `resource` is `h`'s device: an ID it is advertised as, or a replica
    of it under one of its resources."""
    return any(
        r == resource and (device_id in ids or names_device(device_id, h.device))
        for r, ids in h.plugin
    )


def _dra_match(h: Handout, driver: str, pool: str, device: str) -> bool:
    return (driver, pool, device) in h.dra


def holders(pods: Iterable[Any], h: Handout) -> list[Holder]:
    """The containers holding `h`, from a pod-resources List answer (its `pod_resources`:
    PodResources messages, or anything with the same attributes)."""
    found: set[Holder] = set()
    for pod in pods:
        for c in pod.containers:
            for d in c.devices:
                if any(_plugin_match(h, d.resource_name, i) for i in d.device_ids):
                    found.add(Holder(pod.namespace, pod.name, c.name, "device-plugin"))
            for claim in c.dynamic_resources:
                for r in claim.claim_resources:
                    if _dra_match(h, r.driver_name, r.pool_name, r.device_name):
                        found.add(Holder(pod.namespace, pod.name, c.name, "dra"))
    return sorted(found)
