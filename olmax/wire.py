"""Values that cross from a Beam worker to the driver as text: JSON with typed nodes, never a pickle.

A worker's results (summaries, hit arrays, reduce results, `olmax.beam.Failed`) are written by
`olmax.beam.collect` into files under the job's temporary folder (`--temp_location` on a cluster) and read
back by the driver. Whoever can write that folder must not be able to run code on the driver, so the
format holds data only: JSON scalars, lists, tuples, dicts (any keys), sets, bytes, numpy arrays and
scalars (`.npy` bytes read with `allow_pickle=False`) and the dataclasses of olmax's own modules (rebuilt
field by field, no constructor called). Anything else is a TypeError in the worker, not a silent loss.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import io
import json
from typing import Any

import numpy as np


def _npy(a: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _from_npy(text: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)


def to_tree(x: Any) -> Any:
    """`x` as a JSON-able tree of typed nodes (lists, dicts with one-letter tags, scalars)."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, float)) and type(x) in (int, float):
        return x
    if isinstance(x, np.ndarray):
        return {"a": _npy(x)}
    if isinstance(x, np.generic):
        return {"s": _npy(np.asarray(x))}
    if isinstance(x, list):
        return [to_tree(v) for v in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return {"t": [to_tree(v) for v in x]}
    if isinstance(x, dict) and type(x) is dict:
        return {"d": [[to_tree(k), to_tree(v)] for k, v in x.items()]}
    if isinstance(x, (set, frozenset)):
        return {"f" if isinstance(x, frozenset) else "e": [to_tree(v) for v in x]}
    if isinstance(x, bytes):
        return {"b": base64.b64encode(x).decode("ascii")}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        cls = type(x)
        if not cls.__module__.startswith("olmax."):
            raise TypeError(f"olmax.wire: dataclass {cls.__module__}.{cls.__qualname__} is not olmax's own")
        fields = {f.name: to_tree(getattr(x, f.name)) for f in dataclasses.fields(x)}
        return {"c": f"{cls.__module__}:{cls.__qualname__}", "v": fields}
    raise TypeError(f"olmax.wire: cannot send a {type(x).__module__}.{type(x).__qualname__} to the driver")


def _dataclass(name: str) -> type:
    module, _, qual = name.partition(":")
    if not module.startswith("olmax.") or not qual:
        raise ValueError(f"olmax.wire: {name!r} is not an olmax dataclass")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        raise ValueError(f"olmax.wire: {name!r} is not an olmax dataclass")
    return obj


def from_tree(t: Any) -> Any:
    """The value `to_tree` encoded."""
    if isinstance(t, list):
        return [from_tree(v) for v in t]
    if not isinstance(t, dict):
        return t
    if set(t) == {"c", "v"}:
        cls = _dataclass(t["c"])
        obj = object.__new__(cls)
        for name, value in t["v"].items():
            object.__setattr__(obj, name, from_tree(value))  # frozen dataclasses too; no __init__ run
        return obj
    if len(t) != 1:
        raise ValueError(f"olmax.wire: unknown node with keys {sorted(t)}")
    ((tag, v),) = t.items()
    if tag == "a":
        return _from_npy(v)
    if tag == "s":
        return _from_npy(v)[()]
    if tag == "t":
        return tuple(from_tree(e) for e in v)
    if tag == "d":
        return {from_tree(k): from_tree(e) for k, e in v}
    if tag in ("e", "f"):
        items = (from_tree(e) for e in v)
        return frozenset(items) if tag == "f" else set(items)
    if tag == "b":
        return base64.b64decode(v)
    raise ValueError(f"olmax.wire: unknown node {tag!r}")


def dumps(x: Any) -> bytes:
    """One line of JSON (no newline inside) for `x`."""
    return json.dumps(to_tree(x), separators=(",", ":"), allow_nan=True).encode()


def loads(line: bytes | str) -> Any:
    return from_tree(json.loads(line))
