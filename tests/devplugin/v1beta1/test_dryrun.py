"""What `devplugin --dry-run` shows (dryrun.py), through the command: every resource with its
devices, kubelet IDs and the Allocate answer each would get, as JSON and as text, writing
nothing; and host strings that forge lines or are not UTF-8 shown escaped, one printable line
per entry, the JSON strict UTF-8."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.devplugin.command import ROOT, run_plugin
from tests.fixturegen import HostBuilder

CORAL = "edgefd.io/coral-usb"


def test_dry_run_json_and_text(host: Path, tmp_path: Path) -> None:
    proc = run_plugin(
        ["--host-root", str(host), "--plugin-dir", str(tmp_path / "dp"), "--dry-run", "-o", "json"]
    )
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    doc = json.loads(out)
    coral = next(r for r in doc["resources"] if r["resource"] == CORAL)
    [dev] = coral["devices"]
    assert dev["id"] == "coral-usb-2-1" and dev["state"] == "boot"
    assert dev["allocate"]["envs"] == {"EDGEFD_CORAL_USB_DEVICES": "coral-usb-2-1"}
    assert not (tmp_path / "dp").exists()  # a dry run writes nothing
    proc = run_plugin(["--host-root", str(host), "--plugin-dir", str(tmp_path / "dp"), "--dry-run"])
    out, _ = proc.communicate(timeout=30)
    assert "coral-usb-2-1: Healthy, usb 2-1, 1a6e:089a boot" in out


def test_dry_run_shows_hostile_device_strings_escaped_and_json_strict(tmp_path: Path) -> None:
    """A Coral whose serial forges lines (and is its ID source) and an NCS2 whose sysfs name is
    not UTF-8: the text is one printable line per entry, the JSON strict UTF-8."""
    root = tmp_path / "host"
    b = HostBuilder(root)
    b.add_usb({"port": "usb1", "vendor": "1d6b", "product": "0002", "class": "09"})
    coral = b.add_usb({"port": "1-1", "vendor": "1a6e", "product": "089a", "class": "fe"})
    (coral / "serial").write_bytes(b"AB\ndevplugin: ERROR: forged\x1b[2J\xff\n")
    ncs2 = b.add_usb({"port": "1-2", "vendor": "03e7", "product": "2485", "class": "ff"})
    bus = root / "sys/bus/usb/devices"
    weird = os.fsencode(ncs2.parent) + b"/1-\xff"
    os.rename(os.fsencode(ncs2), weird)
    os.unlink(bus / "1-2")
    os.symlink(os.path.relpath(weird, os.fsencode(bus)), os.fsencode(bus) + b"/1-\xff")
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    cfg = tmp_path / "resources.yaml"
    cfg.write_text(
        "resources:\n  - {name: edgefd.io/coral-usb, accelerator: coral-usb, id_from: serial}\n"
        "  - {name: edgefd.io/ncs2, accelerator: ncs2}\n"
    )
    argv = ["--host-root", str(root), "--plugin-dir", str(tmp_path / "dp"), "--config", str(cfg)]
    for output in ("text", "json"):
        proc = subprocess.run(
            [sys.executable, "-m", "edgefd.devplugin", *argv, "--dry-run", "-o", output],
            cwd=ROOT,
            capture_output=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr  # a name that is not UTF-8 was exit 70
        out = proc.stdout.decode("utf-8", "strict")
        if output == "json":
            doc = json.loads(out)
            json.dumps(doc, ensure_ascii=False).encode("utf-8", "strict")
            ncs2_dev = next(r for r in doc["resources"] if r["resource"] == "edgefd.io/ncs2")
            assert ncs2_dev["devices"][0]["location"] == "1-\\xff"
        else:
            assert "\x1b" not in out and "\r" not in out
            assert not any(line.startswith("devplugin: ") for line in out.splitlines())
            assert "usb 1-\\xff" in out
