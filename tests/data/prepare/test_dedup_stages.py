"""`olmax data prepare --dedup`: removed.jsonl exact on a hand-checkable corpus, kept text = input minus
spans, --workers invariance, exact resume, bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from olmax.cli import main
from olmax.data.mixfile import read_mix
from olmax.data.shards import read_sidecar
from olmax.data.tokenfile import read_tokens
from olmax.data.tokenize import load_tokenizer
from olmax.testing.prepare_testdata import (
    jaccard,
    kill_after_shards,
    pydoc_texts,
    read_folder_bytes,
    stdlib_texts,
    words,
    write_jsonl,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """Two sources. web: w1; w2 = w1 exactly; w3 = w1 with 3 of 200 words changed; w4 unrelated, holding
    a 700-byte passage P; w5 = other words + P + other words; w6 = w3 exactly (removed as exact, not
    minhash). books: b1 = w4 exactly; b2 holds P too."""
    d = tmp_path_factory.mktemp("dedup-raw")
    v = words(3000, 11)
    w1 = " ".join(v[:200])
    w3_words = list(v[:200])
    for k in (40, 100, 160):
        w3_words[k] = "changed"
    w3 = " ".join(w3_words)
    passage = " ".join(v[1000:1130])[:700]
    w4 = "Alpha. " + " ".join(v[400:480]) + "\n" + passage + "\n" + " ".join(v[480:520])
    w5 = " ".join(v[600:640]) + " {" + passage + "} " + " ".join(v[640:660])
    b2 = "Beta: " + passage + " — fin"
    docs = {"w1": w1, "w2": w1, "w3": w3, "w4": w4, "w5": w5, "w6": w3, "b1": w4, "b2": b2}
    write_jsonl(d / "web.jsonl", [(k, docs[k]) for k in ("w1", "w2", "w3", "w4", "w5", "w6")])
    write_jsonl(d / "books" / "b.jsonl", [("b1", docs["b1"]), ("b2", docs["b2"])])
    return d, docs


def run(*argv: str) -> int:
    return main(["data", "prepare", "--no-progress", *argv])


def prepare(out: Path, raw: Path, dolma2: str, *extra: str) -> Path:
    assert (
        run("--tokenizer", dolma2, "--out", str(out), *extra, f"web={raw}/web.jsonl", f"books={raw}/books")
        == 0
    )
    return out


def kept_texts(out: Path, dolma2: str) -> dict[str, str]:
    tok = load_tokenizer(dolma2)
    texts = {}
    for path in dict.fromkeys(read_mix(str(out / "mix.txt")).paths):
        tokens = read_tokens(path)
        for row in read_sidecar(path):
            texts[row.id] = tok.decode(np.asarray(tokens[row.start : row.end - 1]).tolist())
    return texts


def test_removed_records_are_exact(tmp_path, corpus, dolma2):
    raw, docs = corpus
    out = prepare(tmp_path / "out", raw, dolma2, "--dedup", "substring,minhash,exact")
    records = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    passage = docs["w4"].split("\n")[1]
    p5 = docs["w5"].index(passage)
    pb = docs["b2"].encode().index(passage.encode())
    assert records == [
        {"id": "w2", "source": "web", "stage": "exact", "kept": "w1"},
        {
            "id": "w3",
            "source": "web",
            "stage": "minhash",
            "kept": "w1",
            "jaccard": round(jaccard(docs["w1"], docs["w3"]), 6),
        },
        {
            "id": "w5",
            "source": "web",
            "stage": "substring",
            "kept": "w4",
            "spans": [[p5, p5 + 700]],
            "span_kept": ["w4"],
        },
        {"id": "w6", "source": "web", "stage": "exact", "kept": "w1", "kept_via": "w3"},
        {"id": "b1", "source": "books", "stage": "exact", "kept": "w4"},
        {
            "id": "b2",
            "source": "books",
            "stage": "substring",
            "kept": "w4",
            "spans": [[pb, pb + 700]],
            "span_kept": ["w4"],
        },
    ]
    assert 0.8 <= records[1]["jaccard"] < 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dedup"]["removed"] == {"exact": 3, "minhash": 1, "substring": 2}
    kept = kept_texts(out, dolma2)
    assert sorted(kept) == ["b2", "w1", "w4", "w5"]
    for r in records:
        if "spans" in r:
            data = docs[r["id"]].encode()
            want = b"".join([data[: r["spans"][0][0]], data[r["spans"][0][1] :]]).decode()
            assert kept[r["id"]] == want
    assert kept["w1"] == docs["w1"] and kept["w4"] == docs["w4"]


def test_only_named_stages_run_and_plain_output_has_no_trace(tmp_path, corpus, dolma2):
    raw, _ = corpus
    out = prepare(tmp_path / "exact", raw, dolma2, "--dedup", "exact")
    stages = {json.loads(x)["stage"] for x in (out / "removed.jsonl").read_text().splitlines()}
    assert stages == {"exact"}
    plain = prepare(tmp_path / "plain", raw, dolma2)
    assert not (plain / "removed.jsonl").exists() and not (plain / ".olmax-dedup.json").exists()
    assert "dedup" not in json.loads((plain / "manifest.json").read_text())
    assert "dedup" not in json.loads((plain / ".olmax-prepare.json").read_text())["settings"]
    assert len(kept_texts(plain, dolma2)) == 8


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """Real text with planted repeats: stdlib modules, pydoc topics, and copies of them (exact, edited,
    with a pasted paragraph) spread over two sources and several files."""
    d = tmp_path_factory.mktemp("dedup-big")
    code = stdlib_texts(60)
    prose = pydoc_texts()[:80]
    rng = np.random.default_rng(5)
    copies = []
    for k in range(0, 60, 3):
        i, t = code[k]
        copies.append((f"copy-{i}", t))
        copies.append((f"edit-{i}", t.replace("self", "this", 3) + "\n# trailer\n"))
        j = int(rng.integers(0, len(prose)))
        copies.append((f"paste-{i}", prose[j][1][:2000] + "\n" + code[(k + 1) % 60][1][-1500:]))
    write_jsonl(d / "code" / "a.jsonl.gz", code[:30])
    write_jsonl(d / "code" / "b.jsonl", code[30:] + copies[:30])
    write_jsonl(d / "prose.jsonl", prose + copies[30:])
    return d


def prepare_big(out: Path, raw: Path, dolma2: str, *extra: str) -> Path:
    args = [
        "--tokenizer",
        dolma2,
        "--out",
        str(out),
        "--shard-size",
        "64KB",
        "--dedup",
        "exact,minhash,substring",
    ]
    assert run(*args, *extra, f"code={raw}/code", f"prose={raw}/prose.jsonl") == 0
    return out


def test_workers_and_resume_give_the_same_bytes(tmp_path, big, dolma2):
    ref_dir = prepare_big(tmp_path / "ref", big, dolma2)
    ref = read_folder_bytes(ref_dir)
    stages = {json.loads(x)["stage"] for x in (ref_dir / "removed.jsonl").read_text().splitlines()}
    assert stages == {"exact", "minhash", "substring"}
    assert read_folder_bytes(prepare_big(tmp_path / "w3", big, dolma2, "--workers", "3")) == ref
    # a kill after some shards: the journal keeps the first two of `code`, the decisions stay
    out = tmp_path / "cut"
    shutil.copytree(ref_dir, out)
    journal = json.loads((out / ".olmax-prepare.json").read_text())
    journal["labels"]["code"].update(shards=journal["labels"]["code"]["shards"][:2], done=False)
    del journal["labels"]["prose"]
    (out / ".olmax-prepare.json").write_text(json.dumps(journal))
    for f in ("mix.txt", "manifest.json", "removed.jsonl"):
        (out / f).unlink()
    assert read_folder_bytes(prepare_big(out, big, dolma2)) == ref
    # a kill during the decision pass: a journal, no decisions, no shard (a stale temporary beside it)
    out = tmp_path / "early"
    shutil.copytree(ref_dir, out)
    journal["labels"] = {}
    (out / ".olmax-prepare.json").write_text(json.dumps(journal))
    for p in list(out.iterdir()):
        if p.name != ".olmax-prepare.json":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    (out / ".olmax-dedup.json.x.tmp").write_text("{")
    assert read_folder_bytes(prepare_big(out, big, dolma2)) == ref


def test_minhash_tables_on_scratch_disk_give_the_same_bytes(tmp_path, big, dolma2, monkeypatch, capsys):
    """Past the spill threshold (a third of --max-memory; here 0, so from the first batch) the MinHash
    tables move to scratch disk: every output byte as in memory, and no scratch folder left."""
    from olmax.data.prepare import dedup_stages

    ref = read_folder_bytes(prepare_big(tmp_path / "ref", big, dolma2))
    capsys.readouterr()
    monkeypatch.setattr(dedup_stages, "spill_threshold", lambda max_memory: 0)
    out = prepare_big(tmp_path / "spilled", big, dolma2, "--workers", "2")
    assert "continuing with them on scratch disk" in capsys.readouterr().err
    assert read_folder_bytes(out) == ref
    assert not [p for p in out.iterdir() if p.name.startswith(".olmax-minhash-")]


@pytest.mark.slow
def test_sigkill_then_rerun_gives_same_bytes(tmp_path, big, dolma2):
    ref = read_folder_bytes(prepare_big(tmp_path / "ref", big, dolma2, "--shard-size", "16KB"))
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "olmax.cli", "data", "prepare", "--no-progress", "--tokenizer", dolma2]
    cmd += ["--out", str(out), "--shard-size", "16KB", "--dedup", "exact,minhash,substring"]
    cmd += [f"code={big}/code", f"prose={big}/prose.jsonl"]
    kill_after_shards(cmd, out, timeout=300)
    assert not (out / "removed.jsonl").exists() and (out / ".olmax-dedup.json").exists()
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    assert read_folder_bytes(out) == ref


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--dedup", "exact,fuzzy"], "unknown stage 'fuzzy'"),
        (["--dedup", ","], "unknown stage"),
        (["--dedup", "minhash", "--minhash-bands", "100"], "at most 1024"),
        (["--dedup", "minhash", "--minhash-rows", "0"], "both must be at least 1"),
        (["--dedup", "minhash", "--minhash-threshold", "0"], "(0, 1]"),
        (["--dedup", "minhash", "--minhash-threshold", "1.01"], "(0, 1]"),
        (["--dedup", "substring", "--substring-min-bytes", "0"], "--substring-min-bytes"),
    ],
)
def test_bad_dedup_settings_leave_no_folder(tmp_path, corpus, dolma2, capsys, extra, message):
    raw, _ = corpus
    out = tmp_path / "out"
    rc = run("--tokenizer", dolma2, "--out", str(out), *extra, f"web={raw}/web.jsonl")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("olmax: error:") and message in err[0], err
    assert not out.exists()
