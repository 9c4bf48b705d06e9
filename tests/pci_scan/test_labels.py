"""The PCI label rules (pci_scan/labels.py): NFD's `pci-<fields>.present` and `.sriov.capable`,
identical to NFD's on the x86 sample node (a device lacking a required attribute skipped and
named), with the capability labels beside them or without; a whitelisted NIC's label shared by
its VFs; every field joined in NFD's order; a garbage class skips the device with a warning."""

from __future__ import annotations

from pathlib import Path

from tests.fixturegen import HostBuilder

from .command import NFD, X86_CAPS, X86_NFD, file_labels, run


def test_x86_default_labels(x86: Path) -> None:
    code, out, err = run("--host-root", x86, "--dry-run")
    assert code == 0
    assert file_labels(out) == {**X86_NFD, **X86_CAPS}
    assert "0000:00:1f.6: subsystem_vendor: missing" in err


def test_nfd_only(x86: Path) -> None:
    assert file_labels(run("--host-root", x86, "--dry-run", "--no-capabilities")[1]) == X86_NFD


def test_nic_with_vfs_when_whitelisted(x86: Path) -> None:
    out = run("--host-root", x86, "--dry-run", "--no-capabilities", "--class-whitelist", "02")[1]
    # the PF has sriov_totalvfs; its VFs (same class and vendor) do not, but the label is shared
    assert file_labels(out) == {
        NFD + "pci-0200_8086.present": "true",
        NFD + "pci-0200_8086.sriov.capable": "true",
    }


def test_all_fields(x86: Path) -> None:
    out = run(
        "--host-root",
        x86,
        "--dry-run",
        "--no-capabilities",
        "--class-whitelist",
        "0302",
        "--label-fields",
        "subsystem_device,device,vendor,class,subsystem_vendor",
    )[1]
    assert file_labels(out) == {NFD + "pci-0302_10de_1eb8_10de_12a2.present": "true"}


def test_garbage_class_skips_device(tmp_path: Path) -> None:
    b = HostBuilder(tmp_path)
    real = b.add_pci(
        {"address": "0000:01:00.0", "class": "030200", "vendor": "10de", "device": "1eb8"}
    )
    (real / "class").write_text("0xGPU\n")
    code, out, err = run("--host-root", tmp_path, "--dry-run", "--no-capabilities")
    assert code == 0 and file_labels(out) == {}
    assert "'0xGPU' is not hex" in err and "Traceback" not in err
