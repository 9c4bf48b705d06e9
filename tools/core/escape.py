"""Showing text that came from a device or a file, safely: one line, visible, encodable.

A USB descriptor string (serial, manufacturer), a sysfs or devicetree name or a line of a config
file is chosen by whoever made the device or the file. Printed as is, a newline in it starts
what looks like a log line of our own (`...\\nusb-scan: ERROR: ...`), a carriage return or an
ANSI escape rewrites the terminal, a bidirectional override reorders what the reader sees, and
an undecodable byte (a lone surrogate after `surrogateescape`) makes the write itself fail.
`printable` shows each of those as an escape instead: `\\n`, `\\x1b`, `\\u202e`, and `\\xNN` for
an undecodable byte (the byte itself). Everything else, including any other non-ASCII text,
is left alone, so ordinary names read as they are.

Used wherever such text reaches a person: every log message (`escaping_formatter`, installed by
edgefd.core.log), the one-line error of a failed command (edgefd.cli), --explain and dry-run
text.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging


@cache  # compiled on first use: most runs never print anything unsafe
def _unsafe() -> re.Pattern[str]:
    # C0 controls, DEL, C1 controls, line and paragraph separators, bidirectional controls, and
    # surrogates (a lone one is an undecodable byte read with surrogateescape)
    return re.compile(
        "[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
    )


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    named = _NAMED.get(c)
    if named is not None:
        return named
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for the byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with control, bidirectional-override and undecodable characters escaped."""
    if text.isprintable():  # the common case: nothing to do, and no regex run
        return text
    return _unsafe().sub(_escape, text)


def escaping_formatter(fmt: str) -> logging.Formatter:
    """A log Formatter whose messages are always one printable line (a traceback that follows
    a message, with -v, keeps its own lines). `logging` is imported only here, when a message
    is about to be shown (see edgefd.core.log)."""
    import logging

    class EscapingFormatter(logging.Formatter):
        def formatMessage(self, record: logging.LogRecord) -> str:
            record.message = printable(record.message)
            return super().formatMessage(record)

    return EscapingFormatter(fmt)
