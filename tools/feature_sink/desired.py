"""What the node should carry: the features.d files read, merged and checked.

Only `read_directory` and `read_stream` touch anything outside memory (the read itself); the
rest is pure so the sink's decisions can be tested without a filesystem or a cluster.

Each file is a *producer*. The sink keeps, per producer, the labels it asked for, because
removal is decided per producer: a label goes away when the file that set it says so, not when
the file vanishes (a producer restarting may delete and rewrite its file).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from edgefd.core.errors import EdgefdError
from edgefd.core.featuresd import ParsedFile, merge, parse_bytes, read_feature_files, shown
from edgefd.core.labels import NamespacePolicy, Rejected, check_label, qualify
from edgefd.core.notices import Notice, read_notices

from .namespaces import SINK_POLICY

STDIN_PRODUCER = "stdin"
# the files of the host's own features.d (--host-features-dir) are producers of their own
HOST_PREFIX = "host:"
NAME_MAX_BYTES = 255  # a file name's limit on Linux


class FeaturesDirGone(EdgefdError):
    """The features directory vanished while the sink runs (a volume unmounted, a path
    replaced). Not "every producer's file is gone": nothing is removed; the sync is retried."""


def check_producer_name(name: str) -> str | None:
    """Why `name` cannot be a producer (a features.d file name edgefd accepts), else None.

    Producer names are keys of the ownership annotation, so they must survive a round trip
    through the API server's JSON unchanged (no undecodable bytes) and be safe to show in logs
    and Events (no control characters)."""
    if not name or name.startswith("."):
        return "empty, or a dot-file (an in-flight temporary)"
    if "/" in name or "\x00" in name:
        return "contains '/' or NUL"
    if not name.isprintable():
        return "contains control characters or bytes that are not UTF-8"
    if len(name.encode()) > NAME_MAX_BYTES:
        return f"longer than {NAME_MAX_BYTES} bytes"
    return None


@dataclass(frozen=True)
class Desired:
    """The desired label state and everything a person needs to know about how it was built.

    `producers` maps a producer (file name) to the valid labels it wins after merging; a key
    appears under exactly one producer. `present` lists the producers whose files were read
    successfully: only those may cause removals. `authoritative` is False for a stream
    (`--features -`): it speaks for itself only, so other producers' labels are left alone.
    `settling` lists present producers whose file changed less than the settle time ago (it
    may be caught mid-rewrite): their labels are added and changed, but none is removed until
    the file has been quiet; `recheck_at` is when to read again to find out.
    """

    producers: dict[str, dict[str, str]] = field(default_factory=dict)
    present: frozenset[str] = frozenset()
    rejected: tuple[Rejected, ...] = ()
    warnings: tuple[str, ...] = ()
    authoritative: bool = True
    settling: frozenset[str] = frozenset()
    recheck_at: datetime | None = None
    notices: tuple[Notice, ...] = ()  # the pod's other containers' (edgefd.core.notices)

    @property
    def labels(self) -> dict[str, str]:
        """All desired labels, flattened."""
        out: dict[str, str] = {}
        for labels in self.producers.values():
            out.update(labels)
        return out


def build_desired(
    files: Iterable[ParsedFile],
    policy: NamespacePolicy = SINK_POLICY,
    authoritative: bool = True,
) -> Desired:
    """Merge parsed files with NFD's rules, then validate every label that won.

    A key set by two files belongs to the later one (NFD's rule), so ownership follows the
    value actually applied. Invalid labels are kept out and reported with file and line; a
    file skipped whole (too big, not text) does not count as present, so its previous labels
    fall under the removal grace period instead of disappearing at once.
    """
    parsed = [_qualified(_usable(pf)) for pf in files]
    merged = merge(parsed)
    producers: dict[str, dict[str, str]] = {}
    rejected: list[Rejected] = []
    present = frozenset(pf.name for pf in parsed if pf.error is None)
    for name in sorted(present):
        producers[name] = {}
    for key, value in merged.labels.items():
        where = merged.origin[key]
        producer = where.rsplit(":", 1)[0]
        reason = check_label(key, value, policy)
        if reason:
            rejected.append(Rejected(key, value, reason, where))
            continue
        producers[producer][key] = value
    rejected.sort(key=lambda r: (r.source, r.key))
    return Desired(
        producers=producers,
        present=present,
        rejected=tuple(rejected),
        warnings=merged.warnings,
        authoritative=authoritative,
    )


def _usable(pf: ParsedFile) -> ParsedFile:
    reason = None if pf.error else check_producer_name(pf.name)
    if reason is None:
        return pf
    return ParsedFile(name=pf.name, error=f"{shown(pf.name)}: file name {reason}; not read")


def _qualified(pf: ParsedFile) -> ParsedFile:
    """Give unqualified keys NFD's default namespace before merging, as nfd-worker does, so
    a features.d file means the same labels under NFD and under edgefd (and `foo` and
    `feature.node.kubernetes.io/foo` in two files are recognised as the same label)."""
    if all("/" in f.key for f in pf.features):
        return pf
    return replace(pf, features=tuple(replace(f, key=qualify(f.key)) for f in pf.features))


def _read_files(directory: Path, now: datetime, prefix: str = "") -> list[ParsedFile]:
    try:
        return read_feature_files(directory, now, prefix)
    except FileNotFoundError:
        raise FeaturesDirGone(
            f"features dir {directory} is gone (unmounted?); every label is kept until it is back"
        ) from None
    except NotADirectoryError:
        raise FeaturesDirGone(
            f"features dir {directory} is no longer a directory; every label is kept"
        ) from None


def _not_host(pf: ParsedFile) -> ParsedFile:
    """A file of the pod's directory may not pose as one of the host's."""
    if not pf.name.startswith(HOST_PREFIX):
        return pf
    why = f"{shown(pf.name)}: names starting with {HOST_PREFIX!r} are the host's files; not read"
    return ParsedFile(name=pf.name, error=why)


def read_directory(
    directory: Path,
    policy: NamespacePolicy = SINK_POLICY,
    now: datetime | None = None,
    settle: float = 0.0,
    host: Path | None = None,
) -> Desired:
    """Read every feature file NFD would read, in NFD's order.

    With `host` (the host's own features.d, --host-features-dir) its files are read too, after
    the directory's, each a producer named `host:<file>` under the same rules: so a key set in
    both is the host file's (NFD's "the later file wins", with a warning), and a host file
    that goes away keeps its labels for the removal grace like any producer's.

    A producer that rewrites its file in place (truncate, then write) can be read empty or
    half written. So a file modified less than `settle` seconds ago is *settling*: an
    unterminated last line is not taken yet, and the labels it no longer lists are not removed
    yet (see reconcile); it is read again once quiet. Raises FeaturesDirGone when the directory
    is missing: that is a fault to retry, never "every producer's file is gone".
    """
    now = now or datetime.now(UTC)
    files = _read_files(directory, now)
    if host is not None:
        files = [_not_host(pf) for pf in files] + _read_files(host, now, HOST_PREFIX)
    settling: set[str] = set()
    latest: float | None = None
    for i, pf in enumerate(files):
        if pf.mtime is None or pf.error or abs(now.timestamp() - pf.mtime) >= settle:
            continue
        settling.add(pf.name)
        latest = pf.mtime if latest is None else max(latest, pf.mtime)
        if pf.partial_line is not None:
            kept = tuple(f for f in pf.features if f.line != pf.partial_line)
            files[i] = replace(pf, features=kept)
    desired = build_desired(files, policy)
    if not settling:
        return desired
    recheck = datetime.fromtimestamp(latest or now.timestamp(), UTC) + timedelta(seconds=settle)
    return replace(
        desired, settling=frozenset(settling) & desired.present, recheck_at=max(recheck, now)
    )


def read_stream(
    data: bytes, policy: NamespacePolicy = SINK_POLICY, now: datetime | None = None
) -> Desired:
    """A features stream (`usb-scan --dry-run | feature-sink --features -`) is one producer.

    It is not authoritative: a stream knows nothing about the files of other producers, so
    applying it must not start their removal clocks.
    """
    return build_desired([parse_bytes(data, STDIN_PRODUCER, now)], policy, authoritative=False)


def with_notices(desired: Desired, directory: Path) -> Desired:
    """`desired` with the notices of the writers whose directories are in `directory` (they
    become Warning Events on the Node, notices.py); what is there and is not a writer's
    directory is a warning."""
    notices, warnings = read_notices(directory)
    if not notices and not warnings:
        return desired
    return replace(desired, notices=notices, warnings=desired.warnings + warnings)
