"""`olmax audit dedup`: duplicate documents and repeated 50-token spans against brute force."""

from __future__ import annotations

import json

import numpy as np

from olmax.audit.dedup import DedupConfig, audit_dedup
from olmax.cli import main
from olmax.data.index import DOLMA2_EOS
from olmax.data.stream import StreamSpec
from olmax.data.tokenfile import read_tokens
from tests.audit.audit_testdata import write_mix, write_shard


def brute_repeated_tokens(paths, span):
    """Tokens inside a later occurrence of a span-token window (no EOS) seen earlier, brute force."""
    seen, total = set(), 0
    for p in paths:
        t = read_tokens(p)
        mark = np.zeros(len(t), bool)
        for i in range(len(t) - span + 1):
            w = t[i : i + span]
            if (w == DOLMA2_EOS).any():
                continue
            key = w.tobytes()
            if key in seen:
                mark[i : i + span] = True
            seen.add(key)
        total += int(mark.sum())
    return total


def test_planted_document_and_span_repeats(corpus, tmp_path):
    code, prose = corpus["code"], corpus["prose"]
    # doc 0 of code copied whole into the prose shard; a 120-token slice of doc 1 pasted in a new doc
    piece = list(code[1][1][200:320])
    a = write_shard(tmp_path / "a.npy", code[:20])
    b = write_shard(
        tmp_path / "b.npy", [*prose[:20], ("copy", code[0][1]), ("paste", list(prose[30][1][:40]) + piece)]
    )
    mix = write_mix(tmp_path / "mix.txt", [("code", str(a)), ("prose", str(b)), ("prose", str(b))])
    rep = audit_dedup(DedupConfig(StreamSpec(mix=mix, work_dir=str(tmp_path)), chunk_tokens=5000))
    assert rep["files"] == 2  # the path listed twice is planned repetition, hashed once
    assert rep["duplicate_documents"] >= 1
    assert any(
        e["file"] == str(b) and e["same_as_file"] == str(a) for e in rep["duplicate_document_examples"]
    )
    assert rep["repeated_span_tokens"] == brute_repeated_tokens([str(a), str(b)], 50)
    assert rep["repeated_across_sources"] > 0
    out = tmp_path / "r.json"
    rc = main(
        [
            "audit",
            "dedup",
            "--mix",
            mix,
            "--out",
            str(out),
            "--max-dup-doc-frac",
            "0",
            "--work-dir",
            str(tmp_path),
        ]
    )
    assert rc == 1 and json.loads(out.read_text())["repeated_span_tokens"] == rep["repeated_span_tokens"]
