"""Which running containers hold a device, by what the kubelet assigned, through either API.

The kubelet's pod-resources API (`List`, socket `/var/lib/kubelet/pod-resources/kubelet.sock`)
is the authority: for every container of every pod it lists the device-plugin devices (resource
name + device IDs) and the DRA claims' devices (driver, pool, device name, CDI IDs). A device
node inside a container is no proof: a container may mknod `/dev/edgefd/<name>` itself (runc
allows `c *:* m`) and must not be handed a device for it.

A `DeviceRef` says how one physical device appears in those APIs; source.py builds it from
the device inventory (its name: the device-plugin ID under any resource, a shared device's
replica IDs included, and the DRA device name in the node's pool).
Pure functions: the gRPC calls are in podresources.py, the containers in containers.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from edgefd.inventory.naming import names_device


@dataclass(frozen=True)
class DeviceRef:
    """One device as the APIs name it."""

    name: str  # the inventory name (its container path: naming.container_path)
    plugin: frozenset[tuple[str, str]] = field(default_factory=frozenset)  # (resource, ID)
    dra: frozenset[tuple[str, str, str]] = field(
        default_factory=frozenset
    )  # (driver, pool, device); pool "": any pool of the driver
    ids: frozenset[str] = field(default_factory=frozenset)  # device-plugin IDs, any resource


@dataclass(frozen=True, order=True)
class Holder:
    """A container the kubelet gave the device to."""

    namespace: str
    pod: str
    container: str
    via: str  # "device-plugin" / "dra"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.container}"


def _plugin_match(ref: DeviceRef, resource: str, device_id: str) -> bool:
    """`device_id` under `resource` is `ref`: itself or a replica of it (`replicas: N`)."""
    return any(r == resource and names_device(device_id, i) for r, i in ref.plugin) or any(
        names_device(device_id, i) for i in ref.ids
    )


def _dra_match(ref: DeviceRef, driver: str, pool: str, device: str) -> bool:
    return (driver, pool, device) in ref.dra or (driver, "", device) in ref.dra


def holders(pods: Iterable[Any], ref: DeviceRef) -> list[Holder]:
    """The containers holding `ref`, from a pod-resources List answer (its `pod_resources`:
    PodResources messages, or anything with the same attributes)."""
    found: set[Holder] = set()
    for pod in pods:
        for c in pod.containers:
            for d in c.devices:
                if any(_plugin_match(ref, d.resource_name, i) for i in d.device_ids):
                    found.add(Holder(pod.namespace, pod.name, c.name, "device-plugin"))
            for claim in c.dynamic_resources:
                for r in claim.claim_resources:
                    if _dra_match(ref, r.driver_name, r.pool_name, r.device_name):
                        found.add(Holder(pod.namespace, pod.name, c.name, "dra"))
    return sorted(found)
