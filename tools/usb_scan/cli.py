"""`usb-scan`: label a node with its USB devices (NFD-compatible) and its accelerators.

Thin on purpose: options, config, output and --watch come from the scan engine (edgefd.scan);
the USB label rules are in labels.py, the USB reading in edgefd.bus.usb. Capability labels
count accelerators on both buses, so the PCI reader is handed to the engine too.
"""

from __future__ import annotations

from typing import Any

from edgefd.scan.command import make_command


def _spec() -> Any:
    from .labels import SPEC

    return SPEC


def _buses() -> tuple[Any, ...]:
    from edgefd.bus import pci, usb

    return (usb.READER, pci.READER)


main = make_command(
    "usb-scan",
    _spec,
    _buses,
    """Write NFD's `usb-*` labels plus edgefd.io accelerator capability labels.

    With default settings the feature.node.kubernetes.io/usb-* labels are exactly those of
    node-feature-discovery's USB source for the same sysfs. Output: <features-dir>/usb-scan.
    """,
)
