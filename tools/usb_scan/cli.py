"""`usb-scan`: label a node with its USB devices (NFD-compatible) and its accelerators.

Thin on purpose: options, config, output and --watch are shared with pci-scan in
tools.common.busscan; the USB rules are in discovery.py and labels.py.
"""

from __future__ import annotations

from tools.common.busscan import make_command

main = make_command(
    "usb-scan",
    "usb",
    """Write NFD's `usb-*` labels plus edgefd.io accelerator capability labels.

    With default settings the feature.node.kubernetes.io/usb-* labels are exactly those of
    node-feature-discovery's USB source for the same sysfs. Output: <features-dir>/usb-scan.
    """,
)
