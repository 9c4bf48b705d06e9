"""usb-scan run in process (click's runner) and the labels it prints, with what NFD's USB source
gives the rpi4-coral sample node (hand-computed) and edgefd's capability labels there."""

from __future__ import annotations

import os

from click.testing import CliRunner

from edgefd.usb_scan.cli import main

NFD = "feature.node.kubernetes.io/"

# Hand-computed from NFD's USB source rules (class whitelist 0e ef fe ff; fields class, vendor,
# device; device class 00 -> one instance per interface class).
RPI4_NFD = {
    NFD + "usb-ff_03e7_2485.present": "true",  # NCS2 boot: class 00, interface ff
    NFD + "usb-ef_046d_0825.present": "true",  # webcam: device class ef
    NFD + "usb-ff_0403_6010.present": "true",  # FT2232: two ff interfaces, one label
    NFD + "usb-fe_1a6e_089a.present": "true",  # Coral boot (DFU): interface fe
}

RPI4_CAPS = {
    "edgefd.io/edgetpu.present": "true",
    "edgefd.io/edgetpu.count": "1",
    "edgefd.io/myriadx.present": "true",
    "edgefd.io/myriadx.count": "1",
}


def run(*args: str | os.PathLike[str]) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def file_labels(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k] = v
    return out
