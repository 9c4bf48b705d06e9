"""The label namespaces the sink writes by default: those edgefd's own producers write
(usb-scan and pci-scan: node-feature-discovery's and edgefd's; dt-labeller:
k8s-dt-node-labeller's), each with its subdomains, as nfd-master allowed its own up to v0.12.
The sink writes these and nothing else unless the operator widens it (--allow-namespace, as
nfd-master's -extra-label-ns): a label in anyone else's namespace is then never the sink's to
write, so a forged ownership claim on it is inert.
"""

from __future__ import annotations

from collections.abc import Iterable

from edgefd.core.labels import DEFAULT_NAMESPACE, NamespacePolicy
from edgefd.inventory.naming import DOMAIN

SINK_NAMESPACES = (DEFAULT_NAMESPACE, DOMAIN, "beta.devicetree.org")
SINK_POLICY = NamespacePolicy(SINK_NAMESPACES)


def sink_policy(allowed: Iterable[str] = (), denied: Iterable[str] = ()) -> NamespacePolicy:
    """The sink's namespaces plus `allowed`, minus `denied` (ValueError naming a bad entry)."""
    return NamespacePolicy.from_lists(SINK_NAMESPACES, allowed, denied)
