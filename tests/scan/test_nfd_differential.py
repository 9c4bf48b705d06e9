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


# Hostile sysfs, where "what NFD does" is the specification: each case is a display device
# (whitelisted, so its .present label appears) whose sriov_totalvfs is odd in one way.
SRIOV_CASES = {
    "0000:10:00.0": "loop",  # a symlink loop: NFD emits no .sriov.capable
    "0000:11:00.0": "dangling",  # a link to nothing
    "0000:12:00.0": "directory",
    "0000:13:00.0": "empty",  # an empty regular file
    "0000:14:00.0": "garbage",
    "0000:15:00.0": "regular",  # the normal case, for contrast
}


def test_hostile_sriov_totalvfs_identical_to_nfd_worker(nfd_worker: Any, tmp_path: Path) -> None:
    from tests.fixturegen import HostBuilder

    host = tmp_path / "host"
    (host / "sys/bus/usb/devices").mkdir(parents=True)
    b = HostBuilder(host)
    for i, (addr, case) in enumerate(SRIOV_CASES.items()):
        real = b.add_pci(
            {"address": addr, "class": "030000", "vendor": f"{0x1000 + i:04x}", "device": "0001"}
        )
        attr = real / "sriov_totalvfs"
        if case == "loop":
            attr.symlink_to("sriov_totalvfs")
        elif case == "dangling":
            attr.symlink_to("../nowhere/sriov_totalvfs")
        elif case == "directory":
            attr.mkdir()
        elif case == "empty":
            attr.write_text("")
        elif case == "garbage":
            attr.write_text("many\n")
        else:
            attr.write_text("8\n")
    theirs = nfd_worker.run(host)
    ours = edgefd_labels(host)
    assert ours == theirs
    capable = sorted(k for k in ours if k.endswith(".sriov.capable"))
    assert "feature.node.kubernetes.io/pci-0300_1000.sriov.capable" not in capable  # the loop
    assert "feature.node.kubernetes.io/pci-0300_1005.sriov.capable" in capable


# An unknown deviceLabelFields item: NFD ignores it (logging at info) and falls back to its
# defaults when none is left (source/usb/usb.go, source/pci/pci.go at v0.17.3 and v0.19.0). An
# nfd-worker.conf that works with NFD must work here: edgefd warns, exits 0, and labels the
# same; `--label-fields` goes through the same rule (issue 25 item 8).
UNKNOWN_FIELDS = {
    "known-and-unknown": {"usb": ["vendor", "bogus"], "pci": ["class", "nonsense", "vendor"]},
    "only-unknown": {"usb": ["bogus"], "pci": ["nonsense"]},
}


@pytest.mark.parametrize("case", UNKNOWN_FIELDS)
def test_unknown_label_fields_are_ignored_as_nfd_does(
    case: str, nfd_worker: Any, tmp_path: Path
) -> None:
    host = _host(tmp_path, "x86-server")
    fields = UNKNOWN_FIELDS[case]
    conf_doc = {"sources": {bus: {"deviceLabelFields": f} for bus, f in fields.items()}}
    conf = tmp_path / "nfd-worker.conf"
    conf.write_text(yaml.safe_dump(conf_doc))
    theirs = nfd_worker.run(host, options=conf_doc)
    assert edgefd_labels(host, conf) == theirs
    for tool, bus in (("usb_scan", "usb"), ("pci_scan", "pci")):
        argv = [sys.executable, "-m", f"edgefd.{tool}", "--host-root", str(host), "--dry-run",
                "--no-capabilities", "--label-fields", ",".join(fields[bus])]  # fmt: skip
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert f"{bus}: ignoring unknown label field(s)" in proc.stderr
        ours = parse_text(proc.stdout).labels()
        assert ours == {k: v for k, v in theirs.items() if f"/{bus}-" in k}
