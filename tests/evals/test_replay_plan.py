"""Exposure replayed from a run's config (olmax/evals/run_dir.py) carries the plan: a path the mix lists
twice is served twice as planned, a byte-identical copy under another name is served beyond the plan, and
the per-source repetition says so. No training: the run folder holds only its config.yaml."""

import numpy as np

from olmax.evals.exposure_file import repetition_by_source
from olmax.evals.run_dir import replay_exposure
from olmax.train.config import dump_yaml, load_config

L, G = 8, 4


def test_planned_and_served_counts_by_physical_window(tmp_path):
    a = np.arange(32 * L, dtype=np.uint32)  # 32 distinct windows
    b = np.arange(10_000, 10_000 + 8 * L, dtype=np.uint32)  # 8 distinct windows
    (tmp_path / "a.npy").write_bytes(a.tobytes())
    (tmp_path / "b.npy").write_bytes(b.tobytes())
    (tmp_path / "c.npy").write_bytes(a[: 8 * L].tobytes())  # a copy of a's first 8 windows, another file
    mix = tmp_path / "mix.txt"
    mix.write_text(f"web,{tmp_path / 'a.npy'}\nprose,{tmp_path / 'b.npy'}\nprose,{tmp_path / 'b.npy'}\n")
    mix.write_text(mix.read_text() + f"web,{tmp_path / 'c.npy'}\n")
    run = tmp_path / "run"
    run.mkdir()
    overrides = [f"data.mix={mix}", f"data.seq_len={L}", f"data.global_batch_size={G}"]
    cfg = load_config("tiny", [*overrides, f"data.work_dir={tmp_path / 'work'}"])
    (run / "config.yaml").write_text(dump_yaml(cfg))
    steps = (32 + 8 + 8 + 8) // G  # one whole epoch: every instance served once
    exp = replay_exposure(run, steps, unseen_per_source=4)
    assert exp.tokens.shape == (40, L)  # one row per distinct content: a's 32 and b's 8 windows
    first = exp.tokens[:, 0]
    in_a, in_b = first < 32 * L, first >= 10_000
    copied = in_a & (first < 8 * L)
    assert (exp.count[copied] == 2).all() and (exp.planned[copied] == 1).all()  # a + its copy: beyond plan
    assert (exp.count[in_a & ~copied] == 1).all() and (exp.planned[in_a & ~copied] == 1).all()
    assert (exp.count[in_b] == 2).all() and (exp.planned[in_b] == 2).all()  # listed twice: as planned
    rep = repetition_by_source(exp)
    assert rep["prose"]["planned_repetition"] == rep["prose"]["served_repetition"] == 2.0
    assert rep["prose"]["mix_repetition"] == 2.0 and rep["prose"]["over_served"] == 0
    assert rep["web"]["mix_repetition"] == 1.0 and rep["web"]["over_served"] == 8
    assert rep["web"]["served_repetition"] == (8 * 2 + 24) / 32 and rep["web"]["planned_repetition"] == 1.0
    # half an epoch: a listed-twice window served once or twice is as planned either way (the plan is per
    # physical window), so no prose row is ever beyond its plan
    half = replay_exposure(run, steps // 2, unseen_per_source=4)
    prose = half.source == "prose"
    assert (half.count[prose] == half.planned[prose]).all() and set(half.count[prose].tolist()) >= {1, 2}
