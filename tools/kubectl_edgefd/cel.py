"""A DRA device selector, evaluated against one device as the scheduler evaluates it.

Why evaluate CEL here at all: "a claim's selector matches nothing" and "every device it
matches is taken" can only be told apart by running the claim's selectors (and its
DeviceClass's) on the devices the ResourceSlices publish. The scheduler does not say which
device failed which expression; its message is one line for every cause.

The language is the real one, from `cel-python` (celpy, the `kubectl` extra: a workstation's
dependency, not the DaemonSet image's), in the environment Kubernetes gives a device selector
(k8s.io/dynamic-resource-allocation/cel): `device.driver`, `device.attributes[domain][name]`
(an attribute without a domain is in the driver's; an unknown domain is an empty map, so
`device.attributes["x.io"].y` fails with "no such key" rather than matching), `device.capacity`
and `device.allowMultipleAllocations`; a `version` attribute is a semantic version, with the
Kubernetes library's `semver()`, `isSemver()`, `compareTo()`, `isGreaterThan()`,
`isLessThan()`, `major()`, `minor()` and `patch()`. An expression that fails on a device (a
misspelt attribute) is an error, as it is for the scheduler, which then allocates nothing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edgefd.core.errors import EdgefdError

EXTRA = "pip install 'edgefd[kubectl]'"
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)


@dataclass(frozen=True)
class Verdict:
    """One selector on one device: matched, or not, or `error` (the expression failed)."""

    matched: bool
    error: str | None = None


@functools.total_ordering
class Semver:
    """A semantic version (semver.org 2.0.0 precedence: the build part is ignored, a
    pre-release sorts before its release, numeric identifiers numerically)."""

    def __init__(self, text: str) -> None:
        m = _SEMVER.match(text)
        if not m:
            raise ValueError(f"{text!r} is not a semantic version")
        self.text = text
        self.core = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        self.pre = tuple(m.group(4).split(".")) if m.group(4) else ()

    def _key(self) -> tuple[Any, ...]:
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.pre)
        # no pre-release sorts after any pre-release of the same core
        return (self.core, 1 if not self.pre else 0, pre)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self._key() == other._key()

    def __lt__(self, other: Semver) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"semver({self.text!r})"


def _celpy() -> Any:
    try:
        import celpy
    except ImportError as e:
        raise EdgefdError(
            f"evaluating a claim's CEL selectors needs cel-python ({e}): {EXTRA}"
        ) from None
    return celpy


def _functions(celpy: Any) -> dict[str, Callable[..., Any]]:
    t = celpy.celtypes

    def version(a: Any, what: str) -> Semver:
        if not isinstance(a, Semver):
            raise TypeError(f"{what}() on a {type(a).__name__}, not a version")
        return a

    def semver(text: Any) -> Any:
        try:
            return Semver(str(text))
        except ValueError as e:
            return celpy.CELEvalError(str(e), ValueError, None)

    def is_semver(text: Any) -> Any:
        return t.BoolType(_SEMVER.match(str(text)) is not None)

    def compare(a: Any, b: Any) -> Any:
        x, y = version(a, "compareTo"), version(b, "compareTo")
        return t.IntType(0 if x == y else (-1 if x < y else 1))

    return {
        "semver": semver,
        "isSemver": is_semver,
        "compareTo": compare,
        "isGreaterThan": lambda a, b: t.BoolType(version(a, "isGreaterThan") > b),
        "isLessThan": lambda a, b: t.BoolType(version(a, "isLessThan") < b),
        "major": lambda a: t.IntType(version(a, "major").core[0]),
        "minor": lambda a: t.IntType(version(a, "minor").core[1]),
        "patch": lambda a: t.IntType(version(a, "patch").core[2]),
    }


def _value(celpy: Any, v: dict[str, Any]) -> Any:
    """One attribute value of the API (`{"string": ...}`, `int`, `bool`, `version`)."""
    t = celpy.celtypes
    if "string" in v:
        return t.StringType(v["string"])
    if "int" in v:
        return t.IntType(int(v["int"]))
    if "bool" in v:
        return t.BoolType(bool(v["bool"]))
    if "version" in v:
        try:
            return Semver(str(v["version"]))
        except ValueError:
            return t.StringType(str(v["version"]))
    return None


def activation(celpy: Any, device: dict[str, Any], driver: str) -> dict[str, Any]:
    """`device` as the selector sees it (a ResourceSlice's device entry, of `driver`)."""
    t = celpy.celtypes

    class Domains(t.MapType):  # an unknown domain: an empty map, as in Kubernetes
        def __getitem__(self, key: Any) -> Any:
            return super().get(key, t.MapType({}))

    domains: dict[str, dict[Any, Any]] = {}
    for name, v in (device.get("attributes") or {}).items():
        domain, _, short = name.rpartition("/")
        value = _value(celpy, v or {})
        if value is not None:
            domains.setdefault(domain or driver, {})[t.StringType(short)] = value
    capacity: dict[str, dict[Any, Any]] = {}
    for name, v in (device.get("capacity") or {}).items():
        domain, _, short = name.rpartition("/")
        quantity = str((v or {}).get("value", ""))
        capacity.setdefault(domain or driver, {})[t.StringType(short)] = t.StringType(quantity)
    return {
        "device": t.MapType(
            {
                t.StringType("driver"): t.StringType(driver),
                t.StringType("attributes"): Domains(
                    {t.StringType(d): t.MapType(a) for d, a in domains.items()}
                ),
                t.StringType("capacity"): Domains(
                    {t.StringType(d): t.MapType(c) for d, c in capacity.items()}
                ),
                t.StringType("allowMultipleAllocations"): t.BoolType(
                    bool(device.get("allowMultipleAllocations"))
                ),
            }
        )
    }


class Selector:
    """One compiled CEL expression. A syntax error is said when it is compiled (`error`),
    and the selector then matches nothing, with that error."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.error: str | None = None
        self._celpy = _celpy()
        self._program: Any = None
        try:
            env = self._celpy.Environment()
            self._program = env.program(env.compile(expression), functions=_functions(self._celpy))
        except Exception as e:  # the parser's own errors span lines
            self.error = " ".join(str(e).split()) or type(e).__name__

    def evaluate(self, device: dict[str, Any], driver: str) -> Verdict:
        if self._program is None:
            return Verdict(False, self.error)
        try:
            out = self._program.evaluate(activation(self._celpy, device, driver))
        except Exception as e:
            return Verdict(False, _message(e))
        if isinstance(out, self._celpy.CELEvalError):
            return Verdict(False, _message(out))
        if not isinstance(out, bool | self._celpy.celtypes.BoolType):
            return Verdict(False, f"the expression gives a {type(out).__name__}, not a bool")
        return Verdict(bool(out))


def _message(err: BaseException) -> str:
    """celpy's errors carry (message, python type, args): the message, and the key missing."""
    args = getattr(err, "args", ())
    text = str(args[0]) if args else str(err)
    extra = args[2] if len(args) > 2 else None
    if isinstance(extra, tuple) and extra:
        text += f" {', '.join(repr(str(x)) for x in extra)}"
    return " ".join(text.split()) or type(err).__name__


@functools.lru_cache(maxsize=256)
def selector(expression: str) -> Selector:
    """The compiled selector of `expression` (compiled once however many devices it meets)."""
    return Selector(expression)


def evaluate_all(expressions: list[str], device: dict[str, Any], driver: str) -> Verdict:
    """Every expression on the device, ANDed as the API ANDs a list of selectors."""
    return failing(expressions, device, driver)[1]


def failing(expressions: list[str], device: dict[str, Any], driver: str) -> tuple[str, Verdict]:
    """The first expression the device does not pass, and why ('' when it passes all)."""
    for expr in expressions:
        verdict = selector(expr).evaluate(device, driver)
        if not verdict.matched:
            return expr, verdict
    return "", Verdict(True)
