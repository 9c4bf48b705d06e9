"""The click command of a bus scanner: the two scanners differ only in their bus, their help
and what they run (handed in by the tool, so this layer never imports the scan engine)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import (
    Duration,
    command,
    common_options,
    freeze_at_exit,
    guarded,
    listen_option,
    notice_dir_option,
    watch_options,
)


def create_features_dir_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """A producer writes into an existing features.d (the pod's emptyDir, NFD's directory):
    a missing one is most likely a typo, which must not become a directory no reader watches
    (edgefd.core.publish.features_directory). dt-labeller's as well."""
    return click.option(
        "--create-features-dir",
        is_flag=True,
        help="Create --features-dir (and its parents) if it is missing, instead of refusing.",
    )(f)


def bus_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Options both bus scanners take, on top of edgefd.cli.common_options."""
    opts = [
        click.option(
            "--class-whitelist",
            multiple=True,
            metavar="CLASSES",
            help="Comma-separated class prefixes to label (NFD deviceClassWhitelist); "
            "replaces the default.",
        ),
        click.option(
            "--label-fields",
            multiple=True,
            metavar="FIELDS",
            help="Comma-separated attributes joined into the label name (NFD deviceLabelFields).",
        ),
        click.option(
            "--config",
            "config_path",
            type=click.Path(path_type=Path),
            help="YAML config: an nfd-worker.conf (sources.<bus>) or a bare mapping with "
            "deviceClassWhitelist / deviceLabelFields. Command-line options win.",
        ),
        click.option(
            "--catalogue",
            "catalogue_path",
            type=click.Path(path_type=Path),
            help="Accelerator catalogue YAML (default: the packaged accelerators.yaml).",
        ),
        click.option(
            "--no-capabilities",
            is_flag=True,
            help="Only NFD-compatible labels: no capability labels of edgefd's own.",
        ),
        click.option(
            "--explain",
            is_flag=True,
            help="Print why every device did or did not produce each label; write nothing.",
        ),
        click.option(
            "--watch",
            is_flag=True,
            help="Keep running; rewrite the feature file within a second of a device change.",
        ),
        watch_options,
        click.option(
            "--hold",
            type=Duration(minimum=0.0, maximum=60.0),
            default="3s",
            show_default=True,
            help="With --watch: a device that vanishes keeps its labels this long, and one that "
            "appears at the same port meanwhile is the same device (a Coral or NCS2 "
            "re-enumerating after its firmware loads). 0: no hold.",
        ),
        click.option(
            "--also",
            multiple=True,
            metavar="PRODUCER",
            help="Also publish for this producer (e.g. pci-scan) from the same process: one "
            "interpreter, one watcher, one scan of each bus per change. Repeatable.",
        ),
        listen_option(""),
        notice_dir_option(),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def make_command(tool: str, run: Callable[..., int], help_text: str) -> click.Command:
    """Build the command; `run` gets the options as keyword arguments, and is called only
    when the command runs, so `--help` and usage errors import nothing but click."""

    @command(tool, help=help_text)
    @common_options
    @create_features_dir_option
    @bus_options
    @guarded(tool)
    def scanner(**kwargs: Any) -> int:
        if not kwargs.get("watch"):
            freeze_at_exit()
        return run(**kwargs)

    return scanner
