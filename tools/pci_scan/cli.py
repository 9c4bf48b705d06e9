"""`pci-scan`: label a node with its PCI devices (NFD-compatible) and its accelerators.

Thin on purpose: options, config, output and --watch come from the scan engine (edgefd.scan);
the PCI label rules are in labels.py, the PCI reading in edgefd.bus.pci. Capability labels
count accelerators on both buses, so the USB reader is handed to the engine too.
"""

from __future__ import annotations

from typing import Any

from edgefd.scan.command import make_command


def _spec() -> Any:
    from .labels import SPEC

    return SPEC


def _buses() -> tuple[Any, ...]:
    from edgefd.bus import pci, usb

    return (pci.READER, usb.READER)


main = make_command(
    "pci-scan",
    _spec,
    _buses,
    """Write NFD's `pci-*` labels plus edgefd.io accelerator capability labels.

    With default settings the feature.node.kubernetes.io/pci-* labels (including
    .sriov.capable) are exactly those of node-feature-discovery's PCI source for the same
    sysfs. Output: <features-dir>/pci-scan.
    """,
)
