"""What the tools print as data on stdout: exact bytes (dry runs) and JSON documents.

Logs go to stderr; stdout is for pipelines (`usb-scan --dry-run | feature-sink --features -`),
so nothing else may be written here.
"""

from __future__ import annotations

import sys
from typing import Any


def write_stdout(data: bytes) -> None:
    """Dry-run output: exactly the bytes that would have been written."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _valid_text(obj: Any) -> Any:
    """Replace lone surrogates (undecodable bytes read with surrogateescape) by `\\xNN` text, so
    the document is valid UTF-8 JSON that strict parsers accept."""
    if isinstance(obj, str):
        if obj.isascii():
            return obj
        try:
            obj.encode("utf-8")
            return obj
        except UnicodeEncodeError:
            raw = obj.encode("utf-8", "surrogateescape")
            return raw.decode("utf-8", "backslashreplace")
    if isinstance(obj, dict):
        return {_valid_text(k): _valid_text(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_valid_text(v) for v in obj]
    return obj


def emit_json(obj: Any) -> None:
    """One JSON document on stdout, indented, keys sorted (stable for diffs)."""
    import json

    text = json.dumps(_valid_text(obj), indent=2, sort_keys=True, ensure_ascii=False)
    write_stdout(text.encode("utf-8") + b"\n")
