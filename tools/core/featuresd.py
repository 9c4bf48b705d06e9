"""The features.d file format: what producers write and what the sink (and NFD) read.

Parsing follows node-feature-discovery's local source, so a file edgefd writes means the same
thing to nfd-worker. Writing lives in publish.py.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from .publish import render as render  # producers write with it; readers' tests use it
from .regular import Refused, read_regular

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
    """One file's features and problems. Messages name the file, the line and the reason, never
    a line's content: what sits in features.d is not necessarily meant to be published.

    `mtime` and `partial_line` (the number of an unterminated last line) are set when the file
    was read from a directory, so a reader can tell a file caught in the middle of an in-place
    rewrite."""

    name: str
    features: tuple[Feature, ...] = ()
    warnings: tuple[str, ...] = ()
    error: str | None = None  # set when the whole file was skipped
    mtime: float | None = None
    partial_line: int | None = None

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


def shown(name: str) -> str:
    """A file name as messages show it: control characters and undecodable bytes escaped, so
    a file name can never forge a log line."""
    return name if name.isprintable() else ascii(name)


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
    where = shown(name)
    expired = False
    skip_label = skip_feature = False
    # split on \n only, as NFD does: str.splitlines() would also split at \x0b, \x1c, \u2028 ...
    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        if not line.isascii() and not _is_utf8(line):
            warnings.append(f"{where}:{lineno}: not UTF-8 text; line skipped")
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
                except ValueError:
                    warnings.append(
                        f"{where}:{lineno}: expiry-time is not an RFC 3339 time with a time "
                        "zone offset; directive ignored"
                    )
            else:
                warnings.append(
                    f"{where}:{lineno}: unknown directive (known: expiry-time=, no-label, "
                    "no-feature); ignored"
                )
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
            name=name,
            error=f"{shown(name)}: {len(data)} bytes, over the {MAX_FILE_SIZE}-byte limit",
        )
    # Undecodable bytes are kept as surrogates so that only their lines are refused, with a
    # warning: one bad line must not cost a producer all its other labels.
    text = data.decode("utf-8", "surrogateescape")
    if "\x00" in text:
        return ParsedFile(name=name, error=f"{shown(name)}: contains NUL bytes; not a feature file")
    return parse_text(text, name, now)


def read_entry(
    directory_fd: int, name: str, now: datetime | None = None, producer: str | None = None
) -> ParsedFile:
    """Read one entry of an open features.d directory, refusing anything but a regular file.

    The directory is shared with other containers: a symlink planted there must not make the
    sink read (and quote) a file elsewhere, and a FIFO must not block it; so the entry is read
    relative to the directory by the one bounded reader (regular.py).
    `producer` is the name the result and its messages go by (default: the file name).
    """
    label = producer or name
    where = shown(label)
    try:
        data, st = read_regular(name, MAX_FILE_SIZE, dir_fd=directory_fd)
    except FileNotFoundError as e:
        return ParsedFile(name=label, error=f"{where}: cannot open ({e.strerror or e})")
    except Refused as e:
        return ParsedFile(name=label, error=_refused(where, e))
    parsed = parse_bytes(data, label, now)
    partial = data.count(b"\n") + 1 if data and not data.endswith(b"\n") else None
    return replace(parsed, mtime=st.st_mtime, partial_line=partial)


def _refused(where: str, e: Refused) -> str:
    if e.kind == "symlink":
        return f"{where}: is a symlink; not read"
    if e.kind == "not-regular":
        return f"{where}: not a regular file; not read"
    if e.kind == "too-large":
        if "growing" in str(e):
            return f"{where}: over the {MAX_FILE_SIZE}-byte limit (still growing?)"
        return f"{where}: {e.size} bytes, over the {MAX_FILE_SIZE}-byte limit"
    return f"{where}: {e}"


def read_feature_files(
    directory: Path, now: datetime | None = None, prefix: str = ""
) -> list[ParsedFile]:
    """Every entry NFD would read, in NFD's order (file name); dot-files are in-flight temps.
    Each goes by `prefix` + its file name (a second directory's files are other producers).

    Entries that are not regular files (symlinks, FIFOs, directories) come back as ParsedFile
    errors, so the caller reports them instead of silently ignoring a misplaced file.
    FileNotFoundError when the directory itself is missing: the caller decides what that means.
    """
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        out = []
        for name in sorted(os.listdir(dfd)):
            if name.startswith("."):
                continue
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed while listing
            if stat.S_ISDIR(st.st_mode):
                continue  # NFD skips subdirectories too
            out.append(read_entry(dfd, name, now, prefix + name))
        return out
    finally:
        os.close(dfd)


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
                # both places are named; the key and the values are not (they may be content)
                prev_name, prev_line = prev.rsplit(":", 1)
                warnings.append(
                    f"{shown(pf.name)}:{f.line}: overrides the value set at "
                    f"{shown(prev_name)}:{prev_line} (the later file wins)"
                )
            labels[f.key] = f.value
            origin[f.key] = where
    return MergedFeatures(labels, origin, parsed, tuple(warnings))
