"""pci-scan run in process (click's runner) and the labels it prints, with what NFD's PCI source
gives the x86-server sample node (hand-computed) and edgefd's capability labels there."""

from __future__ import annotations

import os

from click.testing import CliRunner

from edgefd.pci_scan.cli import main

NFD = "feature.node.kubernetes.io/"

# Hand-computed with NFD's PCI rules: whitelist 03 0b40 12, fields class+vendor, class cut to
# 4 digits, .sriov.capable when sriov_totalvfs exists, devices lacking a required attribute
# skipped. 0880 (Coral M.2), 0200 (NIC + VFs), 0600/0604/0c03 are not whitelisted.
X86_NFD = {
    NFD + "pci-0300_8086.present": "true",  # iGPU 030000
    NFD + "pci-0302_10de.present": "true",  # Tesla T4 030200
    NFD + "pci-1200_1da3.present": "true",  # processing accelerator
    NFD + "pci-0b40_1e60.present": "true",  # Hailo-8 co-processor
    NFD + "pci-0b40_8086.present": "true",  # QAT co-processor ...
    NFD + "pci-0b40_8086.sriov.capable": "true",  # ... with sriov_totalvfs
    # 0000:00:1f.6 (1234:1111, class 0300) has no subsystem_vendor: skipped, no pci-0300_1234
}

X86_CAPS = {
    "edgefd.io/edgetpu.present": "true",
    "edgefd.io/edgetpu.count": "2",  # Coral M.2 on PCI + Coral USB (runtime) on USB
    "edgefd.io/hailo.present": "true",
    "edgefd.io/hailo.count": "1",
}


def run(*args: str | os.PathLike[str]) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def file_labels(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#")
    )
