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


def test_the_merge_turns_the_chips_parity_runs_into_per_step_bands_against_each_cpu_run(tmp_path):
    """A chip part holding only parity runs (the shape `parity_run` returns): each variant's |difference|
    and relative difference from each CPU trajectory per step, step 1's, the table and the plot's panel."""
    cpu = {"olmo_core_fp32": [10.0, 9.0, 8.0], "olmax_fp32": [10.0, 9.0, 8.004]}
    chip = {"bf16": [10.01, 8.991, 8.008], "fp32": [10.0, 9.0, 8.0]}
    parity = []
    for variant, loss in chip.items():
        against = {
            name: {
                "loss": ref,
                "abs_diff": [abs(a - b) for a, b in zip(loss, ref)],
                "rel_diff": [abs(a - b) / b for a, b in zip(loss, ref)],
            }
            for name, ref in cpu.items()
        }
        parity.append(
            {
                "variant": variant,
                "status": "ok",
                "kernel": "splash",
                "steps": 3,
                "loss": loss,
                "against": against,
            }
        )
    parity.append({"variant": "broken", "status": "error", "error": "ValueError: no"})
    part = {
        "part": "chip",
        "size": vars(tpu_train_curves.SMOKE),
        "corpus": {"eos": 0},
        "runs": [],
        "parity": parity,
    }
    (tmp_path / "chip.json").write_text(json.dumps(part))
    args = tpu_train_curves.parse_args(
        ["--smoke", "--merge", str(tmp_path / "chip.json"), "--results", str(tmp_path)]
    )
    rec = json.loads(tpu_train_curves.merge(args.merge, args).read_text())
    fig = rec["figures"]
    assert fig["bf16_vs_olmo_core_fp32_abs"]["values"] == pytest.approx([0.01, 0.009, 0.008])
    assert fig["bf16_vs_olmo_core_fp32_step1_rel"]["values"] == pytest.approx([0.1])  # percent
    assert fig["fp32_vs_olmo_core_fp32_abs"]["max"] == 0.0
    assert rec["summary"]["bf16_vs_olmax_fp32_max_rel"] == pytest.approx(0.009 / 9.0)
    rows = rec["notes"]["parity_bf16"]["per_step"]
    assert rows[2] == {"step": 3, "chip": 8.008, "olmo_core_fp32": 8.0, "olmax_fp32": 8.004}
    assert rec["notes"]["parity_broken"]["error"] == "ValueError: no"
    assert (tmp_path / "tpu_train_curves.png").stat().st_size > 10_000
