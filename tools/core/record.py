"""Record: the immutable value type of the records, the catalogue, the scan engine and the
inventory, cheap to define.

A scanner's whole run is about the start-up of click plus a few milliseconds of work, and
defining a frozen dataclass (~1 ms here) or a NamedTuple (~0.2 ms: both compile code at
class creation) costs that much again for the thirty-odd types a scan touches. A Record is
declared like a NamedTuple and behaves like one (a tuple: compared, hashed and sorted by its
values; `_fields`, `_replace`, `_asdict`), but its class is built without compiling anything:

    class UsbId(Record):
        vendor: str
        product: str
        state: str = ""
"""

from __future__ import annotations

from inspect import get_annotations
from operator import itemgetter
from typing import Any, ClassVar


class Record(tuple):  # type: ignore[type-arg]
    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        names = get_annotations(cls)  # the class's own, as written (strings)
        fields = tuple(n for n, t in names.items() if not str(t).startswith("ClassVar"))
        defaults = {}
        for i, name in enumerate(fields):
            if name in cls.__dict__:
                defaults[name] = cls.__dict__[name]
            setattr(cls, name, property(itemgetter(i)))
        cls._fields, cls._defaults = fields, defaults

    def __new__(cls, /, *args: Any, **kw: Any) -> Any:
        fields = cls._fields
        if len(args) == len(fields) and not kw:
            return tuple.__new__(cls, args)
        if len(args) > len(fields):
            raise TypeError(f"{cls.__name__}() takes {len(fields)} arguments, not {len(args)}")
        values = list(args)
        for name in fields[len(args) :]:
            if name in kw:
                values.append(kw.pop(name))
            elif name in cls._defaults:
                values.append(cls._defaults[name])
            else:
                raise TypeError(f"{cls.__name__}() is missing {name!r}")
        if kw:
            raise TypeError(f"{cls.__name__}() got unexpected {', '.join(map(repr, kw))}")
        return tuple.__new__(cls, values)

    def _replace(self, **kw: Any) -> Any:
        unknown = set(kw) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no {', '.join(sorted(unknown))}")
        return tuple.__new__(
            type(self), [kw.get(f, v) for f, v in zip(self._fields, self, strict=True)]
        )

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        body = ", ".join(f"{f}={v!r}" for f, v in zip(self._fields, self, strict=True))
        return f"{type(self).__name__}({body})"
