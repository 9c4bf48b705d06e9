"""One version, said the same way everywhere: `--version` of every CLI, `edgefd_build_info` on
every /metrics, and every file that names the release (image tag, chart, manifests)."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
from pathlib import Path

import pytest

import edgefd
from edgefd.core.version import build_info

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ("dt-labeller", "usb-scan", "pci-scan", "feature-sink", "devplugin")
VERSION = edgefd.__version__


def test_every_file_that_names_the_release_names_this_version() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["metadata"]["version"] == "attr: edgefd.__version__"  # the one source
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)
    image = f"ghcr.io/edgefd/edgefd:{VERSION}"
    named = {
        "Dockerfile": re.findall(r"^ARG VERSION=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M),
        "scripts/build-image": re.findall(
            r"^IMAGE=ghcr.io/edgefd/edgefd:(\S+)$", (ROOT / "scripts/build-image").read_text(), re.M
        ),
        "Chart.yaml": re.findall(
            r'^(?:version|appVersion): "?([^"\s]+)"?$',
            (ROOT / "charts/edgefd/Chart.yaml").read_text(),
            re.M,
        ),
    }
    for path in sorted((ROOT / "k8s").rglob("*.yaml")):
        tags = re.findall(r"ghcr\.io/edgefd/edgefd:([\w.-]+)", path.read_text())
        named[str(path.relative_to(ROOT))] = tags
    named["tests/image"] = re.findall(
        r'^IMAGE = "ghcr\.io/edgefd/edgefd:(\S+)"$',
        (ROOT / "tests/image/test_built_image.py").read_text(),
        re.M,
    )
    assert all(named[k] for k in ("Dockerfile", "scripts/build-image", "Chart.yaml")), named
    wrong = {k: v for k, v in named.items() if any(t != VERSION for t in v)}
    assert wrong == {}, f"want {VERSION} ({image})"


def test_the_installed_metadata_agrees() -> None:
    """`pip install` takes the version from edgefd.__version__ (setup.cfg `attr:`)."""
    from importlib.metadata import version

    assert version("edgefd") == VERSION


@pytest.mark.parametrize("tool", SCRIPTS)
def test_version_of_every_cli(tool: str) -> None:
    """Issue 25 item 2: `usb-scan --version` said "Did you mean '--verbose'?"."""
    p = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60)
    info = build_info()
    assert p.returncode == 0, p.stderr
    assert p.stdout == (f"{tool} {VERSION} (edgefd; python {info['python']}, {info['platform']})\n")
    assert p.stderr == ""
    # eager: it wins over everything else on the line, even what would be a usage error
    q = subprocess.run([tool, "--output", "json", "--version"], capture_output=True, text=True)
    assert q.returncode == 0 and q.stdout == p.stdout


@pytest.mark.parametrize("tool", SCRIPTS)
def test_every_help_lists_the_exit_codes(tool: str) -> None:
    p = subprocess.run([tool, "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    listed = p.stdout.split("Exit codes:\n", 1)[1]
    codes = [int(c) for c in re.findall(r"^ {4}(\d+) ", listed, re.M)]
    assert codes[:3] == [0, 1, 2] and codes[-1] == 70, listed
    assert all(len(line) <= 80 for line in listed.splitlines()), "wrapped to the terminal"
    assert "--version" in p.stdout


def test_version_reads_no_distribution_metadata() -> None:
    """The version is a constant: neither `--version` nor a producer's dry run pays for
    importlib.metadata (start-up time is benchmarked)."""
    code = (
        "import sys\n"
        "from edgefd.usb_scan.cli import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "sys.stderr.write(' '.join(sorted(sys.modules)))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert p.returncode == 0, p.stderr
    assert "importlib.metadata" not in p.stderr.split()
    assert "logging" not in p.stderr.split()


def test_build_info_is_on_every_metrics_registry() -> None:
    """Every long-running tool's /metrics (each builds on edgefd.runtime.metrics.Metrics)."""
    from edgefd.runtime.metrics import Metrics

    info = build_info()
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(info.items()))
    text = Metrics().render().decode()
    assert f"edgefd_build_info{{{labels}}} 1.0" in text
    assert list(info) == ["version", "python", "platform"]
    assert info["version"] == VERSION
