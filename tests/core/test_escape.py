"""edgefd.core.escape: text from devices and files shown as one printable, encodable line."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from edgefd.core.escape import escaping_formatter, printable


def test_ordinary_text_is_left_alone() -> None:
    for text in ("", "Google Inc.", "Café Ltd", "日本語 USB", "a\\nb", "tab\u00a0nbsp"):
        assert printable(text) == text


def test_what_could_forge_or_hide_a_line_is_escaped() -> None:
    assert printable("a\nb\r\tc") == "a\\nb\\r\\tc"
    assert printable("\x1b[2J\x00\x7f\x85") == "\\x1b[2J\\x00\\x7f\\x85"
    assert printable("x\u2028y\u2029z") == "x\\u2028y\\u2029z"
    assert printable("abc\u202edcba\u2066") == "abc\\u202edcba\\u2066"  # bidi overrides


def test_undecodable_bytes_show_as_themselves() -> None:
    raw = b"Caf\xe9 \xff"
    assert printable(raw.decode("utf-8", "surrogateescape")) == "Caf\\xe9 \\xff"


@settings(max_examples=300, derandomize=True)
@given(st.text(alphabet=st.characters(codec=None)))
def test_always_one_encodable_line(text: str) -> None:
    out = printable(text)
    out.encode("utf-8", "strict")  # no lone surrogate left
    assert len(out.splitlines()) <= 1
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in out)
    assert not set(out) & set("\u2028\u2029\u200e\u200f\u202a\u202b\u202c\u202d\u202e")


def test_the_log_formatter_escapes_the_message_but_not_a_traceback() -> None:
    code = (
        "import logging, sys\n"
        "from edgefd.core.escape import escaping_formatter\n"
        "h = logging.StreamHandler(sys.stderr)\n"
        "h.setFormatter(escaping_formatter('t: %(levelname)s: %(message)s'))\n"
        "log = logging.getLogger('x'); log.addHandler(h)\n"
        "log.warning('serial %s', 'AB\\nt: ERROR: forged')\n"
        "try:\n"
        "    raise ValueError('boom')\n"
        "except ValueError:\n"
        "    log.exception('failed')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    lines = p.stderr.splitlines()
    assert lines[0] == "t: WARNING: serial AB\\nt: ERROR: forged"
    assert lines[1] == "t: ERROR: failed" and lines[2].startswith("Traceback")
    assert escaping_formatter("%(message)s") is not None
