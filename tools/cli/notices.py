"""The one `--notice-dir` option: where a long-running tool leaves a failed reload for
feature-sink to post as a Warning Event, and where feature-sink reads them
(edgefd.core.notices). Kept to click, as every option of the start-up floor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

NOTICE_WRITER_HELP = (
    "This tool's own directory, which feature-sink reads as this writer's (the pod mounts it "
    "into feature-sink at <its --notice-dir>/<writer>): a failed configuration reload is "
    "written there as the file `notice`, which feature-sink posts as a Warning Event on the "
    "Node. Unset: /readyz and the metrics only."
)


def notice_dir_option(help_text: str = NOTICE_WRITER_HELP) -> Callable[[F], F]:
    """Where a long-running tool leaves its notice (a failed reload) for feature-sink to post
    as a Warning Event, and where feature-sink reads them, one directory per writer:
    edgefd.core.notices. Must exist (an emptyDir of the pod's): a typo must not make a
    directory nobody reads."""
    return click.option(
        "--notice-dir",
        type=click.Path(exists=True, file_okay=False, path_type=str),
        default=None,
        help=help_text,
    )
