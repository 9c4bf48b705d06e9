"""`usb-scan`: label a node with its USB devices (NFD-compatible) and its accelerators.

Thin on purpose: the options are edgefd.cli.scanner's; config, output and --watch are the scan
engine's (edgefd.scan), on the device inventory (edgefd.inventory);
the USB label rules are in labels.py, the USB reading in edgefd.bus.usb. Capability labels
count accelerators on every bus, so the PCI and platform readers are handed to the engine too
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

    return run_from_options(SPEC, (usb.READER, pci.READER, platform.READER), **options)


main = make_command(
    "usb-scan",
    _run,
    f"""Write NFD's `usb-*` labels plus {DOMAIN} accelerator capability labels.

    With default settings the feature.node.kubernetes.io/usb-* labels are exactly those of
    node-feature-discovery's USB source for the same sysfs. Output: <features-dir>/usb-scan.
    """,
)
