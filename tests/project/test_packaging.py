"""What `pip install .` puts into site-packages: one package, `edgefd`, with every console
script working, and nothing named `tools`."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ("dt-labeller", "usb-scan", "pci-scan", "feature-sink", "devplugin", "kubectl-edgefd")


def declared_packages() -> list[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return [p.strip() for p in cfg["options"]["packages"].split() if p.strip()]


def test_every_folder_is_a_declared_package() -> None:
    """setup.cfg lists the packages by hand (the folder is `tools`, the package `edgefd`), so
    a new sub-package that is not listed would silently be missing from the wheel."""
    folders = sorted(
        "edgefd"
        + (
            "." + ".".join(p.parent.relative_to(ROOT / "tools").parts)
            if p.parent != ROOT / "tools"
            else ""
        )
        for p in (ROOT / "tools").rglob("__init__.py")
    )
    assert sorted(declared_packages()) == folders


def test_default_features_dir_is_the_format_s() -> None:
    from edgefd import cli
    from edgefd.core import featuresd

    assert cli.DEFAULT_FEATURES_DIR == featuresd.DEFAULT_FEATURES_DIR


@pytest.mark.slow
def test_pip_install_into_a_fresh_venv(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-warn-script-location", str(ROOT)],
        check=True,
        env=env,
        timeout=600,
        capture_output=True,
    )
    probe = (
        "import importlib.util as u, edgefd, edgefd.bus.catalogue as c\n"
        "assert u.find_spec('tools') is None, 'a package named tools was installed'\n"
        "assert c.load_catalogue().by_id('coral-usb') is not None  # package data\n"
        "print(edgefd.__file__)\n"
    )
    out = subprocess.run(
        [str(py), "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "site-packages/edgefd/__init__.py" in out.stdout
    for script in SCRIPTS:
        r = subprocess.run(
            [str(env_dir / "bin" / script), "--help"], env=env, capture_output=True, text=True
        )
        assert r.returncode == 0 and "Usage:" in r.stdout, (script, r.stderr)
    r = subprocess.run(
        [str(py), "-m", "edgefd.usb_scan", "--host-root", str(tmp_path), "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 3 and "is sysfs mounted there?" in r.stderr, r.stderr
    assert sys.prefix != str(env_dir)
