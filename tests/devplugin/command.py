"""The devplugin command as the tests run it: `python -m edgefd.devplugin` in a subprocess,
from the repository's root, with its output piped (`run_plugin`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_plugin(args: list[str], **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "edgefd.devplugin", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )
