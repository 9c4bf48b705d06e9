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
from datetime import datetime
from pathlib import Path

from edgefd.core.featuresd import ParsedFile, merge, parse_bytes, read_feature_files
from edgefd.core.labels import DEFAULT_POLICY, NamespacePolicy, Rejected, check_label, qualify

STDIN_PRODUCER = "stdin"


@dataclass(frozen=True)
class Desired:
    """The desired label state and everything a person needs to know about how it was built.

    `producers` maps a producer (file name) to the valid labels it wins after merging; a key
    appears under exactly one producer. `present` lists the producers whose files were read
    successfully: only those may cause removals. `authoritative` is False for a stream
    (`--features -`): it speaks for itself only, so other producers' labels are left alone.
    """

    producers: dict[str, dict[str, str]] = field(default_factory=dict)
    present: frozenset[str] = frozenset()
    rejected: tuple[Rejected, ...] = ()
    warnings: tuple[str, ...] = ()
    authoritative: bool = True

    @property
    def labels(self) -> dict[str, str]:
        """All desired labels, flattened."""
        out: dict[str, str] = {}
        for labels in self.producers.values():
            out.update(labels)
        return out


def build_desired(
    files: Iterable[ParsedFile],
    policy: NamespacePolicy = DEFAULT_POLICY,
    authoritative: bool = True,
) -> Desired:
    """Merge parsed files with NFD's rules, then validate every label that won.

    A key set by two files belongs to the later one (NFD's rule), so ownership follows the
    value actually applied. Invalid labels are kept out and reported with file and line; a
    file skipped whole (too big, not text) does not count as present, so its previous labels
    fall under the removal grace period instead of disappearing at once.
    """
    parsed = [_qualified(pf) for pf in files]
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


def _qualified(pf: ParsedFile) -> ParsedFile:
    """Give unqualified keys NFD's default namespace before merging, as nfd-worker does, so
    a features.d file means the same labels under NFD and under edgefd (and `foo` and
    `feature.node.kubernetes.io/foo` in two files are recognised as the same label)."""
    if all("/" in f.key for f in pf.features):
        return pf
    return replace(pf, features=tuple(replace(f, key=qualify(f.key)) for f in pf.features))


def read_directory(
    directory: Path, policy: NamespacePolicy = DEFAULT_POLICY, now: datetime | None = None
) -> Desired:
    """Read every feature file NFD would read, in NFD's order. FileNotFoundError when the
    directory is missing: the caller decides (a configuration error at start-up)."""
    return build_desired(read_feature_files(directory, now), policy)


def read_stream(
    data: bytes, policy: NamespacePolicy = DEFAULT_POLICY, now: datetime | None = None
) -> Desired:
    """A features stream (`usb-scan --dry-run | feature-sink --features -`) is one producer.

    It is not authoritative: a stream knows nothing about the files of other producers, so
    applying it must not start their removal clocks.
    """
    return build_desired([parse_bytes(data, STDIN_PRODUCER, now)], policy, authoritative=False)
