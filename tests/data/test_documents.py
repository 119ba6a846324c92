"""The document cache: the same documents as reading the sidecar or scanning for EOS, ids in any script."""

from __future__ import annotations

import numpy as np

from olmax.data.documents import DocumentCache, documents
from olmax.data.index import DOLMA2_EOS
from tests.audit.audit_testdata import write_shard


def test_cache_equals_a_fresh_read_for_sidecar_and_eos_files(tmp_path):
    ids = ["plain", "ünïcode-ид", "数据-7", "x" * 40]
    side = write_shard(tmp_path / "a.npy", [(i, list(range(3 + k))) for k, i in enumerate(ids)])
    raw = tmp_path / "b.npy"
    tokens = np.arange(50, dtype=np.uint32)
    tokens[[9, 20, 21]] = DOLMA2_EOS
    tokens.tofile(raw)
    for path in (str(side), str(raw)):
        want = documents(path)
        for _ in range(2):  # built, then memory-mapped from the work dir
            got = DocumentCache(tmp_path / "work").get(path)
            np.testing.assert_array_equal(got.starts, want.starts)
            np.testing.assert_array_equal(got.ends, want.ends)
            assert [got.id_of(i) for i in range(len(want.starts))] == [
                want.id_of(i) for i in range(len(want.starts))
            ]
    assert [DocumentCache(tmp_path / "work").get(str(side)).id_of(i) for i in range(4)] == ids
    assert DocumentCache(tmp_path / "work").get(str(side)).ids.index("数据-7") == 2
    assert [documents(str(raw)).id_of(i) for i in range(4)] == ["#0", "#1", "#2", "#3"]
