"""`olmax audit dedup --near` and the loader audit's near-duplicate exposure, against brute force."""

from __future__ import annotations

import json

import numpy as np
from audit_testdata import write_mix, write_shard

from olmax.cli import main

N = 5


def grams(tokens) -> set:
    t = list(tokens)
    return {tuple(t[i : i + N]) for i in range(len(t) - N + 1)} if len(t) >= N else {tuple(t)}


def brute_clusters(docs: list[tuple[str, list[int]]], threshold: float = 0.8) -> dict[str, list[str]]:
    """keep id → members, from all pairs' exact token 5-gram Jaccard and union-find by first member."""
    g = [grams(t) for _, t in docs]
    parent = list(range(len(docs)))

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for i in range(len(docs)):
        for j in range(i + 1, len(docs)):
            if len(g[i] & g[j]) / len(g[i] | g[j]) >= threshold:
                a, b = find(i), find(j)
                parent[max(a, b)] = min(a, b)
    out: dict[str, list[str]] = {}
    for i in range(len(docs)):
        if find(i) != i:
            out.setdefault(docs[find(i)][0], [docs[find(i)][0]]).append(docs[i][0])
    return out


def planted(corpus) -> tuple[list, list]:
    code, prose = corpus["code"], corpus["prose"]
    rng = np.random.default_rng(1)
    edited = list(code[3][1])
    for k in rng.choice(len(edited), size=4, replace=False):
        edited[int(k)] = 1000 + int(k)  # a few tokens changed
    a = code[:20]
    b = [
        *prose[:20],
        ("edit", edited),
        ("trunc", list(code[5][1])[: int(len(code[5][1]) * 0.93)]),  # syndicated copy cut short
        ("header", list(code[7][1])[:300] + list(prose[25][1])),  # shared boilerplate, other body
    ]
    return a, b


def test_near_clusters_match_brute_force(corpus, tmp_path):
    a_docs, b_docs = planted(corpus)
    a = write_shard(tmp_path / "a.npy", a_docs)
    b = write_shard(tmp_path / "b.npy", b_docs)
    mix = write_mix(tmp_path / "mix.txt", [("code", str(a)), ("prose", str(b))])
    out = tmp_path / "r.json"
    argv = ["audit", "dedup", "--mix", mix, "--out", str(out), "--work-dir", str(tmp_path), "--near"]
    assert main([*argv, "--max-near-dup-frac", "0.07", "--max-repeated-span-frac", "1"]) == 0
    near = json.loads(out.read_text())["near_duplicates"]
    docs = [d for d in a_docs + b_docs if len(d[1]) + 1 >= 32]
    want = brute_clusters(docs)
    assert {c["keep"]: c["doc_ids"] for c in near["clusters"]} == want
    assert {m for c in near["clusters"] for m in c["doc_ids"]} >= {"edit", "trunc"}
    assert all("header" not in c["doc_ids"] for c in near["clusters"])
    for c in near["clusters"]:
        keep = grams(dict(docs)[c["keep"]])
        sims = [len(keep & grams(dict(docs)[m])) / len(keep | grams(dict(docs)[m])) for m in c["doc_ids"][1:]]
        assert c["jaccard_min"] == round(min(sims), 6)
    removable = sum(len(dict(docs)[m]) + 1 for c in near["clusters"] for m in c["doc_ids"][1:])
    assert near["removable_tokens"] == removable
    # the gate
    assert main([*argv, "--max-near-dup-frac", "0.06", "--max-repeated-span-frac", "1"]) == 1


def test_loader_reports_near_duplicate_exposure(corpus, tmp_path):
    a_docs, b_docs = planted(corpus)
    a = write_shard(tmp_path / "a.npy", a_docs)
    b = write_shard(tmp_path / "b.npy", b_docs)
    mix = write_mix(tmp_path / "mix.txt", [("code", str(a)), ("prose", str(b)), ("prose", str(b))])
    out = tmp_path / "r.json"
    argv = ["audit", "loader", "--mix", mix, "--seq-len", "64", "--global-batch-size", "4"]
    rc = main([*argv, "--work-dir", str(tmp_path / "w"), "--out", str(out), "--near", "--no-content"])
    report = json.loads(out.read_text())
    near = report["near_duplicates"]
    assert near["removable_documents"] >= 2
    # b is listed twice: its removable tokens are planned twice
    assert near["planned_removable_tokens"] == 2 * near["removable_tokens"]
    frac = near["planned_removable_tokens"] / near["planned_tokens"]
    assert report["checks"]["near_duplicate_exposure"]["value"] == round(frac, 6)
    assert rc == 1 and not report["checks"]["near_duplicate_exposure"]["ok"]  # 9.5% > the 5% default
