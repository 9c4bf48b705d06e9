"""Differential test: edgefd's USB/PCI labels against node-feature-discovery's own nfd-worker.

The harness builds the upstream worker from its Go module and runs it once (`-oneshot
-no-publish`) on the same generated sysfs tree. With default settings, and with the same
nfd-worker.conf, our NFD-namespace labels must be identical, label for label.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgefd.core.featuresd import parse_text
from tests.fixturegen import build_host
from tests.fixturegen.sysfs import synthetic_pci, synthetic_usb

pytestmark = pytest.mark.realpeer

ROOT = Path(__file__).resolve().parents[2]
NODES = sorted(p.stem for p in (ROOT / "tests/fixtures/nodes").glob("*.yaml"))

# Non-default settings exercised on both sides. The serial field is left out on purpose: for a
# device without a serial NFD writes an empty field and edgefd omits it (documented difference).
CUSTOM_CONF: dict[str, Any] = {
    "sources": {
        "usb": {
            "deviceClassWhitelist": ["03", "09", "fe", "ff"],
            "deviceLabelFields": ["vendor", "device"],
        },
        "pci": {
            "deviceClassWhitelist": ["02", "0880", "03"],
            "deviceLabelFields": ["class", "vendor", "device", "subsystem_vendor"],
        },
    }
}


def edgefd_labels(host: Path, config: Path | None = None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for tool in ("usb_scan", "pci_scan"):
        argv = [sys.executable, "-m", f"edgefd.{tool}", "--host-root", str(host), "--dry-run"]
        argv += ["--no-capabilities"] + (["--config", str(config)] if config else [])
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        labels.update(parse_text(proc.stdout).labels())
    return labels


def _host(tmp_path: Path, desc: Any) -> Path:
    return build_host(desc, tmp_path / "host", devicetree=False)


@pytest.mark.parametrize("node", NODES)
def test_default_labels_identical_to_nfd_worker(node: str, nfd_worker: Any, tmp_path: Path):
    host = _host(tmp_path, node)
    theirs = nfd_worker.run(host)
    ours = edgefd_labels(host)
    assert ours == theirs
    if node == "x86-server":  # its QAT co-processor has SR-IOV
        assert any(k.endswith(".sriov.capable") for k in ours)


@pytest.mark.parametrize("node", NODES)
def test_configured_labels_identical_to_nfd_worker(node: str, nfd_worker: Any, tmp_path: Path):
    host = _host(tmp_path, node)
    conf = tmp_path / "nfd-worker.conf"
    conf.write_text(yaml.safe_dump(CUSTOM_CONF))
    theirs = nfd_worker.run(host, options=CUSTOM_CONF)
    ours = edgefd_labels(host, conf)
    assert ours == theirs
    assert ours, "the custom whitelist must label something on every sample node"


def test_synthetic_buses_identical_to_nfd_worker(nfd_worker: Any, tmp_path: Path) -> None:
    desc = {**synthetic_usb(60), **synthetic_pci(96)}
    host = _host(tmp_path, desc)
    theirs = nfd_worker.run(host)
    assert edgefd_labels(host) == theirs
    assert len(theirs) >= 3
