"""Kubernetes label rules and edgefd's namespace policy.

The API server rejects a whole Node update when one label is invalid, so every producer and the
sink check labels here first and report *why* a label was refused, instead of letting one bad
string break (or silently vanish from) the node, as happens with node-feature-discovery.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from typing import Generic, TypeVar

from .record import Record

NAME_MAX = 63
PREFIX_MAX = 253
DNS_LABEL_MAX = 63
VALUE_MAX = 63

DEFAULT_NAMESPACE = "feature.node.kubernetes.io"

# fullmatch, not match: `$` also matches before a trailing newline
_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@cache  # only a refused name needs it
def _bad_name_char() -> re.Pattern[str]:
    return re.compile(r"[^-A-Za-z0-9_.]")


def _describe_bad_chars(text: str) -> str:
    """The characters that make `text` invalid, never the text itself: the text may be a line
    of a file that is not meant to be published (a password hash, a token), while which
    characters are not allowed is the reason a person needs. Control characters are escaped
    and non-ASCII ones summarised, so a reason can never forge a log line either."""
    bad = set(_bad_name_char().findall(text))
    parts = [repr(c) for c in sorted(c for c in bad if c.isascii())]
    if any(not c.isascii() for c in bad):
        parts.append("non-ASCII characters")
    return " ".join(parts)


# Reasons describe what is wrong without quoting the checked text (see _describe_bad_chars):
# a caller that may show the text (a producer naming the label it derived) prepends it itself.


def check_name(name: str, what: str = "name") -> str | None:
    """Return why `name` is not a valid label name (or value, with what='value'), else None."""
    if len(name) > NAME_MAX:
        return f"{what} is {len(name)} characters long, the limit is {NAME_MAX}"
    if _NAME_RE.fullmatch(name):
        return None
    if not name:
        return f"{what} is empty"
    bad = _describe_bad_chars(name)
    if bad:
        return f"{what} contains {bad}; only letters, digits, '-', '_' and '.' are allowed"
    return f"{what} must start and end with a letter or digit"


def is_dns_label(text: str) -> bool:
    """A DNS-1123 label, as the API server checks a namespace name."""
    return len(text) <= DNS_LABEL_MAX and _DNS_LABEL_RE.fullmatch(text) is not None


def is_dns_subdomain(text: str) -> bool:
    """A DNS-1123 subdomain (dot-separated labels), as the API server checks a Node name or a
    label prefix."""
    return len(text) <= PREFIX_MAX and all(_DNS_LABEL_RE.fullmatch(p) for p in text.split("."))


def check_prefix(prefix: str) -> str | None:
    """Return why `prefix` is not a DNS-1123 subdomain, else None."""
    if not prefix:
        return "prefix before '/' is empty"
    if len(prefix) > PREFIX_MAX:
        return f"prefix is {len(prefix)} characters long, the limit is {PREFIX_MAX}"
    if not is_dns_subdomain(prefix):
        return (
            "prefix is not a DNS subdomain: each dot-separated part must be lower-case "
            "letters, digits and '-', starting and ending with a letter or digit"
        )
    return None


def split_key(key: str) -> tuple[str, str]:
    """Split a label key into (prefix, name); the prefix is '' for an unqualified key."""
    prefix, sep, name = key.rpartition("/")
    return (prefix, name) if sep else ("", key)


def check_key(key: str) -> str | None:
    """Return why `key` is not a valid label key, else None."""
    if key.count("/") > 1:
        return "key has more than one '/'"
    prefix, name = split_key(key)
    if "/" in key:
        reason = check_prefix(prefix)
        if reason:
            return f"key {reason}"
    reason = check_name(name)
    return f"key {reason}" if reason else None


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


# Kubernetes' own namespaces (labels there steer the control plane), except the two that
# node-feature-discovery writes; no option opens them. node-role and node-restriction are
# named on their own so that the reason says they are never writable.
RESERVED = ("kubernetes.io", "k8s.io")
RESERVED_EXCEPTIONS = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")
NEVER_WRITABLE = ("node-role.kubernetes.io", "node-restriction.kubernetes.io")


def reserved_reason(ns: str) -> str | None:
    """Why no producer may ever write namespace `ns` (Kubernetes owns it), else None: the
    ceiling that the admission policy (k8s/admission-policy.yaml) enforces too."""
    for d in NEVER_WRITABLE:
        if _in_domain(ns, d):
            return f"namespace {d} (and its subdomains) is never writable from a feature file"
    if any(_in_domain(ns, e) for e in RESERVED_EXCEPTIONS):
        return None
    for r in RESERVED:
        if _in_domain(ns, r):
            return (
                f"namespace is reserved for Kubernetes ({r}); use "
                f"{DEFAULT_NAMESPACE}/ or your own domain"
            )
    return None


class NamespacePolicy(Record):
    """Which label namespaces may be written: `allowed` (each with its subdomains; None: any
    namespace Kubernetes leaves open), minus `denied`, and never a reserved one or a key
    without a namespace. (The sink's own, edgefd's namespaces: feature_sink/namespaces.py.)

    A key without a namespace is refused because no producer can make the sink write one (the
    sink qualifies unprefixed feature-file keys, as NFD does): a claim on `team` or `zone` in
    the ownership annotation is therefore never the sink's to act on. Denials win over
    allowances so an operator can carve a namespace out of one they otherwise trust.
    """

    allowed: tuple[str, ...] | None = None
    denied: tuple[str, ...] = ()

    @classmethod
    def from_lists(
        cls, base: tuple[str, ...], allowed: Iterable[str] = (), denied: Iterable[str] = ()
    ) -> NamespacePolicy:
        """`base` plus `allowed`, minus `denied` (the sink's namespaces, --allow-namespace and
        --deny-namespace). Raises ValueError, naming the entry, for one that is not a DNS
        subdomain, or an allowance of a namespace Kubernetes reserves (the admission policy
        would refuse every patch carrying such a label, and with it every other label)."""
        extra = _namespaces(allowed, "--allow-namespace")
        for ns in extra:
            reason = reserved_reason(ns)
            if reason:
                raise ValueError(f"--allow-namespace {ns}: {reason}")
        allow = base + tuple(ns for ns in extra if ns not in base)
        return cls(allowed=allow, denied=_namespaces(denied, "--deny-namespace"))

    def check(self, key: str) -> str | None:
        """Return why the namespace of `key` may not be written, else None. The reason names
        the policy entry that matched, not the key (the key may be content nobody should
        publish; see _describe_bad_chars)."""
        ns, _ = split_key(key)
        if not ns:
            return (
                "key has no namespace (prefix/); feature files' unprefixed keys are given "
                f"{DEFAULT_NAMESPACE}/, so no producer writes one"
            )
        reason = reserved_reason(ns)
        if reason:
            return reason
        for d in self.denied:
            if _in_domain(ns, d):
                return f"namespace is denied by configuration ({d})"
        if self.allowed is None or any(_in_domain(ns, a) for a in self.allowed):
            return None
        return (
            f"namespace is not one the sink writes ({', '.join(self.allowed)}, and their "
            "subdomains); the operator may add it with --allow-namespace"
        )


def _namespaces(entries: Iterable[str], option: str) -> tuple[str, ...]:
    out: list[str] = []
    for entry in entries:
        ns = entry.strip().lower()
        if not ns:
            continue
        reason = check_prefix(ns)
        if reason:
            raise ValueError(f"{option} {entry!a}: {reason.replace('prefix', 'namespace')}")
        if ns not in out:
            out.append(ns)
    return tuple(out)


# What a producer may emit at all: any namespace Kubernetes leaves open (a dt-labeller
# --prefix of your own domain, for NFD or for a sink started with --allow-namespace).
PRODUCER_POLICY = NamespacePolicy()


def check_label(key: str, value: str, policy: NamespacePolicy = PRODUCER_POLICY) -> str | None:
    """Return why the label `key=value` may not be applied, else None."""
    return check_key(key) or check_value(value) or policy.check(key)


class Rejected(Record):
    """A label that was refused, with where it came from, so a person can fix the source.

    `str()` names the source and the reason only: a refused line may be something that was
    never meant to be a label (a symlinked secret, a token), and this text ends up in logs,
    Events and metrics. `detail()` adds the key and value, for debug logs and local output.
    """

    key: str
    value: str
    reason: str
    source: str = ""

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}label refused: {self.reason}"

    def detail(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}label {self.key!r}={self.value!r} refused: {self.reason}"


R = TypeVar("R")


class Derivation(Record, Generic[R]):
    """What a producer's label rules decided: the labels, one report per thing looked at (a
    USB device, a devicetree node) saying what it gave and why, and the labels refused."""

    labels: dict[str, str]
    reports: tuple[R, ...] = ()
    rejected: tuple[Rejected, ...] = ()
