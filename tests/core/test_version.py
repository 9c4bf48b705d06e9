"""Which edgefd this is (edgefd.core.version), as `--version` and a long-running tool's first
log line say it: the package's version, the interpreter and the machine, and the settings the
tool starts with. (The same version everywhere, `--version` of every CLI and the metric, is
tests/project/test_version.py.)"""

from __future__ import annotations

import os
import sys

from edgefd import __version__
from edgefd.core.version import build_info, startup_line, version_line

PYTHON = ".".join(str(n) for n in sys.version_info[:3])
PLATFORM = f"{sys.platform}/{os.uname().machine}"


def test_the_build_in_a_fixed_order() -> None:
    assert list(build_info().items()) == [
        ("version", __version__),
        ("python", PYTHON),
        ("platform", PLATFORM),
    ]


def test_version_and_startup_lines() -> None:
    assert version_line("usb-scan") == (
        f"usb-scan {__version__} (edgefd; python {PYTHON}, {PLATFORM})"
    )
    assert startup_line("watch", {"producers": "usb-scan", "hold": "3s"}) == (
        f"edgefd {__version__} (python {PYTHON}, {PLATFORM}) starting, "
        "mode watch: producers=usb-scan, hold=3s"
    )
