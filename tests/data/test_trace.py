"""`olmax data which / where` and `olmax audit exposure`, checked against OLMo-core's NumpyFSLDataLoader: its
batches are walked and their tokens (each token is its own global position, except the EOS tokens planted
here) say which file offsets each step served, with no olmax code in the reference."""

from __future__ import annotations

import json

import numpy as np
import pytest

from olmax.cli import main
from olmax.data.documents import DocumentCache
from olmax.data.loader import open_loader
from olmax.data.mixfile import read_mix
from olmax.data.stream import StreamSpec
from olmax.data.trace import Span, where, which
from tests.data.loader_testdata import (
    SIZES,
    file_starts,
    olmo_core_epoch,
    olmo_core_loader,
    write_position_files,
)

L, G, SEED = 16, 8, 7
EOS = 100257
EOS_AT = {0: (99, 300, 301, 640), 3: (15, 1000)}  # file -> offsets holding EOS (documents end there)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("trace")
    mix_path = write_position_files(str(root / "positions"))
    mix = read_mix(mix_path)
    for f, offsets in EOS_AT.items():
        tokens = np.fromfile(mix.paths[f], dtype=np.uint32)
        tokens[list(offsets)] = EOS
        tokens.tofile(mix.paths[f])
    oc = olmo_core_loader(mix.paths, L, G, SEED, str(root / "oc"))
    batches = [(e, b, ids) for e in (1, 2) for b, (ids, _) in enumerate(olmo_core_epoch(oc, e))]
    stream = StreamSpec(mix=mix_path, seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(root / "work"))
    return {
        "root": root,
        "mix": mix_path,
        "paths": mix.paths,
        "batches": batches,
        "stream": stream,
        "loader": open_loader(stream, process_index=0, process_count=1),
    }


def served(ids: np.ndarray) -> list[tuple[int, int]]:
    """(file, offset of the row's first token) of each OLMo-core row, from the tokens alone."""
    starts = file_starts(SIZES)
    out = []
    for row in ids:
        first = int(row[1]) - 1 if int(row[0]) == EOS else int(row[0])  # two EOS never sit side by side
        f = int(np.searchsorted(starts, first, side="right") - 1)
        out.append((f, first - int(starts[f])))
    return out


def doc_bounds(f: int) -> list[tuple[int, int]]:
    """Documents of file f: each ends after an EOS (a tail without one is a last document)."""
    ends = [o + 1 for o in EOS_AT.get(f, ())] + [SIZES[f]]
    ends = sorted(set(ends))
    return list(zip([0, *ends[:-1]], ends))


def test_which_names_the_documents_of_olmo_cores_batches(data):
    cache = DocumentCache(data["root"] / "docs")
    bpe = len(data["batches"]) // 2
    for step in (1, 2, bpe, bpe + 1, 2 * bpe):
        epoch, b, ids = data["batches"][step - 1]
        got = which(data["loader"], step, cache)
        assert (got["epoch"], got["batch_in_epoch"]) == (epoch, b)
        for row, (f, a) in zip(got["rows"], served(ids)):
            # the row's segments, rebuilt from the documents the EOS tokens delimit
            want = [
                (k, max(a, s) - s, min(a + L, e) - s)
                for k, (s, e) in enumerate(doc_bounds(f))
                if s < a + L and e > a
            ]
            assert [(seg["file"], seg["doc_id"], seg["start"], seg["end"]) for seg in row["segments"]] == [
                (data["paths"][f], f"#{k}", s, e) for k, s, e in want
            ], (step, row)
            assert row["segments"][0]["source"] in {"web", "code", "books", "math"}


@pytest.mark.parametrize("span", [(0, 100, 130), (3, 0, 16), (3, 2040, 2048), (5, 5, 6), (1, 0, 37)])
def test_where_equals_walking_olmo_cores_batches(data, span):
    f, a, b = span
    want = sorted(
        {
            (e - 1) * (len(data["batches"]) // 2) + bi + 1
            for e, bi, ids in data["batches"]
            for ff, off in served(ids)
            if ff == f and off < b and off + L > a
        }
    )
    hits = where(data["loader"], [Span(data["paths"][f], a, b)], epochs=2)
    assert sorted({h["step"] for h in hits}) == want, span
    if f == 1:  # 37 tokens, L = 16: two instances, the 5-token tail is never served
        assert len({h["instance"] for h in hits}) == 2
    bpe = len(data["batches"]) // 2
    cut = where(data["loader"], [Span(data["paths"][f], a, b)], until_step=bpe + 1)
    assert sorted({h["step"] for h in cut}) == [s for s in want if s <= bpe + 1]


def test_cli_which_where_and_exposure(data, tmp_path, capsys):
    common = [
        "--mix",
        data["mix"],
        "--seq-len",
        str(L),
        "--global-batch-size",
        str(G),
        "--seed",
        str(SEED),
        "--work-dir",
        str(data["root"] / "work"),
    ]
    assert main(["data", "which", *common, "--step", "3", "--out", str(tmp_path / "w.json")]) == 0
    w = json.loads((tmp_path / "w.json").read_text())
    assert len(w["rows"]) == G and w["step"] == 3
    assert (
        main(
            [
                "data",
                "where",
                *common,
                "--file",
                data["paths"][0],
                "--doc",
                "#1",
                "--epochs",
                "2",
                "--out",
                str(tmp_path / "d.json"),
            ]
        )
        == 0
    )
    d = json.loads((tmp_path / "d.json").read_text())
    assert d["tokens"] == [100, 301]
    assert d["steps"] == sorted(
        {h["step"] for h in where(data["loader"], [Span(data["paths"][0], 100, 301)], epochs=2)}
    )
    # a leak report naming two documents of one item and one of another
    leaks = {
        "contaminated": [
            {
                "eval": "qa",
                "id": "a",
                "score": 1.0,
                "documents": [
                    {
                        "source": "web",
                        "file": data["paths"][0],
                        "doc": "#1",
                        "token_start": 120,
                        "token_end": 140,
                    },
                    {
                        "source": "web",
                        "file": data["paths"][5],
                        "doc": "#0",
                        "token_start": 0,
                        "token_end": 10,
                    },
                ],
            },
            {
                "eval": "qa",
                "id": "b",
                "score": 0.9,
                "documents": [
                    {
                        "source": "books",
                        "file": data["paths"][3],
                        "doc": "#1",
                        "token_start": 500,
                        "token_end": 520,
                    }
                ],
            },
        ]
    }
    (tmp_path / "leaks.json").write_text(json.dumps(leaks))
    assert (
        main(
            [
                "audit",
                "exposure",
                *common,
                "--leaks",
                str(tmp_path / "leaks.json"),
                "--epochs",
                "2",
                "--out",
                str(tmp_path / "x.json"),
            ]
        )
        == 0
    )
    x = json.loads((tmp_path / "x.json").read_text())
    bpe = len(data["batches"]) // 2
    for item in x["items"]:
        spans = [
            (data["paths"].index(d["file"]), d["token_start"], d["token_end"])
            for d in next(c for c in leaks["contaminated"] if c["id"] == item["id"])["documents"]
        ]
        walk = sorted(
            {
                ((e - 1) * bpe + bi + 1, r)
                for e, bi, ids in data["batches"]
                for r, (ff, off) in enumerate(served(ids))
                for f, a, b in spans
                if ff == f and off < b and off + L > a
            }
        )
        assert item["steps"] == sorted({s for s, _ in walk}) and item["exposures"] == len(walk)
        assert item["first_step"] == walk[0][0] and item["last_step"] == walk[-1][0]
    assert x["sets"]["qa"]["contaminated"] == 2 and x["sets"]["qa"]["exposed"] == 2
    assert "qa: 2 contaminated item(s)" in capsys.readouterr().out
