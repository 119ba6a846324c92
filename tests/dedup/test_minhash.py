"""MinHash near-duplicates: shingles against an independent word split, verified clusters, components."""

from __future__ import annotations

import re

import numpy as np
import pytest

from olmax.dedup.components import min_labels
from olmax.dedup.minhash import cluster, jaccard, signatures
from olmax.dedup.params import MinHashParams
from olmax.dedup.shingles import decoded_shingles, text_shingles
from olmax.errors import OlmaxError


def vocabulary(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, size=int(rng.integers(3, 9)))) for _ in range(n)]


def reference_jaccard(a: str, b: str, n: int = 5) -> float:
    """Word n-gram Jaccard by plain Python sets (ASCII text: words are runs of letters and digits)."""

    def grams(t: str) -> set:
        w = re.findall(r"[a-z0-9]+", t.lower())
        return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)} if len(w) >= n else {tuple(w)}

    ga, gb = grams(a), grams(b)
    return len(ga & gb) / len(ga | gb)


def test_shingle_sets_match_python_sets():
    words = vocabulary(300, 1)
    texts = [" ".join(words[i : i + 80]) for i in range(0, 200, 20)]
    texts.append("Mixed CASE, punctuation!  and\ttabs — “quotes” and\u00a0nbsp here 42 times")
    texts.append("mixed case punctuation and tabs quotes and nbsp here 42 times")
    texts += ["one two", ""]
    sh, off = text_shingles(texts, 5)
    assert np.diff(off).tolist()[-1] == 0  # no words: no shingle
    for i in range(len(texts) - 1):
        for j in range(i + 1, len(texts) - 1):
            got = jaccard(sh, off, np.array([i]), np.array([j]))[0]
            assert got == pytest.approx(reference_jaccard(texts[i], texts[j]), abs=1e-12), (i, j)


def test_decoded_shingles_are_the_texts_shingles():
    """The audits' shingles of token documents are prepare's shingles of the decoded texts."""
    vocab = ["Alpha ", "beta\n", "GAMMA  ", "delta, ", "eps ", "zeta ", "<eos>"]
    tokens = np.array([0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 0, 6], dtype=np.uint32)

    def decode(ids):
        return "".join(vocab[i] for i in ids)

    sh, off = decoded_shingles(decode, tokens, np.array([0, 7]), np.array([6, 13]), 3)
    want_sh, want_off = text_shingles([decode(range(6)), decode([0, 1, 2, 3, 4, 0])], 3)
    assert np.array_equal(sh, want_sh) and np.array_equal(off, want_off)
    # {abg, bgd, gde, dez} vs {abg, bgd, gde, dea}: 3 shared of 5
    assert jaccard(sh, off, np.array([0]), np.array([1]))[0] == pytest.approx(3 / 5)


def near_copy(words: list[str], rng, edits: int) -> str:
    w = list(words)
    for k in rng.choice(len(w), size=edits, replace=False):
        w[int(k)] = "zz" + w[int(k)]
    return " ".join(w)


def test_clusters_are_verified_components_kept_by_first():
    rng = np.random.default_rng(7)
    vocab = vocabulary(5000, 2)
    bases = [list(rng.choice(vocab, size=400)) for _ in range(6)]
    texts, truth = [], []
    for words in bases:
        texts.append(" ".join(words))
        truth.append(len(texts) - 1)
    # near copies (2 edits of 400 words: Jaccard ~0.95) placed after their originals, interleaved
    for b in (0, 3, 0, 5):
        texts.append(near_copy(bases[b], rng, 2))
        truth.append(b)
    # hard negative: same first 200 words as base 1 (a shared header), a different body: Jaccard ~1/3
    texts.append(" ".join(bases[1][:200] + list(rng.choice(vocab, size=200))))
    truth.append(len(texts) - 1)
    p = MinHashParams()
    sh, off = text_shingles(texts, p.ngram)
    cl = cluster(sh, off, signatures(sh, off, p), p)
    assert cl.keep.tolist() == truth
    for m in cl.removed.tolist():
        assert cl.jaccard[m] == pytest.approx(reference_jaccard(texts[m], texts[truth[m]]), abs=1e-9)
    # every verified edge really is >= the threshold, none of the hard negative's
    sims = jaccard(sh, off, cl.edges[:, 0], cl.edges[:, 1])
    assert np.all(sims >= p.threshold) and len(texts) - 1 not in cl.edges


def test_threshold_one_keeps_everything_but_equal_sets():
    texts = ["a b c d e f g", "a b c d e f g", "a b c d e f h"]
    p = MinHashParams(threshold=1.0)
    sh, off = text_shingles(texts, p.ngram)
    assert cluster(sh, off, signatures(sh, off, p), p).keep.tolist() == [0, 0, 2]


def test_min_labels_order_free():
    a, b = np.array([5, 3, 1, 7]), np.array([3, 1, 9, 8])
    want = [0, 1, 2, 1, 4, 1, 6, 7, 7, 1]
    assert min_labels(10, a, b).tolist() == want
    assert min_labels(10, b[::-1], a[::-1]).tolist() == want


@pytest.mark.parametrize(
    "params, flag",
    [
        (MinHashParams(bands=0), "--minhash-bands (minhash.bands) = 0 x --minhash-rows (minhash.rows) = 11"),
        (MinHashParams(bands=100, rows=11), "at most 1024"),
        (MinHashParams(threshold=0.0), "(0, 1]"),
        (MinHashParams(threshold=1.5), "(0, 1]"),
        (MinHashParams(ngram=0), "--minhash-ngram (minhash.ngram)"),
    ],
)
def test_bad_params_name_the_flag(params, flag):
    with pytest.raises(OlmaxError, match=re.escape(flag)):
        params.check()
