"""The one --notice-dir option: a directory that must exist (a typo must not make a directory
nobody reads), also from EDGEFD_NOTICE_DIR like every flag."""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from edgefd.cli import notice_dir_option
from edgefd.cli.envvars import give_env


def _command() -> click.Command:
    @click.command()
    @notice_dir_option()
    def cmd(notice_dir: str | None) -> None:
        click.echo(repr(notice_dir))

    give_env(cmd.params)
    return cmd


def test_unset_is_none_and_an_existing_directory_is_taken(tmp_path: Path) -> None:
    assert CliRunner().invoke(_command(), []).output == "None\n"
    out = CliRunner().invoke(_command(), [], env={"EDGEFD_NOTICE_DIR": str(tmp_path)})
    assert out.exit_code == 0 and out.output == f"{str(tmp_path)!r}\n"


def test_a_missing_directory_or_a_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    for bad in (tmp_path / "missing", tmp_path / "file"):
        out = CliRunner().invoke(_command(), ["--notice-dir", str(bad)])
        assert out.exit_code == 2 and "--notice-dir" in out.output
