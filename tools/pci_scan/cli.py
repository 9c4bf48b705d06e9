"""`pci-scan`: label a node with its PCI devices (NFD-compatible) and its accelerators.

Thin on purpose: the options are edgefd.cli.scanner's; config, output and --watch are the scan
engine's (edgefd.scan), on the device inventory (edgefd.inventory);
the PCI label rules are in labels.py, the PCI reading in edgefd.bus.pci. Capability labels
count accelerators on every bus, so the USB and platform readers are handed to the engine too
(a platform device has no NFD label of its own: NFD has no platform source).
"""

from __future__ import annotations

from typing import Any

from edgefd.cli.scanner import make_command
from edgefd.inventory.naming import DOMAIN


def _run(**options: Any) -> int:
    from edgefd.bus import pci, platform, usb
    from edgefd.scan.producer import run_from_options

    from .labels import SPEC

    return run_from_options(SPEC, (pci.READER, usb.READER, platform.READER), **options)


main = make_command(
    "pci-scan",
    _run,
    f"""Write NFD's `pci-*` labels plus {DOMAIN} accelerator capability labels.

    With default settings the feature.node.kubernetes.io/pci-* labels (including
    .sriov.capable) are exactly those of node-feature-discovery's PCI source for the same
    sysfs. Output: <features-dir>/pci-scan.
    """,
)
