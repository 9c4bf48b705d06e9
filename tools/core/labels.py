"""Kubernetes label rules and edgefd's namespace policy.

The API server rejects a whole Node update when one label is invalid, so every producer and the
sink check labels here first and report *why* a label was refused, instead of letting one bad
string break (or silently vanish from) the node, as happens with node-feature-discovery.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

NAME_MAX = 63
PREFIX_MAX = 253
VALUE_MAX = 63

DEFAULT_NAMESPACE = "feature.node.kubernetes.io"

# fullmatch, not match: `$` also matches before a trailing newline
_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_BAD_NAME_CHAR_RE = re.compile(r"[^-A-Za-z0-9_.]")


def _describe_bad_chars(text: str) -> str:
    bad = sorted(set(_BAD_NAME_CHAR_RE.findall(text)))
    return " ".join(repr(c) for c in bad)


def check_name(name: str, what: str = "name") -> str | None:
    """Return why `name` is not a valid label name (or value, with what='value'), else None."""
    if len(name) > NAME_MAX:
        return f"{what} {name!r} is {len(name)} characters long, the limit is {NAME_MAX}"
    if _NAME_RE.fullmatch(name):
        return None
    if not name:
        return f"{what} is empty"
    bad = _describe_bad_chars(name)
    if bad:
        return f"{what} {name!r} contains {bad}; only letters, digits, '-', '_' and '.' are allowed"
    return f"{what} {name!r} must start and end with a letter or digit"


def check_prefix(prefix: str) -> str | None:
    """Return why `prefix` is not a DNS-1123 subdomain, else None."""
    if not prefix:
        return "prefix before '/' is empty"
    if len(prefix) > PREFIX_MAX:
        return f"prefix {prefix!r} is {len(prefix)} characters long, the limit is {PREFIX_MAX}"
    for part in prefix.split("."):
        if not _DNS_LABEL_RE.fullmatch(part):
            return (
                f"prefix {prefix!r} is not a DNS subdomain: each dot-separated part must be "
                "lower-case letters, digits and '-', starting and ending with a letter or digit"
            )
    return None


def split_key(key: str) -> tuple[str, str]:
    """Split a label key into (prefix, name); the prefix is '' for an unqualified key."""
    prefix, sep, name = key.rpartition("/")
    return (prefix, name) if sep else ("", key)


def check_key(key: str) -> str | None:
    """Return why `key` is not a valid label key, else None."""
    if key.count("/") > 1:
        return f"key {key!r} has more than one '/'"
    prefix, name = split_key(key)
    if "/" in key:
        reason = check_prefix(prefix)
        if reason:
            return f"key {key!r}: {reason}"
    reason = check_name(name)
    return f"key {key!r}: {reason}" if reason else None


def check_value(value: str) -> str | None:
    """Return why `value` is not a valid label value, else None (empty values are valid)."""
    if value == "":
        return None
    return check_name(value, "value")


def qualify(key: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """Give an unqualified key the namespace node-feature-discovery would give it."""
    return key if "/" in key else f"{namespace}/{key}"


def _in_domain(ns: str, domain: str) -> bool:
    return ns == domain or ns.endswith("." + domain)


@dataclass(frozen=True)
class NamespacePolicy:
    """Which label namespaces edgefd may write.

    Kubernetes-owned namespaces are refused because labels there steer the control plane
    (`node-role`, `node-restriction` ...). Denials win over allowances so an operator can carve
    out a namespace they otherwise trust.
    """

    extra_allowed: tuple[str, ...] = ()
    extra_denied: tuple[str, ...] = ()
    reserved: tuple[str, ...] = ("kubernetes.io", "k8s.io")
    exceptions: tuple[str, ...] = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")
    always_denied: tuple[str, ...] = field(
        default=("node-role.kubernetes.io", "node-restriction.kubernetes.io"), repr=False
    )

    @classmethod
    def from_lists(cls, allowed: Iterable[str] = (), denied: Iterable[str] = ()) -> NamespacePolicy:
        return cls(
            extra_allowed=tuple(a.strip().lower() for a in allowed if a.strip()),
            extra_denied=tuple(d.strip().lower() for d in denied if d.strip()),
        )

    def check(self, key: str) -> str | None:
        """Return why the namespace of `key` may not be written, else None."""
        ns, _ = split_key(key)
        if not ns:
            return None
        for d in self.always_denied:
            if _in_domain(ns, d):
                return f"namespace {ns!r} is never writable from a feature file"
        for d in self.extra_denied:
            if _in_domain(ns, d):
                return f"namespace {ns!r} is denied by configuration ({d})"
        if any(_in_domain(ns, a) for a in self.extra_allowed):
            return None
        if any(_in_domain(ns, e) for e in self.exceptions):
            return None
        for r in self.reserved:
            if _in_domain(ns, r):
                return (
                    f"namespace {ns!r} is reserved for Kubernetes ({r}); use "
                    f"{DEFAULT_NAMESPACE}/ or your own domain"
                )
        return None


DEFAULT_POLICY = NamespacePolicy()


def check_label(key: str, value: str, policy: NamespacePolicy = DEFAULT_POLICY) -> str | None:
    """Return why the label `key=value` may not be applied, else None."""
    return check_key(key) or check_value(value) or policy.check(key)


@dataclass(frozen=True)
class Rejected:
    """A label that was refused, with where it came from, so a person can fix the source."""

    key: str
    value: str
    reason: str
    source: str = ""

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}label {self.key}={self.value!r} refused: {self.reason}"


def partition_labels(
    labels: dict[str, str], policy: NamespacePolicy = DEFAULT_POLICY, source: str = ""
) -> tuple[dict[str, str], list[Rejected]]:
    """Split labels into the valid ones and the refused ones (with reasons)."""
    good: dict[str, str] = {}
    bad: list[Rejected] = []
    for key, value in labels.items():
        reason = check_label(key, value, policy)
        if reason:
            bad.append(Rejected(key, value, reason, source))
        else:
            good[key] = value
    return good, bad


R = TypeVar("R")


@dataclass(frozen=True)
class Derivation(Generic[R]):
    """What a producer's label rules decided: the labels, one report per thing looked at (a
    USB device, a devicetree node) saying what it gave and why, and the labels refused."""

    labels: dict[str, str] = field(default_factory=dict)
    reports: tuple[R, ...] = ()
    rejected: tuple[Rejected, ...] = ()
