"""node-feature-discovery's per-bus settings: which classes are labelled and which attributes
name a label, from defaults, an nfd-worker.conf and the command line, in that order.

A bus brings its constants as `BusRules`; everything else is the same for every bus.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from edgefd.core.errors import UsageError
from edgefd.core.record import Record
from edgefd.core.schema import Fields, read_yaml

WHITELIST_KEY = "deviceClassWhitelist"
FIELDS_KEY = "deviceLabelFields"


class BusRules(Record):
    """NFD's per-bus constants: which attributes may name a label, and the defaults."""

    bus: str
    all_fields: tuple[str, ...]  # canonical order, as NFD joins them
    default_fields: tuple[str, ...]
    fallback_fields: tuple[str, ...]  # NFD's choice when no configured field is valid
    default_whitelist: tuple[str, ...]


class SourceConfig(Record):
    class_whitelist: tuple[str, ...]
    label_fields: tuple[str, ...]


def split_list(values: Iterable[str] | None, option: str = "") -> list[str] | None:
    """`--opt a,b --opt c` -> ['a', 'b', 'c']; None when the option was not given.

    Empty items are refused rather than skipped: `--class-whitelist ',,,'` is a mistake, not a
    request for an empty whitelist.
    """
    if not values:
        return None
    out = []
    for v in values:
        items = [x.strip() for x in v.split(",")]
        if any(not x for x in items):
            raise UsageError(f"{option or 'option'} {v!r}: empty item in the comma-separated list")
        out.extend(items)
    return out


def load_config_file(path: Path, bus: str) -> dict[str, list[str]]:
    """Read `deviceClassWhitelist` / `deviceLabelFields` for one bus from a YAML file.

    Accepted shapes, so an existing nfd-worker.conf can be reused as is:
    `{sources: {usb: {...}}}`, `{usb: {...}}`, or the bare `{deviceClassWhitelist: ...}`.
    Other keys of an nfd-worker.conf (core, other sources) are left alone.
    """
    doc = read_yaml(path, "config")
    if doc is None:
        return {}
    source = str(path)
    if not isinstance(doc, Mapping):
        raise Fields(doc, "", (), source).error("must be a mapping")
    f = Fields(doc, "", doc.keys(), source)
    if "sources" in doc:
        f = f.child("sources", f.mapping("sources").keys())
    if bus in f.obj:
        f = f.child(bus, (WHITELIST_KEY, FIELDS_KEY))
    elif WHITELIST_KEY not in f.obj and FIELDS_KEY not in f.obj:
        return {}
    out: dict[str, list[str]] = {}
    for key in (WHITELIST_KEY, FIELDS_KEY):
        items = f.str_list(key)
        if items is not None:
            out[key] = items
    for i, entry in enumerate(out.get(WHITELIST_KEY, ())):
        if not _is_class_prefix(entry):
            raise f.error(f"{entry!r} is not a hex class prefix", f"{WHITELIST_KEY}[{i}]")
    return out


def select_fields(requested: Sequence[str], rules: BusRules) -> tuple[tuple[str, ...], list[str]]:
    """NFD's rule: keep known fields in canonical order; if none is valid, use the fallback."""
    wanted = {f.strip().lower() for f in requested}
    fields = tuple(f for f in rules.all_fields if f in wanted)
    warnings = []
    unknown = sorted(wanted - set(rules.all_fields))
    if unknown:
        warnings.append(
            f"{rules.bus}: ignoring unknown label field(s) {', '.join(unknown)} "
            f"(known: {', '.join(rules.all_fields)})"
        )
    if not fields:
        fields = rules.fallback_fields
        warnings.append(f"{rules.bus}: no valid label fields; using {','.join(fields)}")
    return fields, warnings


def _is_class_prefix(entry: str) -> bool:
    w = entry.strip().lower().removeprefix("0x")
    return bool(w) and all(c in "0123456789abcdef" for c in w)


def resolve_config(
    rules: BusRules,
    cli_whitelist: Sequence[str] | None,
    cli_fields: Sequence[str] | None,
    config_path: Path | None,
) -> tuple[SourceConfig, list[str]]:
    """Defaults, overridden by the config file, overridden by command-line options."""
    whitelist: list[str] = list(rules.default_whitelist)
    fields: list[str] = list(rules.default_fields)
    if config_path is not None:
        cfg = load_config_file(config_path, rules.bus)
        whitelist = cfg.get(WHITELIST_KEY, whitelist)
        fields = cfg.get(FIELDS_KEY, fields)
    if cli_whitelist is not None:
        bad = [w for w in cli_whitelist if not _is_class_prefix(w)]
        if bad:
            raise UsageError(f"--class-whitelist: {bad[0]!r} is not a hex class prefix")
        whitelist = list(cli_whitelist)
    if cli_fields is not None:
        fields = list(cli_fields)
    sel, warnings = select_fields(fields, rules)
    wl = tuple(w.strip().lower().removeprefix("0x") for w in whitelist)
    return SourceConfig(class_whitelist=wl, label_fields=sel), warnings


def source_changes(old: SourceConfig, new: SourceConfig) -> list[str]:
    """`deviceClassWhitelist [fe] → [fe, 03]`: each setting a reload changed, named as the
    NFD config names it, so the log says whether the edit that was made is the one taken."""
    out = []
    for key, a, b in (
        (WHITELIST_KEY, old.class_whitelist, new.class_whitelist),
        (FIELDS_KEY, old.label_fields, new.label_fields),
    ):
        if a != b:
            out.append(f"{key} [{', '.join(a)}] → [{', '.join(b)}]")
    return out


def whitelist_match(cls: str, whitelist: Sequence[str]) -> str | None:
    """The first whitelist entry that prefixes `cls` (NFD's rule), or None."""
    for w in whitelist:
        if cls.startswith(w):
            return w
    return None


def join_fields(
    values: Mapping[str, str | None], fields: Sequence[str], omit_empty: str = ""
) -> str:
    """Join label fields with `_` in order; a missing value is an empty field, as in NFD,
    except for the field named by `omit_empty`, which is left out entirely."""
    parts = []
    for f in fields:
        v = values.get(f)
        if not v and f == omit_empty:
            continue
        parts.append(v or "")
    return "_".join(parts)
