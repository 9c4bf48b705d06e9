"""`pci-scan`: label a node with its PCI devices (NFD-compatible) and its accelerators.

Thin on purpose: options, config, output and --watch are shared with usb-scan in
tools.common.busscan; the PCI rules are in discovery.py and labels.py.
"""

from __future__ import annotations

from tools.common.busscan import make_command

main = make_command(
    "pci-scan",
    "pci",
    """Write NFD's `pci-*` labels plus edgefd.io accelerator capability labels.

    With default settings the feature.node.kubernetes.io/pci-* labels (including
    .sriov.capable) are exactly those of node-feature-discovery's PCI source for the same
    sysfs. Output: <features-dir>/pci-scan.
    """,
)
