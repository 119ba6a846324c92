"""Values that cross between a Beam driver and its workers through files: JSON with typed nodes and
numpy arrays (`.npy`/`.npz`, read with `allow_pickle=False`), never a pickle.

Two uses: a worker's results (summaries, hit arrays, reduce results, `olmax.beam.Failed`) written by
`olmax.beam.collect` under the job's temporary folder and read back by the driver (`dumps`/`loads`, one
line each, arrays inline); and what every task of a job shares (the leak audit's eval index and word
tables), staged once by the driver and loaded by each worker (`stage`/`load_staged`: the arrays in one
`.npz`, the rest in a `.json` beside it). Whoever can write that folder (`--temp_location` on a cluster)
must not be able to run code on the other side, so the format holds data only: JSON scalars, lists,
tuples, dicts (any keys), sets, bytes, numpy arrays and scalars, and instances of olmax's own classes
rebuilt attribute by attribute (no constructor or other code runs): a worker's results may hold olmax
dataclasses only; a staged value the classes `stage` returned to the driver, which hands that list to
the workers through the pipeline itself (trusted), not through the folder. Anything else is a TypeError
on the writing side, not a silent loss.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import io
import json
from typing import Any

import numpy as np

from olmax import storage


def _npy(a: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _from_npy(text: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)


def to_tree(x: Any, arrays: list | None = None, memo: dict | None = None) -> Any:
    """`x` as a JSON-able tree of typed nodes (lists, dicts with one-letter tags, scalars). With
    `arrays`, numpy arrays are appended there (one entry per distinct array object) and referenced by
    position instead of inlined; `memo` (with `arrays`) records them and the classes met ("classes")."""
    if arrays is not None and memo is None:
        memo = {}

    def sub(v: Any) -> Any:
        return to_tree(v, arrays, memo)

    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, float)) and type(x) in (int, float):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype.hasobject:
            raise TypeError("olmax.wire: an array of Python objects cannot be sent")
        if arrays is None:
            return {"a": _npy(x)}
        if id(x) not in memo:
            memo[id(x)] = len(arrays)
            arrays.append(x)
        return {"r": memo[id(x)]}
    if isinstance(x, np.generic):
        return {"s": _npy(np.asarray(x))}
    if type(x) is list:
        return [sub(v) for v in x]
    if type(x) is tuple:
        return {"t": [sub(v) for v in x]}
    if type(x) is dict:
        return {"d": [[sub(k), sub(v)] for k, v in x.items()]}
    if type(x) in (set, frozenset):
        return {"f" if type(x) is frozenset else "e": [sub(v) for v in x]}
    if isinstance(x, bytes):
        return {"b": base64.b64encode(x).decode("ascii")}
    cls = type(x)
    if cls.__module__.startswith("olmax.") and hasattr(x, "__dict__") and not isinstance(x, type):
        if memo is not None:
            memo.setdefault("classes", set()).add(_class_name(cls))
        return {"c": _class_name(cls), "v": {k: sub(v) for k, v in vars(x).items()}}
    raise TypeError(f"olmax.wire: cannot send a {type(x).__module__}.{type(x).__qualname__} to the driver")


def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _olmax_class(name: str, allowed: frozenset[str] | None) -> type:
    """The class `name` names: in `allowed` when given, else an olmax dataclass."""
    module, _, qual = name.partition(":")
    if not module.startswith("olmax.") or not qual or "<" in qual:
        raise ValueError(f"olmax.wire: {name!r} is not a class of olmax")
    if allowed is not None and name not in allowed:
        raise ValueError(f"olmax.wire: {name!r} is not one of the classes staged here")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    if not isinstance(obj, type) or obj.__module__ != module:
        raise ValueError(f"olmax.wire: {name!r} is not a class of olmax")
    if allowed is None and not dataclasses.is_dataclass(obj):
        raise ValueError(f"olmax.wire: {name!r} is not a dataclass of olmax")
    return obj


def from_tree(t: Any, arrays: Any = None, classes: frozenset[str] | None = None) -> Any:
    """The value `to_tree` encoded (`arrays`: what it appended the arrays to, or an .npz's mapping of
    `a0`, `a1`, ...; `classes`: the names of the classes allowed, default olmax's dataclasses)."""

    def sub(v: Any) -> Any:
        return from_tree(v, arrays, classes)

    if isinstance(t, list):
        return [sub(v) for v in t]
    if not isinstance(t, dict):
        return t
    if set(t) == {"c", "v"}:
        obj = object.__new__(_olmax_class(t["c"], classes))
        for name, value in t["v"].items():
            object.__setattr__(obj, name, sub(value))  # frozen dataclasses too; no __init__ runs
        return obj
    if len(t) != 1:
        raise ValueError(f"olmax.wire: unknown node with keys {sorted(t)}")
    ((tag, v),) = t.items()
    if tag == "a":
        return _from_npy(v)
    if tag == "r":
        return arrays[v] if isinstance(arrays, list) else arrays[f"a{v}"]
    if tag == "s":
        return _from_npy(v)[()]
    if tag == "t":
        return tuple(sub(e) for e in v)
    if tag == "d":
        return {sub(k): sub(e) for k, e in v}
    if tag in ("e", "f"):
        items = (sub(e) for e in v)
        return frozenset(items) if tag == "f" else set(items)
    if tag == "b":
        return base64.b64decode(v)
    raise ValueError(f"olmax.wire: unknown node {tag!r}")


def dumps(x: Any) -> bytes:
    """One line of JSON (no newline inside) for `x`."""
    return json.dumps(to_tree(x), separators=(",", ":"), allow_nan=True).encode()


def loads(line: bytes | str) -> Any:
    return from_tree(json.loads(line))


def stage(x: Any, url: str) -> frozenset[str]:
    """Write `x` for `load_staged`: its arrays to `url.npz`, the rest to `url.json` (through
    olmax.storage: a local path or any fsspec URL). Returns the names of the classes it holds, for
    `load_staged`'s `classes`."""

    arrays: list = []
    seen: dict = {}
    tree = to_tree(x, arrays, seen)
    buf = io.BytesIO()
    np.savez(buf, **{f"a{i}": a for i, a in enumerate(arrays)})
    storage.write_bytes(url + ".npz", buf.getvalue())
    storage.write_bytes(url + ".json", json.dumps(tree, separators=(",", ":")).encode())
    return frozenset(seen.get("classes", ()))


def load_staged(url: str, classes: frozenset[str] = frozenset()) -> Any:
    """The value `stage` wrote at `url`; `classes`: what `stage` returned (no other class is rebuilt)."""

    with np.load(io.BytesIO(storage.read_bytes(url + ".npz")), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return from_tree(json.loads(storage.read_bytes(url + ".json")), arrays, frozenset(classes))
