"""olmax.wire: what Beam workers and their driver exchange through files, as data only (no pickle)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from olmax import wire
from olmax.audit.content import InstanceDuplicates
from olmax.beam import Failed


def test_values_come_back_equal_with_their_types(tmp_path):
    rec = np.zeros(3, dtype=[("hash", "<u8"), ("phys", "<i4")])
    rec["hash"] = [2**64 - 1, 5, 0]
    value = [
        1,
        -2.5,
        "é",
        None,
        True,
        (1, (2, "x")),
        {(1, 2): np.int64(3), "k": [np.float32(1.5)]},
        {4, 5},
        frozenset({"a"}),
        b"\x00\xff",
        rec,
        np.arange(6, dtype="<u4").reshape(2, 3),
        Failed((3, 1), "a message"),
        InstanceDuplicates(np.ones((2, 4), np.int64), 1, [{"file": "f"}]),
        2**100,
    ]
    back = wire.loads(wire.dumps(value))
    assert b"\n" not in wire.dumps(value)
    for a, b in zip(value, back):
        assert type(a) is type(b)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        elif isinstance(a, InstanceDuplicates):
            assert np.array_equal(a.pairs, b.pairs) and (a.collisions, a.examples) == (
                b.collisions,
                b.examples,
            )
        else:
            assert a == b
    shared = np.arange(4)
    from olmax.audit.leaks.item_index import SortedKeys

    keys = SortedKeys(np.sort(np.random.default_rng(0).integers(0, 2**63, 500).astype(np.uint64)))
    classes = wire.stage((shared, shared, {"n": 1}, keys), str(tmp_path / "s"))
    assert classes == {"olmax.audit.leaks.item_index:SortedKeys"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json", "s.npz"]
    got = wire.load_staged(str(tmp_path / "s"), classes)
    assert got[0] is got[1] and np.array_equal(got[0], shared) and got[2] == {"n": 1}  # stored once
    found = got[3].find(keys.keys[[3, 7]], np.asarray([0, 1]))
    assert [a.tolist() for a in found] == [[3, 7], [0, 1]]
    with pytest.raises(ValueError, match="not one of the classes staged here"):
        wire.load_staged(str(tmp_path / "s"))  # a class the driver did not stage


@dataclass
class Foreign:
    x: int


def test_only_data_and_olmax_classes_cross():
    with pytest.raises(TypeError, match="object"):
        wire.dumps(np.array([object()], dtype=object))
    with pytest.raises(TypeError, match="cannot send"):
        wire.dumps(Foreign(1))  # a test module's class is not olmax's own
    with pytest.raises(TypeError, match="cannot send"):
        wire.dumps(len)
    # a crafted file naming something outside olmax, or a function of olmax, never runs it
    for name in ("os:system", "builtins:eval", "olmax.wire:loads", "olmax.beam:<locals>.Save"):
        with pytest.raises(ValueError, match="not a class of olmax"):
            wire.loads(json.dumps({"c": name, "v": {}}))
    # a worker's results: olmax's dataclasses only (not a class with a __del__, say)
    with pytest.raises(ValueError, match="not a dataclass of olmax"):
        wire.loads(json.dumps({"c": "olmax.data.reader:LocalFiles", "v": {"_fds": {"d": [[0, 5]]}}}))
