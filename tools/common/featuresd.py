"""The features.d file format: what producers write and what the sink (and NFD) read.

Parsing follows node-feature-discovery's local source, so a file edgefd writes means the same
thing to nfd-worker. Writing is atomic and idempotent, because a reader (the sink, or NFD's
fsnotify watch) may look at the directory at any instant and a half-written file would look
like "all labels gone".
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger(__name__)

MAX_FILE_SIZE = 65536
DIRECTIVE_PREFIX = "# +"
DEFAULT_FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"


@dataclass(frozen=True)
class Feature:
    """One `key=value` line, with where it came from and what NFD may do with it."""

    key: str
    value: str
    line: int
    label: bool = True
    feature: bool = True


@dataclass(frozen=True)
class ParsedFile:
    name: str
    features: tuple[Feature, ...] = ()
    warnings: tuple[str, ...] = ()
    error: str | None = None  # set when the whole file was skipped

    def labels(self) -> dict[str, str]:
        """Labels this file asks for (later lines win, as in NFD)."""
        return {f.key: f.value for f in self.features if f.label}


def _parse_rfc3339(text: str) -> datetime:
    t = text.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    dt = datetime.fromisoformat(t)
    if dt.tzinfo is None:
        raise ValueError("no time zone offset")
    return dt


def _is_utf8(line: str) -> bool:
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:  # surrogate-escaped bytes from parse_bytes
        return False
    return True


def parse_text(text: str, name: str = "<stdin>", now: datetime | None = None) -> ParsedFile:
    """Parse feature-file content with node-feature-discovery's semantics."""
    now = now or datetime.now(UTC)
    features: list[Feature] = []
    warnings: list[str] = []
    expired = False
    skip_label = skip_feature = False
    # split on \n only, as NFD does: str.splitlines() would also split at \x0b, \x1c, \u2028 ...
    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        if not line.isascii() and not _is_utf8(line):
            warnings.append(f"{name}:{lineno}: not UTF-8 text; line skipped")
            continue
        if line.startswith("#"):
            if not line.startswith(DIRECTIVE_PREFIX):
                continue
            directive = line[len(DIRECTIVE_PREFIX) :].strip()
            if directive == "no-label":
                skip_label = True
            elif directive == "no-feature":
                skip_feature = True
            elif directive.startswith("expiry-time="):
                try:
                    expired = _parse_rfc3339(directive.split("=", 1)[1]) < now
                except ValueError as e:
                    warnings.append(f"{name}:{lineno}: bad expiry-time directive ({e}); ignored")
            else:
                warnings.append(f"{name}:{lineno}: unknown directive {directive!r}; ignored")
            continue
        if expired:
            continue
        key, sep, value = line.partition("=")
        features.append(
            Feature(
                key=key if sep else line,
                value=value if sep else "true",
                line=lineno,
                label=not skip_label,
                feature=not skip_feature,
            )
        )
        skip_label = skip_feature = False
    return ParsedFile(name=name, features=tuple(features), warnings=tuple(warnings))


def parse_bytes(data: bytes, name: str = "<stdin>", now: datetime | None = None) -> ParsedFile:
    """Parse raw file bytes, refusing what NFD refuses (over 64 KiB) and undecodable text."""
    if len(data) > MAX_FILE_SIZE:
        return ParsedFile(
            name=name, error=f"{name}: {len(data)} bytes, over the {MAX_FILE_SIZE}-byte limit"
        )
    # Undecodable bytes are kept as surrogates so that only their lines are refused, with a
    # warning: one bad line must not cost a producer all its other labels.
    text = data.decode("utf-8", "surrogateescape")
    if "\x00" in text:
        return ParsedFile(name=name, error=f"{name}: contains NUL bytes; not a feature file")
    return parse_text(text, name, now)


def read_file(path: Path, now: datetime | None = None) -> ParsedFile:
    """Read one feature file without ever loading more than the size limit."""
    name = path.name
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_SIZE + 1)
            if len(data) > MAX_FILE_SIZE:
                size = max(os.fstat(fh.fileno()).st_size, len(data))
                return ParsedFile(
                    name=name, error=f"{name}: {size} bytes, over the {MAX_FILE_SIZE}-byte limit"
                )
    except OSError as e:
        return ParsedFile(name=name, error=f"{name}: cannot read ({e.strerror or e})")
    return parse_bytes(data, name, now)


def list_feature_files(directory: Path) -> list[Path]:
    """Regular files NFD would read, in NFD's order (file name); dot-files are in-flight temps."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    out = []
    for e in entries:
        if e.name.startswith("."):
            continue
        try:
            if e.is_file(follow_symlinks=True):
                out.append(Path(e.path))
        except OSError:
            continue
    return out


@dataclass(frozen=True)
class MergedFeatures:
    """The union of a directory's files: the label set, where each came from, what went wrong."""

    labels: dict[str, str] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)  # key -> "file:line"
    files: tuple[ParsedFile, ...] = ()
    warnings: tuple[str, ...] = ()


def merge(files: Iterable[ParsedFile]) -> MergedFeatures:
    """Merge parsed files in order; a later file wins a conflicting key, with a warning."""
    labels: dict[str, str] = {}
    origin: dict[str, str] = {}
    warnings: list[str] = []
    parsed = tuple(files)
    for pf in parsed:
        if pf.error:
            warnings.append(pf.error)
            continue
        warnings.extend(pf.warnings)
        for f in pf.features:
            if not f.label:
                continue
            where = f"{pf.name}:{f.line}"
            prev = origin.get(f.key)
            if prev and not prev.startswith(pf.name + ":") and labels[f.key] != f.value:
                warnings.append(
                    f"{where}: {f.key}={f.value!r} overrides {labels[f.key]!r} from {prev}"
                )
            labels[f.key] = f.value
            origin[f.key] = where
    return MergedFeatures(labels, origin, parsed, tuple(warnings))


def read_directory(directory: Path, now: datetime | None = None) -> MergedFeatures:
    return merge(read_file(p, now) for p in list_feature_files(directory))


def render(labels: Mapping[str, str], producer: str | None = None) -> bytes:
    """The exact bytes a producer writes: sorted, one `key=value` a line, stable across runs."""
    lines = []
    if producer:
        lines.append(f"# written by {producer} (edgefd); rewritten on every run, do not edit")
    lines.extend(f"{k}={labels[k]}" for k in sorted(labels))
    return ("\n".join(lines) + "\n").encode() if lines else b""


def write_atomic(path: Path, data: bytes) -> bool:
    """Replace `path` with `data` atomically; return False (and touch nothing) if unchanged.

    The temp file is a dot-file in the same directory, so readers skip it and the rename stays
    on one filesystem; it is fsynced before the rename and the directory after, so a crash
    leaves either the old or the new file, never a truncated one.
    """
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            if fh.read(len(data) + 1) == data:
                return False
    except FileNotFoundError:
        pass
    except IsADirectoryError as e:
        raise OSError(e.errno, f"{path} is a directory") from e
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # lazy: a dry run never writes

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return True


def write_feature_file(
    directory: Path, producer: str, labels: Mapping[str, str]
) -> tuple[Path, bool]:
    """Write a producer's own file (named after the producer); return (path, changed)."""
    path = Path(directory) / producer
    return path, write_atomic(path, render(labels, producer))
