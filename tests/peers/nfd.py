"""The upstream nfd-worker, run once against a fixture host root (the differential oracle of
the USB/PCI labels)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from .processes import harness_binary

NFD_WORKER = "nfd-worker"


class NFDWorker:
    """Runs the upstream nfd-worker once (``-oneshot -no-publish``) against a
    fixture host root (a directory with ``sys/``, ``etc/``, ... inside) and
    returns the labels it would publish."""

    def __init__(self, bin_path: Path | None = None):
        self.bin_path = Path(bin_path) if bin_path else harness_binary(NFD_WORKER)

    def run(
        self,
        host_root: str | Path,
        sources: str = "usb,pci",
        options: dict | None = None,
        timeout: float = 60.0,
    ) -> dict[str, str]:
        with tempfile.TemporaryDirectory(prefix="nfd-") as tmp:
            out = Path(tmp) / "labels.json"
            argv = [
                str(self.bin_path),
                f"-host-root={host_root}",
                f"-labels-out={out}",
                "-oneshot",
                "-no-publish",
                f"-label-sources={sources}",
                f"-feature-sources={sources}",
                f"-config={Path(tmp) / 'none.conf'}",
                "-metrics=0",
                "-grpc-health=0",
            ]
            if options:
                argv.append(f"-options={json.dumps(options)}")
            r = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ, "NODE_NAME": "fixture-node"},
            )
            if r.returncode != 0 or not out.exists():
                raise RuntimeError(f"nfd-worker failed ({r.returncode}):\n{r.stderr[-4000:]}")
            return json.loads(out.read_text())


@pytest.fixture(scope="session")
def nfd_worker() -> NFDWorker:
    return NFDWorker()
