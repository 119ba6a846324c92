"""The streamed plan replay (blocks of steps, seen bitmaps) gives the same counts as the whole-window arrays,
on windows that cross block and epoch boundaries, with resumes that replay steps and other process counts."""

from __future__ import annotations

import numpy as np
import pytest

from olmax.audit.loader_audit import LoaderAuditConfig, audit_loader
from olmax.audit.plan_replay import PlanReplay, PlanTally, _set_bits, emitted_at
from olmax.data.loader import stream_index
from olmax.data.stream import StreamSpec

L, G, SEED = 16, 8, 3


@pytest.fixture
def mix(tmp_path):
    """Zero-filled token files of uneven sizes under three labels (the plan needs only their sizes)."""
    lines = []
    for i, windows in enumerate([37, 5, 61, 12, 29, 44]):
        path = tmp_path / f"f{i}.npy"
        with open(path, "wb") as f:
            f.truncate(4 * (windows * L + i))  # a tail shorter than L in most files
        lines.append(f"src{i % 3},{path.name}\n")
    lines.append(f"src2,{tmp_path / 'f2.npy'}\n")  # a path listed twice: planned repetition
    (tmp_path / "mix.txt").write_text("".join(lines))
    return str(tmp_path / "mix.txt")


def config(mix, tmp_path, **kw):
    spec = StreamSpec(mix=mix, seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(tmp_path / "work"))
    return LoaderAuditConfig(stream=spec, content=False, **kw)


def replay(index, cfg):
    """The whole window as arrays (stream step k, epoch, rank, ids), from one pass of single-step blocks."""
    plan = PlanReplay(index, cfg, block_steps=1)
    blocks = list(plan.blocks())
    k = np.concatenate([b.k for b in blocks])
    run = {"k": k, "epoch": 1 + k // plan.bpe, "rank": np.concatenate([b.rank for b in blocks])}
    run["ids"] = np.concatenate([b.ids for b in blocks])
    return {**run, **plan.stats}


def brute(index, run):
    """The old whole-window computation: np.unique over (epoch, instance) keys of every row."""
    N = index.num_instances
    key = (run["epoch"] - 1) * N + run["ids"]
    uniq, counts = np.unique(key, return_counts=True)
    distinct = {int(e): int(np.unique(run["ids"][run["epoch"] == e]).size) for e in np.unique(run["epoch"])}
    return {
        "over_rows": int((counts[counts > 1] - 1).sum()),
        "over_keys": uniq[counts > 1],
        "distinct": distinct,
        "observed": np.bincount(index.source_ids(run["ids"]), minlength=len(index.label_names)),
        "steps": int(np.unique(run["k"]).size),
    }


@pytest.mark.parametrize(
    "kw",
    [
        dict(epochs=3, process_count=2),
        dict(steps=41, resume_at=(9, 30), resume_process_count=4),
        dict(steps=50, process_count=8),
    ],
)
@pytest.mark.parametrize("block_steps", [1, 4, 1024])
def test_streamed_tally_equals_whole_window(mix, tmp_path, kw, block_steps):
    cfg = config(mix, tmp_path, **kw)
    index = stream_index(cfg.stream)
    run = replay(index, cfg)
    want = brute(index, run)
    plan = PlanReplay(index, cfg, block_steps=block_steps)
    tally = PlanTally(index, plan.bpe, examples=10**6)
    rows = []
    for block in plan.blocks():
        tally.add(block)
        rows.append(block)
    assert tally.over_rows == want["over_rows"]
    np.testing.assert_array_equal(tally.over_keys, want["over_keys"])
    assert tally.distinct == want["distinct"]
    np.testing.assert_array_equal(tally.observed, want["observed"])
    assert tally.steps() == want["steps"] and tally.rows == run["ids"].size
    # the rows themselves, in emission order, whatever the block size
    np.testing.assert_array_equal(np.concatenate([b.ids for b in rows]), run["ids"])
    np.testing.assert_array_equal(np.concatenate([b.rank for b in rows]), run["rank"])
    assert plan.stats["overlap_rows"] == run["overlap_rows"] == 0
    assert plan.stats["union_bad_steps"] == run["union_bad_steps"] == 0


def test_replayed_step_is_over_planned_with_every_emission(mix, tmp_path):
    """A resume that lands one step early (a state saved before step 9, read back before step 8) repeats
    step 8's G instances; the report lists the smallest keys, each with both emissions."""
    cfg = config(mix, tmp_path, steps=20, resume_at=(9,), examples=3)
    index = stream_index(cfg.stream)
    plan = PlanReplay(index, cfg, block_steps=2)
    real = plan._loaders
    state = {}

    def early(process_count):  # resume_position answers one step too early
        loaders = real(process_count)
        if state.get("armed"):
            for ld in loaders:
                orig = ld.resume_position
                ld.resume_position = lambda s, orig=orig: (orig(s)[0], orig(s)[1] - 1)
        state["armed"] = True
        return loaders

    plan._loaders = early
    tally = PlanTally(index, plan.bpe, examples=3)
    for block in plan.blocks():
        tally.add(block)
    assert tally.over_rows == G
    assert tally.over_keys.size == 3
    where = emitted_at(plan, tally.over_keys, index.num_instances)
    assert all([e["step"] for e in where[int(u)]] == [8, 8] for u in tally.over_keys)


def test_set_bits_matches_a_bool_array():
    rng = np.random.default_rng(0)
    bitmap, ref = np.zeros(125, np.uint8), np.zeros(1000, bool)
    for _ in range(200):
        u = np.unique(rng.integers(0, 1000, int(rng.integers(0, 80))))
        np.testing.assert_array_equal(_set_bits(bitmap, u), ref[u])
        ref[u] = True
    np.testing.assert_array_equal(np.unpackbits(bitmap, bitorder="little").astype(bool), ref)


def test_report_says_which_checks_ran_and_each_phase(mix, tmp_path):
    rep = audit_loader(config(mix, tmp_path, epochs=2))
    assert rep["ok"], rep["summary"]
    assert rep["checks_ran"]["content"] == "skipped (--no-content)"
    names = [p["phase"] for p in rep["performance"]["phases"]]
    assert names[:2] == ["index", "replay setup"]
    assert names[2:] == ["order epoch 1", "replay epoch 1", "order epoch 2", "replay epoch 2", "plan checks"]
    assert all(p["seconds"] >= 0 for p in rep["performance"]["phases"])
    assert rep["replay"]["full_epochs"] == [1, 2]
    assert any("order epoch 1" in line for line in rep["summary"])


@pytest.mark.parametrize("process_count,block_steps", [(1, None), (4, 3), (8, 1)])
def test_every_rank_of_every_step_is_the_loaders_own(mix, tmp_path, process_count, block_steps):
    """Each block's rows of rank r are what rank r's loader hands the trainer for that step."""
    cfg = config(mix, tmp_path, steps=30, process_count=process_count)
    index = stream_index(cfg.stream)
    plan = PlanReplay(index, cfg, block_steps=block_steps)
    loaders = plan._loaders(process_count)
    steps = set()
    for block in plan.blocks():
        for k in np.unique(block.k).tolist():
            steps.add(k)
            for r, ld in enumerate(loaders):
                got = block.ids[(block.k == k) & (block.rank == r)]
                np.testing.assert_array_equal(got, ld.instance_ids(1 + k // plan.bpe, k % plan.bpe))
    assert steps == set(range(30)) and plan.stats["rank_checked_steps"] == 30


def big_mix(tmp_path, instances: int, seq_len: int) -> str:
    """Sparse token files holding `instances` windows of `seq_len` tokens in all, over four labels."""
    lines, per = [], instances // 8
    for i in range(8):
        path = tmp_path / f"big{i}.npy"
        with open(path, "wb") as f:
            f.truncate(4 * seq_len * (per + (instances - 8 * per if i == 7 else 0)))
        lines.append(f"src{i % 4},{path.name}\n")
    (tmp_path / "big.txt").write_text("".join(lines))
    return str(tmp_path / "big.txt")


def test_a_rank_split_bug_at_one_late_step_is_caught(tmp_path, monkeypatch):
    """One step deep in a long epoch (no sampling could be counted on to land there) where rank 2 of 4 is
    handed rank 3's rows: the audit, asking every rank of every step, fails rank_overlap and rank_union at
    exactly that step, and the trainer's loader reads the same wrong rows (one path)."""
    from olmax.data.grain_source import BatchSource
    from olmax.data.loader import Loader

    Lb, Gb, P, bad = 4, 16, 4, 77_777
    spec = StreamSpec(
        mix=big_mix(tmp_path, 100_000 * Gb, Lb),
        seq_len=Lb,
        global_batch_size=Gb,
        seed=SEED,
        work_dir=str(tmp_path / "work"),
    )
    real = BatchSource.rows

    def swapped(self, epoch, start, stop):
        out = real(self, epoch, start, stop)
        if self.process_count == P and self.process_index == 2 and start <= bad < stop:
            theirs = BatchSource.__new__(BatchSource)
            theirs.__dict__.update(self.__dict__, process_index=3)
            out[bad - start] = real(theirs, epoch, bad, bad + 1)[0]
        return out

    monkeypatch.setattr(BatchSource, "rows", swapped)
    index = stream_index(spec)
    trainer = Loader(index, spec.replace(num_threads=0), process_index=2, process_count=P)
    other = Loader(index, spec.replace(num_threads=0), process_index=3, process_count=P)
    np.testing.assert_array_equal(trainer.batch(1, bad)["instance_ids"], other.instance_ids(1, bad))

    rep = audit_loader(LoaderAuditConfig(stream=spec, content=False, epochs=1, process_count=P))
    assert rep["replay"]["rank_checked_steps"] == rep["index"]["batches_per_epoch"] == 100_000
    assert rep["checks"]["rank_overlap"]["value"] == Gb // P
    assert rep["checks"]["rank_union"]["value"] == 1 and not rep["ok"]
    assert str(bad) in rep["checks"]["rank_union"]["detail"]


def test_a_thousand_ranks_are_each_asked(tmp_path):
    spec = StreamSpec(
        mix=big_mix(tmp_path, 64 * 2048, 4),
        seq_len=4,
        global_batch_size=2048,
        seed=SEED,
        work_dir=str(tmp_path / "work"),
    )
    rep = audit_loader(LoaderAuditConfig(stream=spec, content=False, epochs=1, process_count=1024))
    assert rep["ok"], rep["summary"]
    assert rep["replay"]["rank_checked_steps"] == 64 and rep["replay"]["rows"] == 64 * 2048
    assert "64 steps x 1024 ranks" in rep["checks_ran"]["plan_replay"]
