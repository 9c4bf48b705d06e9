"""Which edgefd this is: for `--version`, the `edgefd_build_info` metric and the start-up line
of the long-running tools.

The version is the package's own constant (`edgefd.__version__`, which setup.cfg reads too),
not the installed distribution's metadata: importlib.metadata costs milliseconds that every
`--dry-run` would pay, and an editable install's metadata goes stale when the version moves.
Nothing here reads a file or imports more than `os` and `sys`.
"""

from __future__ import annotations

import os
import sys

from edgefd import __version__


def build_info() -> dict[str, str]:
    """The labels of `edgefd_build_info`, in a fixed order: this version, and what it runs on
    (the interpreter, and the machine: an arm64 image on an amd64 node is a real mistake)."""
    return {
        "version": __version__,
        "python": ".".join(str(n) for n in sys.version_info[:3]),
        "platform": f"{sys.platform}/{os.uname().machine}",
    }


def version_line(tool: str) -> str:
    """`usb-scan 0.1.0 (edgefd; python 3.11.2, linux/x86_64)`: what `--version` prints."""
    info = build_info()
    return f"{tool} {info['version']} (edgefd; python {info['python']}, {info['platform']})"


def startup_line(mode: str, settings: dict[str, object]) -> str:
    """The first info line of a long-running tool (the log format already names the tool):
    the build, the mode and the settings it runs with, so a log read weeks later says which
    build behaved how and why. The caller leaves out what is secret (nothing in edgefd's
    options is: a kubeconfig is named by its path)."""
    info = build_info()
    shown = ", ".join(f"{k}={v}" for k, v in settings.items())
    return (
        f"edgefd {info['version']} (python {info['python']}, {info['platform']}) starting, "
        f"mode {mode}: {shown}"
    )
