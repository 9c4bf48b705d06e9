"""Logging for the tools (edgefd.core.log): messages go to stderr, only from the configured
level on (warnings by default, info for a service, `--log-level` whatever the mode), as text
(`<RFC 3339 time> tool: LEVEL: message`) or as one json object per line (`ts`, `level`,
`tool`, `msg` and the call's `extra=` fields); a shown message written before anything
imported `logging` imports neither `logging` nor, in text, `json`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import untimed

REPO = Path(__file__).resolve().parents[2]

# RFC 3339, UTC, milliseconds
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""
    return p


def test_logging_goes_to_stderr_with_tool_name() -> None:
    p = _run(
        "import logging; from edgefd import cli\n"
        "cli.setup_logging(0, 'tool'); logging.getLogger('x').warning('careful')\n"
        "logging.getLogger('x').info('hidden')\n"
    )
    assert untimed(p.stderr) == "tool: WARNING: careful\n"


def test_a_shown_message_does_not_import_logging_and_a_service_says_more() -> None:
    p = _run(
        "import sys; from edgefd.core import log\n"
        "log.configure(0, 'tool'); x = log.get_logger('x')\n"
        "x.info('hidden'); x.warning('careful\\nforged: line', extra={'device': 'd'})\n"
        "assert 'logging' not in sys.modules, 'logging was imported'\n"
        "assert 'json' not in sys.modules, 'json was imported'\n"
        "log.serving(); x.info('now shown'); x.debug('still hidden')\n"
    )
    assert untimed(p.stderr) == "tool: WARNING: careful\\nforged: line\ntool: INFO: now shown\n"


def test_text_lines_begin_with_an_rfc3339_time_then_the_tool_and_level() -> None:
    """Issue 32 item 2: `tool: LEVEL: text` had no time; both paths (before and after
    `logging` is loaded) now write one."""
    p = _run(
        "import logging as _l; from edgefd.core import log\n"
        "log.configure(0, 'usb-scan'); log.get_logger('x').warning('before')\n"
        "_l.getLogger('y').error('through logging')\n"
    )
    lines = p.stderr.splitlines()
    assert re.fullmatch(rf"{TIME} usb-scan: WARNING: before", lines[0]), lines
    assert re.fullmatch(rf"{TIME} usb-scan: ERROR: through logging", lines[1]), lines


def test_json_is_one_object_a_line_with_the_fields_as_keys() -> None:
    """Issue 32 item 2: `--log-format json`: ts, level, tool, msg and the call's fields, from
    the direct path and through `logging` (a library's message too), a traceback in `error`."""
    p = _run(
        "import sys; from edgefd.core import log\n"
        "log.configure(0, 'devplugin', 'json'); log.serving(); x = log.get_logger('x')\n"
        "x.info('device %s: added', 'coral-usb-2-1', extra={'device': 'coral-usb-2-1'})\n"
        "x.debug('hidden')\n"
        "assert 'logging' not in sys.modules, 'logging was imported'\n"
        "import logging; lg = logging.getLogger('lib')\n"
        "log.configure(0, 'devplugin', 'json'); log.serving()  # a service, logging loaded\n"
        "lg.warning('serial %s', 'AB\\nforged', extra={'resource': 'edgefd.io/ncs2'})\n"
        "try:\n    {}['k']\nexcept KeyError:\n    lg.exception('boom')\n"
    )
    lines = p.stderr.splitlines()
    assert len(lines) == 3, p.stderr
    objs = [json.loads(ln) for ln in lines]
    for o in objs:
        assert re.fullmatch(TIME, o["ts"]) and o["tool"] == "devplugin", o
    assert objs[0] == {
        "ts": objs[0]["ts"],
        "level": "info",
        "tool": "devplugin",
        "msg": "device coral-usb-2-1: added",
        "device": "coral-usb-2-1",
    }
    assert objs[1]["level"] == "warning" and objs[1]["msg"] == "serial AB\nforged"
    assert objs[1]["resource"] == "edgefd.io/ncs2"
    assert objs[2]["level"] == "error" and "KeyError" in objs[2]["error"]


def test_log_level_sets_the_level_whatever_the_mode_and_v_still_adds() -> None:
    """Issue 32 item 2: verbosity was only `-v` counts. `--log-level warning` hides a
    service's info; `--log-level debug` shows a one-shot run's debug; `-v` still lowers it."""
    p = _run(
        "from edgefd.core import log\n"
        "x = log.get_logger('x')\n"
        "log.configure(0, 't', 'text', 'warning'); log.serving()\n"
        "x.info('service info hidden'); x.warning('w1')\n"
        "log.configure(0, 't', 'text', 'debug'); x.debug('d1')\n"
        "log.configure(1, 't', 'text', 'error'); x.info('i1'); x.debug('debug hidden')\n"
        "log.configure(0, 't', 'text', 'error'); x.warning('warning hidden'); x.error('e1')\n"
    )
    assert untimed(p.stderr) == "t: WARNING: w1\nt: DEBUG: d1\nt: INFO: i1\nt: ERROR: e1\n"


def test_a_failed_commands_line_is_json_when_the_log_is() -> None:
    p = _run(
        "from edgefd.core import log\n"
        "print(log.failure('t', 'a\\nb'), file=__import__('sys').stderr)\n"
        "log.configure(0, 't', 'json')\n"
        "print(log.failure('t', 'bad input'), file=__import__('sys').stderr)\n"
        "log.say('t', 'no changes')\n"
    )
    first, second, third = p.stderr.splitlines()
    assert first == "t: error: a\\nb"
    assert json.loads(second)["level"] == "error" and json.loads(second)["msg"] == "bad input"
    assert json.loads(third)["msg"] == "no changes"
