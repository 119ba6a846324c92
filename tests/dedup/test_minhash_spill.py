"""MinHash out of core: the spilled tables give `cluster`'s candidates, edges, kept documents and Jaccards
exactly, whatever the batch split and the number of pair partitions, on real text with planted
near-copies (reformatted, lightly edited, a shared boilerplate block) and on boundary cases."""

from __future__ import annotations

import numpy as np
import pytest

from olmax.dedup.minhash import cluster, signatures
from olmax.dedup.minhash_spill import SpilledTables, cluster_spilled
from olmax.dedup.params import MinHashParams
from olmax.dedup.shingles import text_shingles
from olmax.testing.prepare_testdata import pydoc_texts, stdlib_texts


def corpus(seed: int = 3) -> list[str]:
    """Real code and prose, and planted copies of some of them at random later places."""
    rng = np.random.default_rng(seed)
    base = [t[:5000] for _, t in stdlib_texts(150)] + [t[:5000] for _, t in pydoc_texts()[:100]]
    texts = list(base)
    for i in rng.choice(len(base), size=40, replace=False).tolist():
        words = base[i].split()
        kind = i % 4
        if kind == 0:  # reformatted: other line breaks and case
            copy = "\n".join(" ".join(words[k : k + 7]) for k in range(0, len(words), 7)).upper()
        elif kind == 1:  # a few words edited
            for k in rng.choice(len(words), size=max(1, len(words) // 60), replace=False).tolist():
                words[k] = "edited" + words[k]
            copy = " ".join(words)
        elif kind == 2:  # the first half shared (a hard negative or a near-copy, by its length)
            copy = " ".join(words[: len(words) // 2] + base[(i + 1) % len(base)].split()[:50])
        else:
            copy = base[i]
        texts.insert(int(rng.integers(i + 1, len(texts) + 1)), copy)
    return texts + ["", "one two"]  # no shingles, one short shingle


def spilled(texts: list[str], params: MinHashParams, batch: int, tmp_path, bits: int | None):
    with SpilledTables(params, work_dir=str(tmp_path)) as tables:
        for a in range(0, len(texts), batch):
            sh, off = text_shingles(texts[a : a + batch], params.ngram)
            tables.add(sh, np.diff(off), signatures(sh, off, params))
        assert tables.documents == len(texts) and (tables.disk_bytes() > 0) == bool(texts)
        return cluster_spilled(tables, bits=bits)


@pytest.mark.parametrize(
    "params", [MinHashParams(), MinHashParams(bands=20, rows=3, threshold=0.5)], ids=["dolma3", "loose"]
)
@pytest.mark.parametrize("batch,bits", [(7, 0), (64, 3), (1000, None)])
def test_spilled_clusters_equal_in_memory(params, batch, bits, tmp_path):
    texts = corpus()
    sh, off = text_shingles(texts, params.ngram)
    want = cluster(sh, off, signatures(sh, off, params), params)
    got = spilled(texts, params, batch, tmp_path, bits)
    assert want.removed.size > 10  # the plants are found: the comparison means something
    assert got.candidates == want.candidates
    assert np.array_equal(got.edges, want.edges)
    assert np.array_equal(got.keep, want.keep)
    assert np.array_equal(got.jaccard, want.jaccard)


def test_nothing_to_compare(tmp_path):
    p = MinHashParams()
    for texts in ([], [""], ["a b c d e f"], ["", ""]):
        got = spilled(texts, p, 2, tmp_path, None)
        assert got.candidates == 0 and got.keep.tolist() == list(range(len(texts)))
