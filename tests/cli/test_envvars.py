"""Every flag from the environment (edgefd.cli.envvars): each option of each tool and
subcommand is read from EDGEFD_<FLAG>, named for the flag, shown in --help; a run configured by
variables prints what the same flags print; the command line wins."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

REPO = Path(__file__).resolve().parents[2]


TOOLS = {
    "usb-scan": "edgefd.usb_scan.cli",
    "pci-scan": "edgefd.pci_scan.cli",
    "dt-labeller": "edgefd.dt_labeller.cli",
    "feature-sink": "edgefd.feature_sink.cli",
    "devplugin": "edgefd.devplugin.cli",
    "device-keeper": "edgefd.device_keeper.cli",
}


def _commands() -> list[tuple[str, click.Command]]:
    import importlib

    out: list[tuple[str, click.Command]] = []
    for tool, module in TOOLS.items():
        main = importlib.import_module(module).main
        subs = list(main.commands.values()) if isinstance(main, click.Group) else []
        out += [(tool, main)] + [(f"{tool} {c.name}", c) for c in subs]
    return out


@pytest.mark.parametrize(("tool", "cmd"), _commands(), ids=[t for t, _ in _commands()])
def test_every_flag_has_its_environment_variable(tool: str, cmd: click.Command) -> None:
    """`--evict-after` is EDGEFD_EVICT_AFTER in every tool and subcommand, named for the flag (not
    click's parameter name: `--api` is EDGEFD_API), and `--help` says so."""
    ctx = click.Context(cmd, info_name=tool)
    shown = cmd.get_help(ctx)
    for p in cmd.params:
        if not isinstance(p, click.Option) or not p.expose_value or p.hidden:
            assert not p.envvar, p.name  # --help, --version, an old spelling
            continue
        flag = max((o for o in p.opts if o.startswith("--")), key=len)
        want = "EDGEFD_" + flag[2:].upper().replace("-", "_")
        assert isinstance(p.envvar, list) and p.envvar[0] == want, (flag, p.envvar)
        assert want in "".join(shown.split()), want


def _scan(rpi4: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith("EDGEFD_")}
    return subprocess.run(
        [sys.executable, "-m", "edgefd.usb_scan", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
    )


def test_flags_from_the_environment_do_what_the_flags_do(rpi4: Path) -> None:
    by_flags = _scan(rpi4, ["--host-root", str(rpi4), "--dry-run", "-o", "json"], {})
    by_env = _scan(
        rpi4, [], {"EDGEFD_HOST_ROOT": str(rpi4), "EDGEFD_DRY_RUN": "1", "EDGEFD_OUTPUT": "json"}
    )
    assert by_flags.returncode == by_env.returncode == 0, by_env.stderr
    assert by_env.stdout == by_flags.stdout and by_env.stdout.lstrip().startswith("{")


def test_the_command_line_wins_over_the_environment(rpi4: Path) -> None:
    """A manifest's variable is a default an operator can still override by hand."""
    p = _scan(rpi4, ["--host-root", str(rpi4), "--dry-run", "--hold", "1s"], {"EDGEFD_HOLD": "x"})
    assert p.returncode == 0, p.stderr
    bad = _scan(rpi4, ["--host-root", str(rpi4), "--dry-run"], {"EDGEFD_HOLD": "forever"})
    assert bad.returncode == 2 and "'forever' is not a duration" in bad.stderr, bad.stderr
