"""`removed.jsonl`'s `kept` names the keeper: on real text full of licence boilerplate (the machine's
package copyright files and common licences, the stdlib's sources) with planted copies, every record's
keeper is followed into the prepared shards and the text is found there."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from olmax.cli import main
from olmax.data.mixfile import read_mix
from olmax.data.shards import read_sidecar
from olmax.data.tokenfile import read_tokens
from olmax.data.tokenize import load_tokenizer
from olmax.dedup.substring import cut
from olmax.testing.prepare_testdata import stdlib_texts, write_jsonl

DOC = Path("/usr/share/doc")
LICENSES = Path("/usr/share/common-licenses")


def licence_texts(limit: int) -> list[tuple[str, str]]:
    files = sorted(DOC.glob("*/copyright"))[:limit] + sorted(p for p in LICENSES.glob("*") if p.is_file())
    out = []
    for p in files:
        text = p.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            out.append((f"{p.parent.name}/{p.name}", text))
    return out


def planted(docs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The documents and copies that make the stages meet: a near copy of an early document followed
    by exact copies of it (their keeper is then removed by minhash), a pasted paragraph, exact twins."""
    rng = np.random.default_rng(7)
    out = list(docs)
    for k in range(0, 60, 6):
        i, t = docs[k]
        w = t.split(" ")
        for j in rng.choice(len(w), size=max(1, len(w) // 50), replace=False):
            w[int(j)] = w[int(j)].upper()  # case only: the same words, other bytes
        near = " ".join(w)
        out.append((f"{i}~near", near))
        out.append((f"{i}~near~copy", near))
        out.append((f"{i}~copy", t))
    para = docs[3][1][:1500]
    for k in range(10, 40, 3):
        i, t = docs[k]
        out.append((f"{i}~pasted", t[: len(t) // 2] + "\n" + para + "\n" + t[len(t) // 2 :]))
    return out


def outputs(out: Path, tokenizer: str) -> dict[str, bytes]:
    tok = load_tokenizer(tokenizer)
    texts = {}
    for path in dict.fromkeys(read_mix(str(out / "mix.txt")).paths):
        tokens = read_tokens(path)
        for row in read_sidecar(path):
            texts[row.id] = tok.decode(np.asarray(tokens[row.start : row.end - 1]).tolist()).encode()
    return texts


@pytest.mark.may_skip
@pytest.mark.skipif(len(list(DOC.glob("*/copyright"))) < 100, reason="needs a machine's /usr/share/doc")
def test_every_kept_holds_the_text(tmp_path, dolma2):
    docs = planted(licence_texts(500) + [(i, t[:20000]) for i, t in stdlib_texts(60)])
    write_jsonl(tmp_path / "raw" / "lic.jsonl", docs[: len(docs) // 2])
    write_jsonl(tmp_path / "raw" / "more.jsonl", docs[len(docs) // 2 :])
    out = tmp_path / "out"
    argv = ["data", "prepare", "--no-progress", "--tokenizer", dolma2, "--out", str(out)]
    argv += ["--dedup", "exact,minhash,substring"]
    assert main([*argv, f"a={tmp_path}/raw/lic.jsonl", f"b={tmp_path}/raw/more.jsonl"]) == 0
    original = {i: t.encode() for i, t in docs}
    assert len(original) == len(docs)
    held = outputs(out, dolma2)
    records = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    by_id = {r["id"]: r for r in records}
    stages = {r["stage"] for r in records}
    assert stages == {"exact", "minhash", "substring"}
    spans = vias = 0
    for r in records:
        if r["stage"] == "substring":
            assert r["kept"] == r["span_kept"][0] and len(r["spans"]) == len(r["span_kept"])
            for (a, b), keeper in zip(r["spans"], r["span_kept"]):
                assert original[r["id"]][a:b] in held[keeper], (r["id"], a, b, keeper)
                spans += 1
            if r.get("emptied"):
                assert r["id"] not in held
            else:
                assert held[r["id"]] == cut(original[r["id"]], r["spans"])
            continue
        assert r["id"] not in held and r["kept"] in held, r  # the keeper reached the output
        if "kept_via" in r:
            via = by_id[r["kept_via"]]  # the first keeper: removed in turn, or cut to nothing
            assert via["stage"] != "substring" or via.get("emptied")
            vias += 1
        elif r["stage"] == "exact":  # the same text: the keeper's output is it, less its own cut spans
            edit = by_id.get(r["kept"])
            assert held[r["kept"]] == cut(original[r["id"]], edit["spans"] if edit else [])
    assert spans >= 30 and vias >= 5  # the planted kinds all met
