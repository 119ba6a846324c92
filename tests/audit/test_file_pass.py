"""The one pass over a file (olmax/audit/file_pass.py) and the document runs (olmax.data.documents) give, for
any block size, what the whole file gives at once: the instance windows' and documents' xxh3, the span
windows' rolling hashes, the counts and the digest, with the sidecar's documents or EOS ones, for
documents longer than a block, a tail without EOS and an empty file."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash

from olmax.audit.file_pass import PassSettings, file_pass
from olmax.data import token_reads
from olmax.data.documents import document_runs, documents, sidecar_documents
from olmax.data.stream import DOLMA2_EOS
from olmax.data.token_reads import TokenFile
from olmax.hashing import PrefixHasher, spans_hashes, window_spans_hashes
from tests.audit.audit_testdata import write_shard

L, SPAN, MIN_DOC = 16, 5, 4


def shards(tmp_path) -> list[str]:
    """Token files: with a sidecar, without one (a tail without EOS), one long document, and an empty one."""
    rng = np.random.default_rng(3)
    docs = [(f"d{i}", rng.integers(0, 50, int(rng.integers(1, 60))).tolist()) for i in range(40)]
    docs += [("long", rng.integers(0, 50, 300).tolist()), ("copy", docs[3][1])]
    sided = write_shard(tmp_path / "sided.npy", docs)
    raw = np.concatenate([np.fromfile(sided, np.uint32), rng.integers(0, 50, 7).astype(np.uint32)])
    raw.tofile(tmp_path / "raw.npy")
    rng.integers(0, 50, 500).astype(np.uint32).tofile(tmp_path / "one-document.npy")
    (tmp_path / "empty.npy").write_bytes(b"")
    return [
        str(sided),
        str(tmp_path / "raw.npy"),
        str(tmp_path / "one-document.npy"),
        str(tmp_path / "empty.npy"),
    ]


def whole_file(path: str) -> dict:
    """What the pass must give, computed from the whole file at once."""
    tokens = np.fromfile(path, np.uint32)
    docs = documents(path, tokens)
    lengths = docs.ends - docs.starts
    keep = np.flatnonzero(lengths >= MIN_DOC)
    spans = []
    if tokens.size >= SPAN:
        h = PrefixHasher(tokens).windows(SPAN)
        eos = np.concatenate([[0], np.cumsum(tokens == DOLMA2_EOS)])
        inside = np.flatnonzero(eos[SPAN : SPAN + h.size] - eos[: h.size] == 0)
        spans = sorted(zip(h[inside].tolist(), inside.tolist()))
    return {
        "instances": sorted(enumerate(window_spans_hashes(tokens, L).tolist())),
        "docs": sorted(
            zip(
                spans_hashes(tokens, docs.starts[keep], docs.ends[keep]).tolist(),
                keep.tolist(),
                docs.starts[keep].tolist(),
                lengths[keep].tolist(),
            )
        ),
        "spans": spans,
        "totals": (
            tokens.size,
            int(lengths.sum()),
            lengths.size,
            keep.size,
            xxhash.xxh3_128_intdigest(tokens) if tokens.size else 0,
        ),
    }


@pytest.mark.parametrize("block", [L, 3 * L, 1 << 20])
def test_the_pass_gives_the_whole_files_records(tmp_path, monkeypatch, block):
    monkeypatch.setattr(token_reads, "BLOCK_BYTES", 4 * block)
    settings = PassSettings(seq_len=L, min_doc_tokens=MIN_DOC, span=SPAN, chunk_tokens=7)
    for phys, path in enumerate(shards(tmp_path)):
        got: dict[str, list] = {"instances": [], "docs": [], "spans": []}
        gen = file_pass((phys, path), settings)
        while True:
            try:
                kind, rec = next(gen)
            except StopIteration as stop:
                totals = stop.value
                break
            assert (rec["phys"] == phys).all()
            if kind == "instances":
                got[kind] += zip(rec["window"].tolist(), rec["hash"].tolist())
            elif kind == "docs":
                got[kind] += zip(*(rec[k].tolist() for k in ("hash", "doc", "start", "ntok")))
            else:
                got[kind] += zip(rec["hash"].tolist(), rec["pos"].tolist())
        want = whole_file(path)
        assert sorted(got["instances"]) == want["instances"], path
        assert sorted(got["docs"]) == want["docs"], path
        assert sorted(got["spans"]) == want["spans"] and len(set(got["spans"])) == len(got["spans"]), path
        t = totals
        assert (t.tokens, t.doc_tokens, t.docs, t.compared, t.digest) == want["totals"], path


@pytest.mark.parametrize("block", [1, 5, 64, 1 << 20])
def test_document_runs_are_the_files_documents(tmp_path, block):
    for path in shards(tmp_path):
        f = TokenFile(path)
        tokens = np.fromfile(path, np.uint32)
        want = documents(path, tokens)
        runs = list(document_runs(f, sidecar_documents(path, len(f)), DOLMA2_EOS, block))
        got = [
            (o, s, e)
            for r in runs
            for o, s, e in zip(r.ordinals.tolist(), r.starts.tolist(), r.ends.tolist())
        ]
        assert got == list(zip(range(len(want.starts)), want.starts.tolist(), want.ends.tolist())), path
        for r in runs:
            assert np.array_equal(r.tokens, tokens[r.base : int(r.ends[-1])])


@pytest.mark.parametrize("budget", [1, 100, 1 << 24])
def test_pairs_are_confirmed_in_batches_of_any_size(tmp_path, monkeypatch, budget):
    """content.confirm_pairs: equal ranges true, unequal or cut off ones false, in any batch size, for a
    local file and a memory:// one (its ranges read in batches)."""
    import uuid

    import fsspec

    from olmax import ranged
    from olmax.audit import content

    monkeypatch.setattr(content, "CONFIRM_BATCH_TOKENS", budget)
    tokens = np.random.default_rng(5).integers(0, 9, 5000).astype(np.uint32)
    tokens[3000:3100] = tokens[100:200]
    tokens.tofile(tmp_path / "t.npy")
    url = f"memory:///olmax-pairs-{uuid.uuid4().hex[:8]}/t.npy"
    fsspec.filesystem("memory").pipe(url, tokens.tobytes())
    pairs = np.asarray(
        [(0, 100, 1, 3000, 100), (1, 120, 0, 3020, 50), (0, 100, 0, 3001, 100), (0, 4990, 1, 100, 20)],
        dtype=np.int64,
    )
    try:
        got = content.confirm_pairs([str(tmp_path / "t.npy"), url], pairs)
    finally:
        ranged.forget_pins()
    assert got.tolist() == [True, True, False, False]
