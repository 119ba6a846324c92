"""`olmax data prepare`: exact tokens located by sidecars, determinism, resume, mixes, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest

from olmax.cli import main
from olmax.data.mixfile import read_mix
from olmax.data.shards import read_sidecar
from olmax.data.tokenfile import read_tokens
from olmax.testing.prepare_testdata import (
    kill_after_shards,
    pydoc_texts,
    read_folder_bytes,
    stdlib_texts,
    write_jsonl,
)

EOS = 100257


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("raw")
    code = stdlib_texts(40)
    write_jsonl(d / "code" / "a.jsonl.gz", code[:25])
    write_jsonl(d / "code" / "b.jsonl.zst", code[25:])
    write_jsonl(d / "prose.jsonl", pydoc_texts()[:60] + [("empty", "")])
    return d


def run(*argv: str) -> int:
    return main(["data", "prepare", "--no-progress", *argv])


def prepare_into(out: Path, inputs: Path, dolma2: str, *extra: str) -> Path:
    rc = run(
        "--tokenizer",
        dolma2,
        "--out",
        str(out),
        "--shard-size",
        "256KB",
        *extra,
        f"code={inputs}/code/*",
        f"prose={inputs}/prose.jsonl",
    )
    assert rc == 0
    return out


def docs_by_id(out: Path) -> dict[str, np.ndarray]:
    """Every document's tokens, located through mix.txt and the sidecars only."""
    mix = read_mix(str(out / "mix.txt"))
    docs = {}
    for path in dict.fromkeys(mix.paths):
        tokens = read_tokens(path)
        for row in read_sidecar(path):
            docs[row.id] = np.array(tokens[row.start : row.end])
    return docs


def test_every_document_equals_tokenizers_plus_eos(tmp_path, inputs, dolma2):
    from tokenizers import Tokenizer

    out = prepare_into(tmp_path / "out", inputs, dolma2, "--workers", "2")
    docs = docs_by_id(out)
    ref = Tokenizer.from_file(dolma2)
    expected = dict(stdlib_texts(40) + pydoc_texts()[:60])
    assert set(docs) == set(expected)  # the empty document was skipped
    for doc_id, text in expected.items():
        want = ref.encode(text, add_special_tokens=False).ids + [EOS]
        assert docs[doc_id].tolist() == want, doc_id
    manifest = json.loads((out / "manifest.json").read_text())
    prose = manifest["sources"]["prose"]
    assert prose["skipped"]["empty_docs"] == 1 and prose["docs"] == 60
    assert manifest["sources"]["code"]["utf8_bytes"] == sum(len(t.encode()) for _, t in stdlib_texts(40))
    shards = manifest["sources"]["code"]["shards"]
    assert len(shards) > 2 and all(s["tokens"] * 4 >= 256_000 for s in shards[:-1])
    # every shard is whole documents: it starts a document and ends with EOS, sidecar rows tile it
    for s in shards:
        tokens = read_tokens(out / s["path"])
        rows = read_sidecar(out / s["path"])
        assert rows[0].start == 0 and rows[-1].end == len(tokens) == s["tokens"]
        assert all(a.end == b.start for a, b in zip(rows, rows[1:]))
        assert tokens[-1] == EOS
    assert manifest["fingerprint"] and len(manifest["fingerprint"]) == 64


def test_olmo_core_reads_mix_unchanged(tmp_path, inputs, dolma2):
    """OLMo-core's own mix parser (it demands {TOKENIZER} in each path) and NumpyFSLDataset read the output."""
    from olmo_core.data import DataMix, NumpyFSLDataset, TokenizerName
    from olmo_core.data.mixes import DataMixBase

    out = prepare_into(tmp_path / "out", inputs, dolma2)
    mixes = tmp_path / "mixes"
    mixes.mkdir()
    (mixes / "olmax_test.txt").write_text((out / "mix.txt").read_text())

    class LocalMix(DataMixBase):
        olmax_test = "olmax_test"

    import olmo_core.data.mixes as oc_mixes

    real = oc_mixes._get_data_mix_path
    # OLMo-core looks mixes up inside its package; point that lookup at our copy, and parse with its code
    oc_mixes._get_data_mix_path = lambda name: nullcontext(mixes / f"{name}.txt")
    try:
        paths, labels = DataMix.build(LocalMix.olmax_test, str(out), TokenizerName.dolma2)
    finally:
        oc_mixes._get_data_mix_path = real
    ds = NumpyFSLDataset(
        *paths, sequence_length=128, pad_token_id=100277, eos_token_id=EOS, vocab_size=100278, dtype=np.uint32
    )
    ds.work_dir = tmp_path / "work"
    ds.prepare()
    manifest = json.loads((out / "manifest.json").read_text())
    assert ds.fingerprint == manifest["fingerprint"]
    assert len(ds) == sum(s["tokens"] // 128 for src in manifest["sources"].values() for s in src["shards"])
    first = read_tokens(out / manifest["sources"]["code"]["shards"][0]["path"])[:128]
    assert ds[0]["input_ids"].tolist() == first.tolist()
    assert labels.count("prose") == len(manifest["sources"]["prose"]["shards"])


def test_output_does_not_depend_on_workers(tmp_path, inputs, dolma2):
    a = read_folder_bytes(prepare_into(tmp_path / "w1", inputs, dolma2, "--workers", "1"))
    b = read_folder_bytes(prepare_into(tmp_path / "w2", inputs, dolma2, "--workers", "2"))
    assert a.keys() == b.keys() and len(a) > 6
    assert all(a[k] == b[k] for k in a if k != "manifest.json")
    strip = lambda m: {k: v for k, v in json.loads(m).items() if k != "sources"}  # noqa: E731 (inputs are paths)
    assert strip(a["manifest.json"]) == strip(b["manifest.json"])


def test_resume_after_lost_shards_gives_same_bytes(tmp_path, inputs, dolma2):
    out = prepare_into(tmp_path / "out", inputs, dolma2)
    want = read_folder_bytes(out)
    # simulate a kill mid-run: only the first two code shards were recorded, a third was half written
    state = json.loads((out / ".olmax-prepare.json").read_text())
    code = state["labels"]["code"]
    kept = code["shards"][:2]
    for rec in code["shards"][2:]:
        Path(out, rec["info"]["path"]).unlink()
    code.update(shards=kept, done=False)
    del state["labels"]["prose"]
    (out / ".olmax-prepare.json").write_text(json.dumps(state))
    for f in (out / "mix.txt", out / "manifest.json"):
        f.unlink()
    half = Path(out, kept[-1]["info"]["path"].replace("-00001.npy", "-00002.npy.tmp"))
    half.write_bytes(b"\0" * 10)
    before = {p: p.stat().st_mtime_ns for p in (out / kept[0]["info"]["path"], out / kept[1]["info"]["path"])}
    prepare_into(out, inputs, dolma2)
    assert read_folder_bytes(out) == want
    assert {p: p.stat().st_mtime_ns for p in before} == before  # finished shards were not redone


def test_resume_at_any_shard_keeps_skip_counts(tmp_path, dolma2):
    """Empty texts and skipped bad lines are journaled by position: resuming after any finished shard gives the
    bytes of an uninterrupted run, the journal and the manifest's skip counts and examples included."""
    docs = stdlib_texts(14)
    write_jsonl(
        tmp_path / "a.jsonl",
        docs[:7],
        extra=[
            '{"id": "e1", "text": ""}',
            '{"id": "torn", "text": ',
            *[json.dumps({"id": i, "text": t}) for i, t in docs[7:10]],
            '{"id": "e2", "text": ""}',
            "[1]",
        ],
    )
    write_jsonl(tmp_path / "b.jsonl", docs[10:], extra=['{"id": "e3", "text": ""}'])
    args = (
        "--tokenizer",
        dolma2,
        "--shard-size",
        "12KB",
        "--skip-bad-lines",
        f"src={tmp_path}/a.jsonl",
        f"src2={tmp_path}/b.jsonl",
    )
    full = tmp_path / "full"
    assert run("--out", str(full), *args) == 0
    want = {**read_folder_bytes(full), "journal": (full / ".olmax-prepare.json").read_bytes()}
    state = json.loads(want["journal"])
    n = len(state["labels"]["src"]["shards"])
    assert n >= 4 and state["labels"]["src"]["empty"] == 2 and state["labels"]["src"]["bad_lines"] == 2
    assert (
        len({(s["empty"], s["bad_lines"]) for s in state["labels"]["src"]["shards"]}) > 1
    )  # counts move along
    for k in range(n - 1):
        out = tmp_path / f"cut{k}"
        assert run("--out", str(out), *args) == 0
        cut = json.loads((out / ".olmax-prepare.json").read_text())
        src = cut["labels"]["src"]
        for rec in src["shards"][k + 1 :]:
            Path(out, rec["info"]["path"]).unlink()
        src.update(shards=src["shards"][: k + 1], done=False)
        del cut["labels"]["src2"]
        (out / ".olmax-prepare.json").write_text(json.dumps(cut))
        for f in (out / "mix.txt", out / "manifest.json"):
            f.unlink()
        assert run("--out", str(out), *args) == 0
        got = {**read_folder_bytes(out), "journal": (out / ".olmax-prepare.json").read_bytes()}
        assert [name for name in want if want[name] != got.get(name)] == [], f"resumed after shard {k}"


def test_sigkill_then_rerun_gives_same_bytes(tmp_path, inputs, dolma2):
    ref = read_folder_bytes(prepare_into(tmp_path / "ref", inputs, dolma2, "--shard-size", "16KB"))
    out = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "olmax.cli",
        "data",
        "prepare",
        "--no-progress",
        "--tokenizer",
        dolma2,
        "--out",
        str(out),
        "--shard-size",
        "16KB",
        f"code={inputs}/code/*",
        f"prose={inputs}/prose.jsonl",
    ]
    kill_after_shards(cmd, out)
    assert not (out / "mix.txt").exists()
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    assert read_folder_bytes(out) == ref


def test_rerun_removes_temporaries_a_kill_left_behind(tmp_path, inputs, dolma2):
    """A SIGKILL can land mid-way through an atomic write (the journal's temporary, a shard's `.tmp`);
    the rerun resumes and leaves exactly the bytes of a clean run, with no stale temporary beside them."""
    ref = read_folder_bytes(prepare_into(tmp_path / "ref", inputs, dolma2))
    out = prepare_into(tmp_path / "out", inputs, dolma2)
    (out / ".olmax-prepare.json.k1lled.tmp").write_bytes(b"")
    shard_dir = next(p.parent for p in out.rglob("*.npy"))
    (shard_dir / "code-00099.npy.tmp").write_bytes(b"\x00" * 12)
    assert read_folder_bytes(prepare_into(out, inputs, dolma2)) == ref


def test_dolma_compat_strips_like_dolma_tokens(tmp_path, dolma2):
    from tokenizers import Tokenizer

    docs = [
        ("pad", "  spaced text \n\n"),
        ("blank", " \n\t "),
        ("eos", "ends in<|endoftext|>"),
        ("plain", "x"),
    ]
    src = write_jsonl(tmp_path / "in.jsonl", docs)
    ref = Tokenizer.from_file(dolma2)
    enc = lambda t: ref.encode(t, add_special_tokens=False).ids  # noqa: E731
    for compat, want in (
        (False, {i: enc(t) + [EOS] for i, t in docs}),
        (
            True,
            {
                "pad": enc("spaced text") + [EOS],
                "eos": enc("ends in<|endoftext|>"),
                "plain": enc("x") + [EOS],
            },
        ),
    ):
        out = tmp_path / f"out-{compat}"
        assert (
            run("--tokenizer", dolma2, "--out", str(out), *(["--dolma-compat"] if compat else []), f"s={src}")
            == 0
        )
        assert {k: v.tolist() for k, v in docs_by_id(out).items()} == want
    skipped = json.loads((out / "manifest.json").read_text())["sources"]["s"]["skipped"]["empty_docs"]
    assert skipped == 1


def test_mix_spec_plans_explicit_repeats(tmp_path, inputs, dolma2):
    spec = tmp_path / "mix.yaml"
    spec.write_text(f"""
total_tokens: 300000
sources:
  code: {{paths: ["{inputs}/code/*"], ratio: 0.5}}
  prose: {{paths: "{inputs}/prose.jsonl", ratio: 0.5, max_repetition: 3}}
""")
    out = tmp_path / "out"
    assert run("--tokenizer", dolma2, "--out", str(out), "--shard-size", "64KB", "--mix-spec", str(spec)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    plan = manifest["mix"]["plan"]
    mix = read_mix(str(out / "mix.txt"))
    sizes = {p: os.path.getsize(p) // 4 for p in set(mix.paths)}
    for label in ("code", "prose"):
        listed = sum(sizes[p] for p, lab in zip(mix.paths, mix.labels) if lab == label)
        assert listed == plan[label]["planned_tokens"]
        assert abs(listed - 150_000) < 15_000  # within a document of the 50/50 target
    prose_avail = plan["prose"]["available_tokens"]
    assert plan["prose"]["whole_copies"] >= 1 and plan["prose"]["repetition"] > 1
    assert plan["code"]["repetition"] < 1 and plan["code"]["whole_copies"] == 0
    prose_paths = [p for p, lab in zip(mix.paths, mix.labels) if lab == "prose"]
    assert len(prose_paths) > len(set(prose_paths))  # the planned repeat is written out as repeated lines
    assert sum(sizes[p] for p in set(prose_paths)) == prose_avail
    # every document of the source is still on disk exactly once, split shards included
    assert sum(len(read_sidecar(p)) for p in set(prose_paths)) == 60


def test_mix_spec_beyond_max_repetition_is_refused(tmp_path, inputs, dolma2, capsys):
    spec = tmp_path / "mix.yaml"
    spec.write_text(f"sources:\n  prose: {{paths: '{inputs}/prose.jsonl', target_tokens: 1e9}}\n")
    assert run("--tokenizer", dolma2, "--out", str(tmp_path / "o"), "--mix-spec", str(spec)) == 2
    assert "above its max_repetition 1.0" in capsys.readouterr().err
    assert not (tmp_path / "o" / "mix.txt").exists()


def test_hf_datasets_input_and_arrayrecord(tmp_path, dolma2):
    import datasets

    from olmax.data.arrayrecord import decode_record, read_records

    texts = [t for _, t in pydoc_texts()[:30]]
    datasets.Dataset.from_dict({"body": texts}).save_to_disk(str(tmp_path / "ds"))
    out = tmp_path / "out"
    assert (
        run(
            "--tokenizer",
            dolma2,
            "--out",
            str(out),
            "--text-field",
            "body",
            "--format",
            "arrayrecord",
            f"docs={tmp_path / 'ds'}",
        )
        == 0
    )
    docs = docs_by_id(out)
    assert len(docs) == 30 and "ds:1" in docs
    shard = next((out / "allenai/dolma2-tokenizer/docs").glob("*.npy"))
    records = [decode_record(r) for r in read_records(shard.with_suffix(".arrayrecord"))]
    assert [r["id"] for r in records] == [row.id for row in read_sidecar(shard)]
    assert all(np.array_equal(r["input_ids"], docs[r["id"]]) for r in records)


def test_arrayrecord_records_are_tf_examples():
    """The hand-written protobuf parses as a real tf.train.Example (schema built with protobuf itself)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from olmax.data.arrayrecord import encode_example

    f = descriptor_pb2.FileDescriptorProto(name="ex.proto", package="tf", syntax="proto3")
    bl = f.message_type.add(name="BytesList")
    bl.field.add(name="value", number=1, type=12, label=3)
    il = f.message_type.add(name="Int64List")
    il.field.add(name="value", number=1, type=3, label=3)
    feat = f.message_type.add(name="Feature")
    feat.field.add(name="bytes_list", number=1, type=11, type_name=".tf.BytesList", label=1)
    feat.field.add(name="int64_list", number=3, type=11, type_name=".tf.Int64List", label=1)
    fs = f.message_type.add(name="Features")
    entry = fs.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=9, label=1)
    entry.field.add(name="value", number=2, type=11, type_name=".tf.Feature", label=1)
    fs.field.add(name="feature", number=1, type=11, type_name=".tf.Features.FeatureEntry", label=3)
    ex = f.message_type.add(name="Example")
    ex.field.add(name="features", number=1, type=11, type_name=".tf.Features", label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    Example = message_factory.GetMessageClass(pool.FindMessageTypeByName("tf.Example"))
    tokens = np.array([0, 5, 127, 128, 300, 16384, 100257, 2**31 + 7], dtype=np.uint32)
    msg = Example.FromString(encode_example(tokens, "doc-é", "a.jsonl"))
    assert list(msg.features.feature["input_ids"].int64_list.value) == tokens.tolist()
    assert msg.features.feature["id"].bytes_list.value[0].decode() == "doc-é"
    assert msg.features.feature["source"].bytes_list.value[0] == b"a.jsonl"


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"id": "x", "text": "ok"', r"bad\.jsonl:3: malformed JSON line \(column"),
        ('{"id": "x", "txt": "no text"}', r"bad\.jsonl:3: document has no 'text' field"),
        ("[1, 2]", r"bad\.jsonl:3: malformed JSON line"),
    ],
)
def test_bad_lines_name_file_and_line_and_leave_no_mix(tmp_path, dolma2, capsys, line, message):
    write_jsonl(
        tmp_path / "bad.jsonl", [("a", "one"), ("b", "two")], extra=[line, '{"id": "c", "text": "x"}']
    )
    out = tmp_path / "out"
    assert run("--tokenizer", dolma2, "--out", str(out), f"src={tmp_path / 'bad.jsonl'}") == 2
    import re

    assert re.search(message, capsys.readouterr().err)
    assert not (out / "mix.txt").exists() and not (out / "manifest.json").exists()
    assert not list(out.rglob("*.npy")) and not list(out.rglob("*.tmp"))


def test_skip_bad_lines_counts_them(tmp_path, dolma2):
    write_jsonl(
        tmp_path / "bad.jsonl", [("a", "one"), ("b", "two")], extra=["{oops", '{"id": "c", "text": "x"}']
    )
    out = tmp_path / "out"
    assert (
        run("--tokenizer", dolma2, "--out", str(out), "--skip-bad-lines", f"src={tmp_path / 'bad.jsonl'}")
        == 0
    )
    src = json.loads((out / "manifest.json").read_text())["sources"]["src"]
    assert src["skipped"]["bad_lines"] == 1 and src["docs"] == 3
    assert "bad.jsonl:3" in src["skipped"]["bad_line_examples"][0]


def test_non_utf8_names_byte_offset(tmp_path, dolma2, capsys):
    p = tmp_path / "latin1.jsonl"
    p.write_bytes(b'{"id": "a", "text": "fine"}\n{"id": "b", "text": "caf\xe9"}\n')
    assert run("--tokenizer", dolma2, "--out", str(tmp_path / "out"), f"src={p}") == 2
    err = capsys.readouterr().err
    assert "latin1.jsonl:2: invalid UTF-8 at byte offset 52" in err  # 28 bytes of line 1 + 24 into line 2


def test_duplicate_ids_are_reported(tmp_path, dolma2, capsys):
    write_jsonl(tmp_path / "d.jsonl", [("same", "one"), ("other", "two"), ("same", "three")])
    out = tmp_path / "out"
    assert run("--tokenizer", dolma2, "--out", str(out), f"src={tmp_path / 'd.jsonl'}") == 0
    assert "1 document ids occur more than once" in capsys.readouterr().err
    dup = json.loads((out / "manifest.json").read_text())["sources"]["src"]["duplicate_ids"]
    assert dup == {"count": 1, "examples": ["same"]}


def test_duplicate_ids_across_a_resume_are_reported_as_without_one(tmp_path, dolma2):
    """An id written once before a kill (its shard's hashes read back from the sidecar) and again after the
    rerun (hashed as it is written) is the same duplicate an uninterrupted run reports."""
    docs = stdlib_texts(12)
    docs[1] = ("twice", docs[1][1])
    docs[10] = ("twice", docs[10][1])
    write_jsonl(tmp_path / "d.jsonl", docs)
    out = tmp_path / "out"
    args = ["--tokenizer", dolma2, "--out", str(out), "--shard-size", "64KB", f"src={tmp_path / 'd.jsonl'}"]
    assert run(*args) == 0
    want = json.loads((out / "manifest.json").read_text())
    assert want["sources"]["src"]["duplicate_ids"] == {"count": 1, "examples": ["twice"]}
    state = json.loads((out / ".olmax-prepare.json").read_text())
    shards = state["labels"]["src"]["shards"]
    ids = [[row.id for row in read_sidecar(out / rec["info"]["path"])] for rec in shards]
    assert "twice" in ids[0] and "twice" in sum(ids[1:], [])  # one before the cut, one after
    for rec in shards[1:]:
        Path(out, rec["info"]["path"]).unlink()
    state["labels"]["src"].update(shards=shards[:1], done=False)
    (out / ".olmax-prepare.json").write_text(json.dumps(state))
    for f in (out / "mix.txt", out / "manifest.json"):
        f.unlink()
    assert run(*args) == 0
    assert json.loads((out / "manifest.json").read_text()) == want


def test_custom_tokenizer_gets_its_own_folder_and_mix_resolves(tmp_path, dolma2):
    spec = json.loads(open(dolma2).read())
    spec["added_tokens"].append(
        {
            "id": 100278,
            "content": "<|olmax|>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    )
    custom = tmp_path / "custom.json"
    custom.write_text(json.dumps(spec))
    src = write_jsonl(tmp_path / "in.jsonl", [("a", "one <|olmax|> two"), ("b", "three")])
    out = tmp_path / "out"
    assert run("--tokenizer", str(custom), "--out", str(out), f"s={src}") == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert (
        manifest["tokenizer"]["id"].startswith("tokenizer-") and manifest["tokenizer"]["vocab_size"] == 100279
    )
    docs = docs_by_id(out)
    assert 100278 in docs["a"].tolist() and docs["a"][-1] == EOS


def test_refuses_foreign_output_folder_and_changed_inputs(tmp_path, dolma2, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [("a", "one")])
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert run("--tokenizer", dolma2, "--out", str(out), f"s={src}") == 2
    assert "is not empty" in capsys.readouterr().err and (out / "keep.txt").exists()
    assert run("--tokenizer", dolma2, "--out", str(out), "--overwrite", f"s={src}") == 0
    assert not (out / "keep.txt").exists()
    write_jsonl(src, [("a", "one, changed")])
    os.utime(src, ns=(1, 1))
    assert run("--tokenizer", dolma2, "--out", str(out), f"s={src}") == 2
    assert "other settings or changed inputs" in capsys.readouterr().err
    assert (out / "mix.txt").exists()  # the finished run it refused to touch is intact


def test_inspect_counts_and_decodes(tmp_path, inputs, dolma2, capsys):
    out = prepare_into(tmp_path / "out", inputs, dolma2)
    capsys.readouterr()
    assert main(["data", "inspect", str(out), "--doc", "abc.py", "--tokenizer", dolma2]) == 0
    text = capsys.readouterr().out
    assert "total prose:" in text and "# doc abc.py" in text
    assert dict(stdlib_texts(40))["abc.py"][:300] in text


def test_parquet_folder_and_split_shard_keep_arrayrecords_aligned(tmp_path, dolma2):
    """A fractional planned repeat splits a shard; its per-document ArrayRecord file is split with it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from olmax.data.arrayrecord import decode_record, read_records

    texts = [t for _, t in pydoc_texts()[:40]]
    (tmp_path / "pq").mkdir()
    for i in range(2):
        pq.write_table(
            pa.table({"id": [f"p{i}-{j}" for j in range(20)], "text": texts[i * 20 : (i + 1) * 20]}),
            tmp_path / "pq" / f"part-{i}.parquet",
        )
    spec = tmp_path / "mix.yaml"
    spec.write_text(
        f"sources:\n  docs: {{paths: '{tmp_path / 'pq'}', target_tokens: 30000, max_repetition: 2}}\n"
    )
    out = tmp_path / "out"
    assert (
        run("--tokenizer", dolma2, "--out", str(out), "--format", "arrayrecord", "--mix-spec", str(spec)) == 0
    )
    plan = json.loads((out / "manifest.json").read_text())["mix"]["plan"]["docs"]
    assert plan["whole_copies"] == 0 and 0 < plan["partial_tokens"] == plan["planned_tokens"]
    shards = sorted((out / "allenai/dolma2-tokenizer/docs").glob("*.npy"))
    assert [s.name for s in shards] == ["docs-00000-a.npy", "docs-00000-b.npy"]
    assert read_mix(str(out / "mix.txt")).paths == (str(shards[0]),)  # only the planned prefix is listed
    assert 0 < len(docs_by_id(out)) == len(read_sidecar(shards[0])) < 40
    docs = {}
    for shard in shards:
        tokens = read_tokens(shard)
        docs.update({row.id: np.array(tokens[row.start : row.end]) for row in read_sidecar(shard)})
    assert len(docs) == 40
    for shard in shards:
        records = [decode_record(r) for r in read_records(shard.with_suffix(".arrayrecord"))]
        assert [r["id"] for r in records] == [row.id for row in read_sidecar(shard)]
        assert all(np.array_equal(r["input_ids"], docs[r["id"]]) for r in records)
    assert not list(out.rglob("docs-00000.*"))  # the unsplit originals are gone


@pytest.fixture(scope="module")
def varied_inputs(tmp_path_factory) -> Path:
    """Real text of every kind prepare sees, with what prepare skips, cuts and records: code and prose,
    eval-set-like questions, many scripts and emoji, long words, whitespace runs, added tokens written in
    the text (a text ending in EOS too), empty texts, an exact duplicate and a bad line."""
    d = tmp_path_factory.mktemp("varied")
    code = stdlib_texts(30, start=40)
    hard = [
        (
            "scripts",
            "Привет мир; مرحبا; नमस्ते; こんにちは世界; 你好; 안녕; ＡＢＣ 𝐀𝐁𝐂; 👨\u200d👩\u200d👧 🇯🇵\u200b",
        ),
        ("long", "x" * 20_000 + " " + "supercalifragilistic" * 500),
        ("spaces", " " * 5000 + "\n" * 3000 + "\t \r\n" * 1000 + "end   "),
        ("added", "a<|endoftext|>b |||EMAIL_ADDRESS||| <|pad|><|extra_id_3|> <|endoftext"),
        ("ends-in-eos", "the text ends in EOS<|endoftext|>"),
        ("blank", " \n\t "),
        ("empty", ""),
        ("question", "Question: Which gas do plants take in?\nA. oxygen\nB. carbon dioxide\nAnswer: B"),
    ]
    write_jsonl(d / "a.jsonl.gz", code[:15] + hard, extra=['{"id": "bad", "text": '])
    write_jsonl(d / "b.jsonl.zst", code[15:] + [("copy", code[0][1])])
    write_jsonl(d / "prose.jsonl", pydoc_texts()[:40])
    return d


def test_every_engine_and_worker_count_gives_the_same_bytes(tmp_path, varied_inputs, dolma2, capsys):
    """Shards, sidecars, mix.txt, removed.jsonl and the manifest (but its engine fields) are the same bytes
    whichever engine tokenizes and however many workers run; tokenizers itself is one of the engines."""
    outputs = {}
    for compat in ((), ("--dolma-compat",)):
        for engine, workers in (
            ("tokenizers", "1"),
            ("gigatoken", "1"),
            ("gigatoken", "2"),
            ("tiktoken", "2"),
        ):
            out = tmp_path / f"{engine}-{workers}{''.join(compat)}"
            flags = (
                "--engine",
                engine,
                "--workers",
                workers,
                "--dedup",
                "exact",
                "--skip-bad-lines",
                *compat,
            )
            rc = run("--tokenizer", dolma2, "--out", str(out), "--shard-size", "128KB", *flags,
                     f"code={varied_inputs}/*.jsonl.*", f"prose={varied_inputs}/prose.jsonl")  # fmt: skip
            assert rc == 0
            assert f"olmax: tokenizer engine {engine} " in capsys.readouterr().err
            files = read_folder_bytes(out)
            manifest = json.loads(files.pop("manifest.json"))
            tokenizer = manifest.pop("tokenizer")
            assert tokenizer.pop("engine") == engine
            assert tokenizer.pop("engine_reason").startswith(f"{engine} ")
            outputs[engine, workers, compat] = files, manifest | {"tokenizer": tokenizer}
        want = outputs["tokenizers", "1", compat]
        assert len(want[0]) > 8 and "removed.jsonl" in want[0]
        assert want[1]["sources"]["code"]["skipped"]["bad_lines"] == 1
        for key, got in outputs.items():
            if key[2] == compat:
                assert got[0].keys() == want[0].keys(), key
                assert [k for k in want[0] if got[0][k] != want[0][k]] == [], key
                assert got[1] == want[1], key
    assert outputs["gigatoken", "1", ()][0] != outputs["gigatoken", "1", ("--dolma-compat",)][0]


def test_the_compiled_reader_eos_as_text_and_direct_io_change_no_byte(tmp_path, varied_inputs, dolma2,
                                                                        monkeypatch):  # fmt: skip
    """Without --dedup, prepare reads jsonl with the compiled reader (UTF-8 straight to the engine), writes
    EOS's text after each text and writes shards with direct I/O; each of them off (and the engine
    `tokenizers`, one worker, all off) gives the same bytes: shards, sidecars, mix.txt and the manifest (but
    its engine fields), with a bad line skipped, blocks that cut lines, and both text rules."""
    from olmax.data import readers, shards, tokenize

    real_eos_text = tokenize._eos_text
    native, scans = readers.native_jsonl, []

    class Counted:  # the compiled reader, counting its calls and the EOS text each is given
        def scan(self, *args):
            scans.append(args[7])
            return native.scan(*args)

    settings = {
        "all on": {},
        "python reader": {"native": False},
        "EOS inserted": {"eos": False},
        "buffered writes": {"direct": False},
        "small blocks": {"read_bytes": 4096},
        "reference": {"native": False, "eos": False, "direct": False, "engine": "tokenizers", "workers": "1"},
    }
    for compat in ((), ("--dolma-compat",)):
        outputs = {}
        for name, s in settings.items():
            monkeypatch.setattr(
                readers, "native_jsonl", Counted() if native and s.get("native", True) else None
            )
            monkeypatch.setattr(
                tokenize, "_eos_text", real_eos_text if s.get("eos", True) else lambda *a: None
            )
            monkeypatch.setattr(shards, "direct_io", shards.direct_io and s.get("direct", True))
            monkeypatch.setattr(readers, "READ_BYTES", s.get("read_bytes", 4 << 20))
            out = tmp_path / f"{name}{''.join(compat)}"
            flags = ("--engine", s.get("engine", "gigatoken"), "--workers", s.get("workers", "2"), *compat)
            rc = run("--tokenizer", dolma2, "--out", str(out), "--shard-size", "128KB", "--skip-bad-lines", *flags,
                     f"code={varied_inputs}/*.jsonl.*", f"prose={varied_inputs}/prose.jsonl")  # fmt: skip
            assert rc == 0, name
            files = read_folder_bytes(out)
            manifest = json.loads(files.pop("manifest.json"))
            for key in ("engine", "engine_reason"):
                manifest["tokenizer"].pop(key)
            outputs[name] = files, manifest
        want = outputs["reference"]
        assert len(want[0]) > 8 and want[1]["sources"]["code"]["skipped"]["bad_lines"] == 1
        # the settings are really in force: the compiled reader ran, given EOS's text or not
        assert native is None or {b"", b"<|endoftext|>"} == set(scans)
        scans.clear()
        for name, got in outputs.items():
            assert got[0].keys() == want[0].keys(), name
            assert [k for k in want[0] if got[0][k] != want[0][k]] == [], name
            assert got[1] == want[1], name
