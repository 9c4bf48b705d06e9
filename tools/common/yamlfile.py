"""Reading the YAML files edgefd takes from people (scanner configs, the device plugin's
resources, the accelerator catalogue), with one error wording.

PyYAML is imported only here and only when a file is actually parsed: it costs more than a
whole scan of a small node, and most runs read no YAML at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .cli import BadInput


def parse_yaml(text: str, source: str | Path) -> Any:
    """Parse YAML text (safe loader, the C one when present); a syntax error is BadInput."""
    import yaml

    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise BadInput(f"{source}: not valid YAML: {e}") from None


def read_text(path: str | Path, what: str) -> str:
    """A config file's text; unreadable or not UTF-8 is BadInput naming `what` it was."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"cannot read {what} {path}: {e}") from None


def read_yaml(path: str | Path, what: str) -> Any:
    return parse_yaml(read_text(path, what), path)
