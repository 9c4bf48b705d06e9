"""Reading the YAML documents people hand edgefd (the accelerator catalogue, the device plugin's
resources, NFD-style scanner configs), with one way of saying what is wrong:

    <file>: <field path>: <what was wrong>        e.g.
    resources.yaml: resources[1].usb[0].vendor: 'xyz1' is not 4 hex digits

An operator reading a crash-looping pod's log has nothing else to go on, so every accessor
names the field it was checking. PyYAML is imported only here and only when a file is actually
parsed: it costs more than a whole scan of a small node, and most runs read no YAML at all.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .errors import BadInput

_HEX = re.compile(r"[0-9a-f]+")


def parse_yaml(text: str, source: str | Path) -> Any:
    """Parse YAML text (safe loader, the C one when present); a syntax error or a key given
    twice in one mapping is BadInput."""
    import yaml

    try:
        return yaml.load(text, Loader=_loader())
    except _DuplicateKey as e:
        raise BadInput(f"{source}:{e}") from None
    except yaml.YAMLError as e:
        raise BadInput(yaml_error(e, source)) from None


class _DuplicateKey(Exception):
    """`line:col: duplicate key …`: a mapping names a key twice."""


_LOADER: Any = None


def _loader() -> Any:
    """The safe loader, refusing a key given twice in one mapping. PyYAML keeps the last
    silently (so does the YAML spec's own leniency in practice): a resource pasted twice with
    an edit in the first copy, or a `replicas:` repeated further down, would run a
    configuration nobody reads in the file. Made on first use: PyYAML is imported only here."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            def construct_mapping(self, node: Any, deep: bool = False) -> Any:
                if isinstance(node, yaml.MappingNode):
                    _refuse_duplicates(self, node)
                return super().construct_mapping(node, deep=deep)

        _LOADER = Loader
    return _LOADER


def _refuse_duplicates(loader: Any, node: Any) -> None:
    """Raise _DuplicateKey for the second of two keys of `node` that are equal as Python
    keys (`1` and `0x1`, or `true` and `1`, would also become one key). Merge keys (`<<`)
    are left to PyYAML: a key given beside a merge overrides the merged one, by design."""
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.setdefault(key, key_node)
        except TypeError:  # an unhashable key: PyYAML refuses it itself
            continue
        if first is not key_node:
            text = key_node.value if isinstance(key_node.value, str) else str(key)
            mark, was = key_node.start_mark, first.start_mark
            raise _DuplicateKey(
                f"{mark.line + 1}:{mark.column + 1}: duplicate key {text!r} (first at line "
                f"{was.line + 1}); a key may appear only once in a mapping"
            )


# PyYAML's "while parsing a block collection" says what was open, in its grammar's words
_OPEN = {
    "block collection": "the list",
    "block sequence": "the list",
    "flow sequence": "the [...] list",
    "block mapping": "the mapping",
    "flow mapping": "the {...} mapping",
    "quoted scalar": "the quoted string",
    "plain scalar": "the value",
    "flow node": "the value",
    "block node": "the value",
    "simple key": "the key",
}


def yaml_error(e: Exception, source: str | Path) -> str:
    """A YAML syntax error as compilers say theirs, `file:line:col: problem (in what was open
    that starts at line:col)`, on one line: PyYAML's own text spans lines and names
    `<unicode string>` for text parsed from memory, which is every file edgefd reads."""
    problem = " ".join(str(getattr(e, "problem", None) or "").split())
    mark = getattr(e, "problem_mark", None)
    if not problem or mark is None:
        return f"{source}: not valid YAML: {' '.join(str(e).split())}"
    out = f"{source}:{mark.line + 1}:{mark.column + 1}: {problem}"
    context = " ".join(str(getattr(e, "context", None) or "").split())
    cmark = getattr(e, "context_mark", None)
    # a context at the problem itself ("while parsing a flow node") adds nothing
    if context and cmark is not None and (cmark.line, cmark.column) != (mark.line, mark.column):
        what = context.removeprefix("while parsing ").removeprefix("while scanning ")
        what = _OPEN.get(what.removeprefix("a ").removeprefix("an "), "")
        where = f"{cmark.line + 1}:{cmark.column + 1}"
        out += f" (in {what} that starts at {where})" if what else f" ({context} at {where})"
    return out


# far above any real one (a ConfigMap holds at most 1 MiB), far below what hurts a 256 Mi pod
MAX_CONFIG_BYTES = 4 << 20


def read_text(
    path: str | Path, what: str, limit: int = MAX_CONFIG_BYTES, *, pipe: bool = False
) -> str:
    """A config file's text; unreadable, not a regular file (a FIFO would block the start, or
    every reload, for ever), over `limit` or not UTF-8 is BadInput naming `what` it was. The
    one reader of every tool's configuration (regular.py). With `pipe`, a pipe is read to its
    end as well (bounded all the same): a kubeconfig named on the command line may be one
    (`--kubeconfig <(...)`), read once at the start, where a stop signal ends the wait."""
    from .regular import Refused, read_regular

    try:
        if pipe:
            with open(path, "rb") as fh:
                data = fh.read(limit + 1)
            if len(data) > limit:
                raise Refused("too-large", f"larger than {limit} bytes", len(data))
        else:
            data, _ = read_regular(path, limit, follow=True)
        return data.decode("utf-8")
    except Refused as e:
        raise BadInput(f"cannot read {what} {path}: {e}") from None
    except UnicodeDecodeError as e:
        raise BadInput(
            f"cannot read {what} {path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at "
            f"offset {e.start})"
        ) from None
    except OSError as e:
        raise BadInput(f"cannot read {what} {path}: {e.strerror or e}") from None


def read_yaml(path: str | Path, what: str) -> Any:
    return parse_yaml(read_text(path, what), path)


def _bound(minimum: float, maximum: float) -> str:
    return f">= {minimum:.12g}" if maximum == math.inf else f"{minimum:.12g} to {maximum:.12g}"


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class Fields:
    """One mapping of a document, at a field path, with typed accessors that fail with
    `<source>: <path>.<key>: <reason>`. Unknown keys are refused up front: a typo in a key
    must not silently fall back to a default."""

    def __init__(
        self, obj: Any, where: str = "", allowed: Iterable[str] = (), source: str = ""
    ) -> None:
        self.source = source
        self.where = where
        if not isinstance(obj, Mapping):
            raise self.error(f"must be a mapping, not {_type_name(obj)}")
        self.obj = obj
        allowed = set(allowed)
        unknown = sorted(str(k) for k in obj if k not in allowed)
        if unknown:
            known = ", ".join(sorted(allowed)) or "none"
            raise self.error(f"unknown field (known: {known})", unknown[0])

    # -- paths and errors

    def path(self, key: str | int | None = None) -> str:
        if key is None:
            return self.where
        if isinstance(key, int):
            return f"{self.where}[{key}]"
        return f"{self.where}.{key}" if self.where else key

    def error(self, reason: str, key: str | int | None = None) -> BadInput:
        where = self.path(key)
        parts = [p for p in (self.source, where) if p]
        return BadInput(": ".join([*parts, reason]))

    def child(self, key: str, allowed: Iterable[str]) -> Fields:
        """The nested mapping at `key` (absent: an empty one)."""
        return Fields(self.obj.get(key) or {}, self.path(key), allowed, self.source)

    def children(self, key: str, allowed: Iterable[str]) -> list[Fields]:
        """The mappings of the list at `key`, each at its path `key[i]`."""
        return [
            Fields(raw, f"{self.path(key)}[{i}]", allowed, self.source)
            for i, raw in enumerate(self.list(key))
        ]

    # -- accessors

    def str(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        v = self.obj.get(key)
        if v is None:
            if required:
                raise self.error("required", key)
            return default
        if not isinstance(v, str):
            raise self.error(f"must be a string, not {_type_name(v)}", key)
        return v

    def hex(self, key: str, digits: int | tuple[int, int], *, required: bool = False) -> str | None:
        """Bare lower-case hex (`0x` stripped) of exactly `digits`, or of (min, max) digits."""
        v = self.str(key, required=required)
        if v is None:
            return None
        h = v.strip().lower().removeprefix("0x")
        lo, hi = (digits, digits) if isinstance(digits, int) else digits
        if not (lo <= len(h) <= hi and _HEX.fullmatch(h)):
            want = f"{lo} hex digits" if lo == hi else f"{lo} to {hi} hex digits"
            raise self.error(f"{v!r} is not {want}", key)
        return h

    def list(self, key: str) -> list[Any]:
        v = self.obj.get(key)
        if v is None:
            return []
        if not isinstance(v, list):
            raise self.error(f"must be a list, not {_type_name(v)}", key)
        return v

    def str_list(self, key: str) -> list[str] | None:
        """A list of strings (stripped), or None when the key is absent."""
        if self.obj.get(key) is None:
            return None
        items = self.list(key)
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise self.error(f"must be a string, not {_type_name(item)}", f"{key}[{i}]")
        return [item.strip() for item in items]

    def mapping(self, key: str) -> Mapping[Any, Any]:
        v = self.obj.get(key)
        if v is None:
            return {}
        if not isinstance(v, Mapping):
            raise self.error(f"must be a mapping, not {_type_name(v)}", key)
        return v

    def bool(self, key: str, default: bool) -> bool:
        v = self.obj.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.error(f"must be true or false, not {v!r}", key)
        return v

    def number(
        self, key: str, default: float, *, minimum: float = 0.0, maximum: float = math.inf
    ) -> float:
        """A finite number in [minimum, maximum]: `.nan` and `.inf` are refused, because a
        duration that is not a number makes a loop spin or never wake."""
        v = self.obj.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.error(f"must be a finite number, not {v!r}", key)
        if not minimum <= v <= maximum:
            raise self.error(f"{v!r} is out of range (must be {_bound(minimum, maximum)})", key)
        return float(v)

    def duration(
        self, key: str, default: float, *, minimum: float = 0.0, maximum: float = math.inf
    ) -> float:
        """Seconds, bare (`86400`) or with a unit (`24h`, `10m`, `30s`, `250ms`), as every
        edgefd flag takes them (edgefd.core.duration)."""
        from .duration import parse_duration

        v = self.obj.get(key)
        if v is None:
            return default
        try:
            seconds = parse_duration(v)
        except ValueError as e:
            raise self.error(str(e), key) from None
        if not minimum <= seconds <= maximum:
            raise self.error(f"{v!r} is out of range (must be {_bound(minimum, maximum)})", key)
        return seconds

    def integer(self, key: str, default: int, *, minimum: int, maximum: int) -> int:
        v = self.obj.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(f"must be a whole number, not {v!r}", key)
        if not minimum <= v <= maximum:
            raise self.error(f"{v} is out of range (must be {minimum} to {maximum})", key)
        return v
