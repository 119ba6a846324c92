"""`olmax audit loader` on real-text mixes: clean, planned repetition, a shard under two labels, a
byte-identical copy of a shard, and a resume that replays a step, each against counts built here."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from olmax.audit.loader_audit import LoaderAuditConfig, audit_loader
from olmax.cli import main
from olmax.data.shards import read_sidecar, sidecar_path
from olmax.data.stream import StreamSpec
from olmax.data.tokenfile import read_tokens
from tests.audit.audit_testdata import write_mix

L, G, SEED = 64, 8, 7


def lines(corpus, *extra):
    s = corpus["shards"]
    return [
        ("code", s["code-0"]),
        ("code", s["code-1"]),
        ("code", s["code-2"]),
        ("prose", s["prose-0"]),
        *extra,
    ]


def audit(mix, tmp_path, **kw):
    return audit_loader(
        LoaderAuditConfig(
            stream=StreamSpec(
                mix=mix, seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(tmp_path / "work")
            ),
            **kw,
        )
    )


def windows(path):
    return len(read_tokens(path)) // L


def repeated_docs(paths, min_tokens=32):
    """Brute force: documents (>= min_tokens) equal to an earlier document of these distinct files."""
    seen, repeats = set(), 0
    for path in paths:
        toks = read_tokens(path)
        for r in read_sidecar(path):
            if r.end - r.start >= min_tokens:
                key = toks[r.start : r.end].tobytes()
                repeats += key in seen
                seen.add(key)
    return repeats


def test_clean_mix_passes_and_counts_rows(corpus, tmp_path):
    mix = write_mix(tmp_path / "mix.txt", lines(corpus))
    rep = audit(mix, tmp_path, process_count=2)
    n = sum(windows(p) for p in corpus["shards"].values())
    assert rep["ok"], rep["summary"]
    assert rep["index"]["instances"] == n
    assert rep["replay"]["rows"] == (n // G) * G and rep["replay"]["full_epochs"] == [1]
    assert rep["content"]["duplicate_instances"] == 0 and rep["content"]["identical_files"] == []
    assert rep["content"]["duplicate_documents"] == repeated_docs(corpus["shards"].values())
    assert rep["checks"]["instances_missing"]["value"] == 0
    # one epoch of a clean mix: every distinct token seen exactly once
    assert all(set(e) == {"1x"} for e in rep["exposure"].values())
    assert sum(v["1x"] for v in rep["exposure"].values()) == (n // G) * G * L


def test_planned_repetition_is_not_a_duplicate(corpus, tmp_path):
    s = corpus["shards"]
    mix = write_mix(tmp_path / "mix.txt", lines(corpus, ("prose", s["prose-0"])))
    rep = audit(mix, tmp_path, epochs=1)
    assert rep["ok"], rep["summary"]
    assert rep["content"]["duplicate_instances"] == 0
    assert rep["checks"]["unplanned_repeat_rows"]["value"] == 0
    # the prose shard is listed twice: its share doubles and its content shows up to 2x exposure
    assert rep["sources"]["prose"]["planned_tokens"] == 2 * windows(s["prose-0"]) * L
    assert "2x" in rep["exposure"]["prose"]


def test_shard_under_two_labels_fails(corpus, tmp_path):
    s = corpus["shards"]
    mix = write_mix(tmp_path / "mix.txt", lines(corpus, ("prose", s["code-1"])))
    rep = audit(mix, tmp_path)
    assert not rep["ok"]
    assert rep["checks"]["path_under_several_labels"]["value"] == 1
    assert rep["paths_under_several_labels"][0]["labels"] == ["code", "prose"]
    assert rep["content"]["duplicate_instances"] == 0  # same physical file: not a content copy


def test_copied_shard_fails_with_exact_counts(corpus, tmp_path, capsys):
    s = corpus["shards"]
    copy = tmp_path / "copy-of-code-1.npy"
    shutil.copy(s["code-1"], copy)
    shutil.copy(sidecar_path(s["code-1"]), sidecar_path(copy))
    mix = write_mix(tmp_path / "mix.txt", lines(corpus, ("prose", str(copy))))
    out = tmp_path / "r.json"
    rc = main(
        [
            "audit",
            "loader",
            "--mix",
            mix,
            "--seq-len",
            str(L),
            "--global-batch-size",
            str(G),
            "--seed",
            str(SEED),
            "--work-dir",
            str(tmp_path / "w"),
            "--out",
            str(out),
        ]
    )
    assert rc == 1
    rep = json.loads(out.read_text())
    assert rep["content"]["duplicate_instances"] == windows(copy)
    assert rep["content"]["duplicate_documents"] == repeated_docs([*corpus["shards"].values(), copy])
    assert rep["content"]["duplicate_documents"] > repeated_docs(corpus["shards"].values())
    assert not rep["checks"]["duplicate_instances"]["ok"]
    assert not rep["checks"]["duplicate_documents"]["ok"]
    assert rep["content"]["identical_files"] == [{"file": str(copy), "same_as_file": s["code-1"]}]
    ex = rep["content"]["duplicate_instance_examples"][0]
    assert ex["file"] == str(copy) and ex["same_as_file"] == s["code-1"]
    assert ex["window"] == ex["same_as_window"]
    # documents are named by their sidecar ids, their ordinal in the file beside it
    docs = rep["content"]["duplicate_document_examples"]
    ids = {
        str(copy): [r.id for r in read_sidecar(copy)],
        s["code-1"]: [r.id for r in read_sidecar(s["code-1"])],
    }
    copied = [d for d in docs if d["file"] == str(copy)]
    assert copied and all(isinstance(d["doc"], str) and isinstance(d["doc_index"], int) for d in docs)
    for d in copied:
        assert d["doc"] == ids[str(copy)][d["doc_index"]] and d["same_as_file"] == s["code-1"]
        assert d["same_as_doc"] == ids[s["code-1"]][d["same_as_doc_index"]] == d["doc"]
    assert "FAIL duplicate_instances" in capsys.readouterr().out


def test_replayed_resume_is_caught(corpus, tmp_path, monkeypatch):
    from olmax.data.loader import Loader

    mix = write_mix(tmp_path / "mix.txt", lines(corpus))
    good = audit(mix, tmp_path, steps=6, resume_at=(3,), resume_process_count=2)
    assert good["ok"] and good["replay"]["resumes"][0]["resumed_at_step"] == 3

    real = Loader.resume_position

    def replays_one_step(self, state):
        epoch, step = real(self, state)
        return epoch, step - 1

    monkeypatch.setattr(Loader, "resume_position", replays_one_step)
    bad = audit(mix, tmp_path, steps=6, resume_at=(3,))
    assert not bad["ok"]
    assert bad["checks"]["instances_over_planned"]["value"] == G  # step 2 emitted twice
    assert bad["checks"]["resume_position"]["ok"] is False
    ex = bad["instances_over_planned_examples"][0]
    assert [e["step"] for e in ex["emitted_at"]] == [2, 2]


def test_share_check_uses_the_mix_plan(corpus, tmp_path):
    mix = write_mix(tmp_path / "mix.txt", lines(corpus))
    rep = audit(mix, tmp_path, share_tolerance=0.0)
    n = sum(windows(p) for p in corpus["shards"].values())
    prose = windows(corpus["shards"]["prose-0"])
    assert rep["sources"]["prose"]["planned_share"] == pytest.approx(prose / n, abs=1e-6)
    emitted = np.asarray([rep["sources"][k]["observed_tokens"] for k in ("code", "prose")]).sum()
    assert emitted == (n // G) * G * L


def test_two_epochs_expose_every_token_twice(corpus, tmp_path):
    mix = write_mix(tmp_path / "mix.txt", lines(corpus))
    rep = audit(mix, tmp_path, epochs=2, process_count=4)
    n = sum(windows(p) for p in corpus["shards"].values())
    assert rep["ok"], rep["summary"]
    assert rep["replay"]["full_epochs"] == [1, 2]
    assert rep["checks"]["instances_over_planned"]["value"] == 0
    # each epoch drops a different tail, so a few instances are seen once, the rest twice
    seen = {k: sum(e.get(k, 0) for e in rep["exposure"].values()) for k in ("1x", "2x")}
    assert seen["1x"] + 2 * seen["2x"] == 2 * (n // G) * G * L


def test_natural_repeats_pass_but_are_reported(corpus, tmp_path):
    from tests.audit.audit_testdata import write_shard

    header = corpus["code"][0][1][:120]  # a license-like header repeated in three documents
    docs = [(f"h{i}", list(header) + list(t)) for i, (_, t) in enumerate(corpus["code"][10:13])]
    extra = write_shard(tmp_path / "extra.npy", [*docs, ("again", list(header))])
    mix = write_mix(tmp_path / "mix.txt", lines(corpus, ("code", str(extra))))
    rep = audit(mix, tmp_path)
    assert rep["ok"], rep["summary"]
    assert rep["content"]["identical_files"] == []
    assert rep["content"]["duplicate_documents"] == repeated_docs([*corpus["shards"].values(), extra])


def test_remote_files_are_read_in_place(corpus, tmp_path):
    """The mix's files in memory:// (one listed twice, one copied under another name): the content checks
    give the local report, each file named as the mix names it."""
    import uuid

    import fsspec

    from olmax import ranged

    fs, root = fsspec.filesystem("memory"), f"memory:///olmax-in-place-{uuid.uuid4().hex[:8]}"
    local = lines(corpus, ("code", corpus["shards"]["code-0"]), ("copy", str(tmp_path / "copy.npy")))
    shutil.copy(corpus["shards"]["code-0"], tmp_path / "copy.npy")
    remote = []
    for label, path in local:
        url = f"{root}/{os.path.basename(path)}"
        fs.put_file(path, url)
        if os.path.exists(sidecar_path(path)):
            fs.put_file(str(sidecar_path(path)), f"{root}/{sidecar_path(path).name}")
        remote.append((label, url))
    try:
        want = audit(write_mix(tmp_path / "local.txt", local), tmp_path)["content"]
        got = audit(write_mix(tmp_path / "remote.txt", remote), tmp_path)["content"]
    finally:
        fs.rm(root, recursive=True)
        ranged.forget_pins()
    named = {path: url for (_, path), (_, url) in zip(local, remote)}
    text = json.dumps(want)
    for path, url in named.items():
        text = text.replace(json.dumps(path)[1:-1], url)
    assert json.loads(text) == got
    assert got["identical_files"] == [
        {"file": named[str(tmp_path / "copy.npy")], "same_as_file": remote[0][1]}
    ]
    assert got["duplicate_instances"] == windows(corpus["shards"]["code-0"])  # the copy's, not the repeat's


def test_ranks_sharing_rows_are_caught_at_every_step(corpus, tmp_path, monkeypatch):
    from olmax.data.grain_source import BatchSource

    real = BatchSource.rows

    def every_rank_reads_rank_0(self, epoch, start, stop):  # a double-sharding-like bug
        if self.process_count == 1:
            return real(self, epoch, start, stop)
        g, p = self.global_batch_size, self.process_count
        ids = self.epoch_order(epoch).take(start * g, stop * g, p).astype(np.int64)
        return ids.reshape(stop - start, g // p)

    monkeypatch.setattr(BatchSource, "rows", every_rank_reads_rank_0)
    mix = write_mix(tmp_path / "mix.txt", lines(corpus))
    rep = audit(mix, tmp_path, steps=40, process_count=2)
    assert rep["replay"]["rank_checked_steps"] == 40
    assert rep["checks"]["rank_overlap"]["value"] == 40 * G // 2
    assert rep["checks"]["rank_union"]["value"] == 40 and not rep["ok"]


def test_exposure_file_reads_back_through_evals(corpus, tmp_path):
    from olmax.evals.exposure_file import read_exposure

    s = corpus["shards"]
    mix = write_mix(tmp_path / "mix.txt", lines(corpus, ("prose", s["prose-0"])))
    out = tmp_path / "exposure.npz"
    rep = audit(mix, tmp_path, steps=30, exposure_out=str(out))
    exp = read_exposure(out)
    assert exp.count.sum() == 30 * G == rep["replay"]["rows"]
    assert exp.seq_len == L and exp.step == 30 and set(exp.source) <= {"code", "prose"}
    assert (exp.count == 1).all()  # 30 steps of one epoch: every served instance once


def test_shard_copied_at_an_offset_is_caught_by_spans(corpus, tmp_path):
    s = corpus["shards"]
    toks = read_tokens(s["code-1"])
    shifted = tmp_path / "shifted.npy"
    np.concatenate([np.asarray([11, 12, 13], dtype=np.uint32), toks]).tofile(shifted)  # windows misaligned
    mix = write_mix(tmp_path / "mix.txt", lines(corpus, ("code", str(shifted))))
    plain = audit(mix, tmp_path)
    assert plain["content"]["duplicate_instances"] == 0 and plain["content"]["identical_files"] == []
    rep = audit(mix, tmp_path, span_tokens=50)
    assert not rep["checks"]["repeated_spans"]["ok"]
    assert rep["content"]["repeated_spans"]["repeated_tokens"] >= len(toks) - 200


def test_config_gives_the_recipe_stream_and_flags_override_it(corpus, tmp_path, monkeypatch):
    """`--config RECIPE` audits the stream that recipe trains on (its L, G and data seed); a flag wins."""
    from olmax.train.config import load_config

    monkeypatch.setenv("OLMAX_WORK_DIR", str(tmp_path / "w"))
    mix = write_mix(tmp_path / "mix.txt", lines(corpus))
    tiny = load_config("configs/tiny.yaml").data
    out = tmp_path / "r.json"
    assert main(["audit", "loader", "--config", "configs/tiny.yaml", "--mix", mix, "--out", str(out)]) == 0
    settings = json.loads(out.read_text())["settings"]["stream"]
    assert (settings["seq_len"], settings["global_batch_size"], settings["seed"]) == (
        tiny.seq_len,
        tiny.global_batch_size,
        tiny.seed,
    )
    assert settings["mix"] == mix
    assert (
        main(
            [
                "audit",
                "loader",
                "--config",
                "tiny",
                "--mix",
                mix,
                "--seq-len",
                str(L),
                "--seed",
                "5",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    settings = json.loads(out.read_text())["settings"]["stream"]
    assert (settings["seq_len"], settings["global_batch_size"], settings["seed"]) == (
        L,
        tiny.global_batch_size,
        5,
    )


def test_without_config_the_stream_flags_are_required(corpus, tmp_path, capsys):
    mix = write_mix(tmp_path / "mix.txt", lines(corpus))
    assert main(["audit", "loader", "--mix", mix, "--out", str(tmp_path / "r.json")]) == 2
    assert "--seq-len, --global-batch-size required" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_documents_without_a_sidecar_are_named_by_ordinal(tmp_path):
    from olmax.audit.content import name_documents

    a = tmp_path / "a.npy"
    np.arange(10, dtype=np.uint32).tofile(a)
    ex = name_documents([{"file": str(a), "doc_index": 3, "same_as_file": str(a), "same_as_doc_index": 1}])
    assert ex == [
        {
            "file": str(a),
            "doc": "#3",
            "doc_index": 3,
            "same_as_file": str(a),
            "same_as_doc": "#1",
            "same_as_doc_index": 1,
        }
    ]


@pytest.mark.parametrize("epochs", [1, 3])
def test_streamed_window_content_equals_the_whole_window(corpus, tmp_path, monkeypatch, epochs):
    """The window's content and exposure tallies, spilled over many partitions, give what the whole
    window's arrays give: a shard copied under another label, a path listed twice, several epochs."""
    from olmax.audit import window_content
    from olmax.audit.content import scan_content
    from olmax.audit.plan_replay import PlanReplay
    from olmax.data.loader import stream_index
    from olmax.evals.exposure_file import read_exposure

    monkeypatch.setattr(window_content, "SPILL_TARGET", 512)  # thousands of partitions
    s = corpus["shards"]
    copy = tmp_path / "copy.npy"
    shutil.copy(s["code-1"], copy)
    mix = write_mix(tmp_path / "mix.txt", lines(corpus, ("prose", str(copy)), ("code", s["code-0"])))
    spec = StreamSpec(mix=mix, seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(tmp_path / "work"))
    cfg = LoaderAuditConfig(stream=spec, epochs=epochs)
    index = stream_index(spec)
    content = scan_content(index, cfg)

    def locate(ids):
        w = content.physical_windows(index, ids)
        return w, content.content_of(w)

    plan = PlanReplay(index, cfg)
    tally = window_content.ContentTally(index, locate, plan.total * G, spec.work_dir)
    exposure = window_content.ExposureTally(index, plan.total * G, spec.work_dir)
    kept = []
    for block in plan.blocks():
        tally.add(block.ids)
        exposure.add(block.ids)
        kept.append(block.ids)
    ids = np.concatenate(kept)
    # the whole window at once
    raw, cid = locate(ids)
    pair = np.unique(np.stack([cid, raw]), axis=1, return_counts=True)
    by_cid: dict[int, list[int]] = {}
    for c, n in zip(pair[0][0].tolist(), pair[1].tolist()):
        by_cid.setdefault(c, []).append(n)
    unplanned = sum(sum(v) - max(v) for v in by_cid.values() if len(v) > 1)
    src = index.source_ids(ids)
    _, cfirst, cn = np.unique(cid, return_index=True, return_counts=True)
    want = {}
    for i, name in enumerate(index.label_names):
        levels, tok = np.unique(cn[src[cfirst] == i], return_counts=True)
        want[name] = {f"{int(lv)}x": int(t) * L for lv, t in zip(levels, tok)}
    assert unplanned > 0
    assert tally.finish() == (unplanned, want)
    out = tmp_path / "exposure.npz"
    exposure.write(str(out), spec, last_step=plan.total)
    got = read_exposure(out)
    uniq, counts = np.unique(ids, return_counts=True)
    np.testing.assert_array_equal(got.instance_id, uniq)
    np.testing.assert_array_equal(got.count, counts)
    assert list(got.source) == list(np.asarray(index.label_names)[index.source_ids(uniq)])
    assert got.step == plan.total and got.seq_len == L and not list((tmp_path / "work").glob("olmax-*"))
