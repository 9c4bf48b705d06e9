"""A small RFC 6902 applier for the subset build_patch emits, so the tests can check that a
patch does what the diff says independently of the API server (the real-peer tests check it
against the real one)."""

from __future__ import annotations

from typing import Any

Op = dict[str, Any]


def apply_patch(doc: dict[str, Any], ops: list[Op]) -> dict[str, Any]:
    """Apply `ops` to a copy of `doc`; ValueError like a server would (test failed, missing
    member)."""
    import copy

    out = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = out
        for p in parts[:-1]:
            if not isinstance(parent, dict) or p not in parent:
                raise ValueError(f"path {op['path']} does not exist")
            parent = parent[p]
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            if parent.get(last) != op["value"]:
                raise ValueError(f"test failed at {op['path']}")
        elif kind == "add":
            parent[last] = copy.deepcopy(op["value"])
        elif kind == "replace":
            if last not in parent:
                raise ValueError(f"replace of missing {op['path']}")
            parent[last] = op["value"]
        elif kind == "remove":
            if last not in parent:
                raise ValueError(f"remove of missing {op['path']}")
            del parent[last]
        else:
            raise ValueError(f"unsupported op {kind}")
    return out
