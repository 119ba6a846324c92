"""bench/chip/tpu_train_curves.py without a chip: its corpus's cut vocabulary spells text losslessly, the band
check reads the seeds' envelope, and the whole benchmark (prepare, the chip part on the CPU, merge) runs at
its smoke size into a record and a plot."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from bench.chip import tpu_train_corpus, tpu_train_curves
from bench.harness import ROOT


def test_the_cut_vocabulary_spells_every_token_by_kept_ones_and_decodes_to_the_same_text():
    from tokenizers import Tokenizer

    from olmax.assets import tokenizer_path

    path = tokenizer_path("dolma2", quiet=True)
    tok = Tokenizer.from_file(str(path))
    spec = json.loads(Path(path).read_text())
    text = (Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py").read_text() + "\nZürich naïve 東京 🙂\n"
    eos = tok.token_to_id("<|endoftext|>")
    ids = np.asarray([*tok.encode(text, add_special_tokens=False).ids, eos], np.uint32)
    counts = np.bincount(ids, minlength=len(spec["model"]["vocab"]) + len(spec["added_tokens"]))
    kept, spelling = tpu_train_corpus.cut_vocabulary(counts, spec, 300, eos)
    assert len(kept) == 300 and eos in kept and len(set(kept.tolist())) == 300
    new = tpu_train_corpus.respell(ids, spelling)
    assert new.max() < 300 and len(new) > len(ids)  # rarer tokens spelled by several kept ones
    assert tok.decode(kept[new].tolist(), skip_special_tokens=False) == tok.decode(
        ids.tolist(), skip_special_tokens=False
    )
    # the most frequent tokens keep their own rows, numbered by frequency
    assert kept[0] == int(np.argmax(counts))


def test_the_band_check_reads_the_seeds_envelope_after_warmup():
    size = {"warmup": 2}
    b0 = [5.0, 4.0, 3.0, 2.9, 2.8, 2.7]
    b1 = [x + 0.2 for x in b0]
    inside = [x + 0.1 for x in b0]
    runs = {"hd128_seed0": {"loss": b0}, "hd128_seed1": {"loss": b1}}
    band = tpu_train_curves.band_check({**runs, "hd256_seed0": {"loss": inside}}, size, 1)
    assert band["inside_fraction"] == 1.0 and band["from_step"] == 3
    assert band["seed_half_gap"] == pytest.approx([0.1] * 4)
    assert band["hd256_minus_mean"] == pytest.approx([0.0] * 4)
    above = [x + 0.1 if i < 4 else x + 0.5 for i, x in enumerate(b0)]
    band = tpu_train_curves.band_check({**runs, "hd256_seed0": {"loss": above}}, size, 1)
    assert band["inside_fraction"] == 0.5
    assert tpu_train_curves.band_check(runs, size, 1) is None  # no wide-head run: no band check
    assert tpu_train_curves.smooth([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]


@pytest.mark.slow
def test_the_smoke_trains_three_runs_on_real_text_and_merges_a_record_and_a_plot(tmp_path):
    data, results = tmp_path / "data", tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.chip.tpu_train_curves", "--smoke", "--data", str(data)]
        + ["--results", str(results)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rec = json.loads((results / "tpu_train_curves.json").read_text())
    assert rec["smoke"] is True and (results / "tpu_train_curves.png").stat().st_size > 10_000
    size = tpu_train_curves.SMOKE
    corpus = rec["notes"]["corpus"]
    assert corpus["train_tokens"] == corpus["distinct_train_tokens"] == size.rows * size.steps * size.seq
    runs = {r["name"]: r for r in rec["notes"]["runs"]}
    assert set(runs) == {"hd128_seed0", "hd256_seed0", "hd128_seed1"}
    assert all(r["status"] == "ok" and r["steps_done"] == size.steps for r in runs.values())
    assert (runs["hd256_seed0"]["n_heads"], runs["hd256_seed0"]["head_dim"]) == size.heads["hd256"]
    curves = rec["notes"]["curves"]
    for name, c in curves.items():
        assert len(c["loss"]) == size.steps and c["loss"][-1] < c["loss"][0] - 0.5, name  # it learns
        assert [e["step"] for e in c["evals"]] == list(
            range(size.eval_every, size.steps + 1, size.eval_every)
        )
    # the two seeds start from different weights on the same rows; one seed is the same run either way
    assert curves["hd128_seed0"]["loss"] != curves["hd128_seed1"]["loss"]
    for key in (
        "hd256_over_hd128_step",
        "hd256_inside_seed_band",
        "seed_gap_final_loss",
        "hd256_gap_heldout",
    ):
        assert key in rec["summary"], key
    assert rec["notes"]["band"]["steps"] == size.steps
    assert {f"step_s_{n}" for n in runs} <= set(rec["figures"])
