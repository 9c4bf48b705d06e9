"""Logging for the one-shot tools (edgefd.core.log): messages go to stderr as `tool: LEVEL:
message`, only from the configured level on (warnings by default, info for a service), and a
shown message written before anything imported `logging` does not import it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_logging_goes_to_stderr_with_tool_name() -> None:
    code = (
        "import logging; from edgefd import cli\n"
        "cli.setup_logging(0, 'tool'); logging.getLogger('x').warning('careful')\n"
        "logging.getLogger('x').info('hidden')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert p.stdout == ""
    assert p.stderr == "tool: WARNING: careful\n"


def test_a_shown_message_does_not_import_logging_and_a_service_says_more() -> None:
    code = (
        "import sys; from edgefd.core import log\n"
        "log.configure(0, 'tool'); x = log.get_logger('x')\n"
        "x.info('hidden'); x.warning('careful\\nforged: line')\n"
        "assert 'logging' not in sys.modules, 'logging was imported'\n"
        "log.serving(); x.info('now shown'); x.debug('still hidden')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stderr == "tool: WARNING: careful\\nforged: line\ntool: INFO: now shown\n"
