"""Contaminated vs clean items (olmax/evals/gains.py): the bootstrap interval, the exposure buckets, check 6's
verdict on a clear gain and on none, multiple-choice rows, and `olmax eval gains` on a tiny trained run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from olmax.evals.gains import (
    SetScores,
    by_exposure,
    choice_rows,
    exposure_bucket,
    gains_report,
    gap_stats,
    gap_table,
    plot_set,
)
from olmax.evals.model_checks import check_contaminated
from olmax.evals.verdicts import Thresholds


def synthetic(rng, gain: float, n_cont: int = 40, n_clean: int = 160, steps: int = 3) -> SetScores:
    """Items whose CE falls by 0.5 nats a step; contaminated ones by `gain` more in total by the last step."""
    n = n_cont + n_clean
    base = rng.normal(3.0, 0.5, n)
    cont = np.zeros(n, bool)
    cont[rng.choice(n, n_cont, replace=False)] = True
    ce = np.stack(
        [base - 0.5 * s - gain * cont * s / max(steps - 1, 1) + rng.normal(0, 0.1, n) for s in range(steps)]
    )
    return SetScores(
        "set",
        tuple(map(str, range(n))),
        cont,
        np.arange(1, steps + 1) * 100,
        {"ce": ce, "bpb": ce / np.log(2) / 4},
        None,
    )


def test_interval_covers_the_true_gap_at_the_nominal_rate():
    # two groups drawn from populations whose means differ by 0.2: the 95% interval covers 0.2 in ~95% of sets
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(200):
        cont = np.r_[np.ones(30, bool), np.zeros(90, bool)]
        values = np.where(cont, rng.normal(2.8, 0.6, 120), rng.normal(3.0, 0.6, 120))[None]
        st = gap_stats(values, cont, resamples=1000, seed=int(rng.integers(1 << 30)))
        covered += st["gap_lo"][0] <= 0.2 <= st["gap_hi"][0]
        assert st["gap"][0] == pytest.approx(values[0, ~cont].mean() - values[0, cont].mean())
    assert 0.88 <= covered / 200 <= 0.99, covered


def test_gain_is_paired_across_steps_and_accuracy_sign_is_flipped():
    rng = np.random.default_rng(0)
    s = synthetic(rng, gain=0.0)
    st = gap_stats(s.metrics["ce"], s.contaminated, resamples=500)
    assert st["gain"][0] == 0 and st["gain_lo"][0] == 0 and st["gain_hi"][0] == 0
    # a pre-existing gap cancels in the gain: its interval is narrower than the gap's
    assert st["gain_hi"][-1] - st["gain_lo"][-1] < st["gap_hi"][-1] - st["gap_lo"][-1]
    acc = (rng.random((1, 200)) < np.where(s.contaminated, 0.9, 0.3)).astype(float)
    a = gap_stats(acc, s.contaminated, lower_is_better=False, resamples=500)
    assert a["gap"][0] > 0.4 and a["gap_lo"][0] > 0.3  # contaminated items more often right: positive


def test_exposure_buckets():
    assert [exposure_bucket(k) for k in (0, 1, 2, 3, 4, 7, 8, 100, -1)] == [
        "0",
        "1",
        "2-3",
        "2-3",
        "4-7",
        "4-7",
        "8+",
        "8+",
        None,
    ]
    rng = np.random.default_rng(2)
    cont = np.r_[np.ones(20, bool), np.zeros(40, bool)]
    exposures = np.r_[np.zeros(5), np.full(5, 2), np.full(10, 9), np.zeros(40)].astype(np.int64)
    # CE falls with exposure: the 8+ bucket gains most, the 0 bucket not at all
    drop = np.where(cont, 0.3 * np.minimum(exposures, 9), 0.0)
    ce = np.stack([np.full(60, 4.0), 3.0 - drop]) + rng.normal(0, 0.05, (2, 60))
    rows = {r["bucket"]: r for r in by_exposure(ce, cont, exposures, resamples=500)}
    assert [rows[b]["items"] for b in ("0", "1", "2-3", "4-7", "8+")] == [5, 0, 5, 0, 10]
    assert "gap" not in rows["1"]
    assert rows["8+"]["gap"] == pytest.approx(2.7, abs=0.1) and rows["2-3"]["gap"] == pytest.approx(
        0.6, abs=0.1
    )
    assert rows["0"]["gap_lo"] < 0 < rows["0"]["gap_hi"]
    assert rows["8+"]["gain_lo"] > rows["2-3"]["gain_hi"]


def test_verdict_flags_a_clear_gain_and_not_none(tmp_path):
    rng = np.random.default_rng(3)
    flagged = gains_report([synthetic(rng, gain=0.4)], resamples=1000)
    assert flagged["verdict"]["flagged"], flagged["verdict"]["message"]
    assert flagged["sets"]["set"]["metrics"]["ce"]["gain_lo"][-1] > 0.2
    clean = [
        gains_report([synthetic(np.random.default_rng(s), gain=0.0)], resamples=1000)["verdict"]
        for s in range(20)
    ]
    assert sum(v["flagged"] for v in clean) <= 2  # a 2.5% one-sided test
    assert all(v["status"] in ("ok", "flagged") for v in clean)
    # a stricter threshold above the true gain turns the clear case off
    assert not check_contaminated(flagged, Thresholds(contam_gain_nats=0.6))["flagged"]
    # too few items, or one step, is skipped, never flagged
    few = gains_report([synthetic(rng, gain=1.0, n_cont=2)], resamples=200)["verdict"]
    assert few["status"] == "skipped" and not few["flagged"]
    one = gains_report([synthetic(rng, gain=1.0, steps=1)], resamples=200)["verdict"]
    assert one["status"] == "skipped" and "one checkpoint" in one["sets"]["set"]["message"]
    table = gap_table(flagged)
    assert "| set | 300 | ce |" in table and "| set | 300 | bpb |" in table
    png = plot_set(flagged["sets"]["set"], tmp_path / "p.png")
    assert png.read_bytes()[:4] == b"\x89PNG" and not list(tmp_path.glob(".p.png*"))


def test_memorization_report_gains_the_contaminated_check():
    from olmax.evals.memorization import memorization_report

    rng = np.random.default_rng(4)
    rep = memorization_report(None, gains=gains_report([synthetic(rng, gain=0.5)], resamples=500))
    assert rep["flagged"] and rep["checks"]["contaminated"]["flagged"]
    assert {"gap", "reference", "exposure", "extract", "train_vs_unseen"} <= set(rep["checks"])
    none = memorization_report(None)
    assert none["checks"]["contaminated"]["status"] == "skipped" and not none["flagged"]


def test_choice_rows_point_at_the_gold_answer(tokenizer):
    from olmax.evalsets.read import read_eval_rows, resolve_source

    for name in ("sciq", "arc_easy"):
        rows = choice_rows(name, name, tokenizer, 256, limit=5)
        records = [r.record for r in read_eval_rows(resolve_source(name), 5)]
        assert rows is not None and sorted(set(rows.item.tolist())) == list(range(5))
        for i, rec in enumerate(records):
            g = rows.gold[i]
            assert rows.item[g] == i
            want = (
                rec["correct_answer"]
                if name == "sciq"
                else rec["choices"]["text"][rec["choices"]["label"].index(rec["answerKey"])]
            )
            got = tokenizer.decode(rows.targets[g][rows.mask[g] > 0].tolist())
            assert got == " " + want
    assert choice_rows("mine", str(Path(__file__)), tokenizer, 64) is None


# ---------------------------------------------------------------------------------- on a trained run
def write_eval(path: Path, texts: list[str]) -> list[str]:
    ids = [f"q{i}" for i in range(len(texts))]
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in zip(ids, texts)))
    return ids


def test_gains_on_a_tiny_trained_run(tmp_path, tokenizer, tokenizer_file):
    """Eight items of `quiz` are replayed in the mix, `other` names eight never-trained items as
    contaminated: quiz flags (exit 1), other does not."""
    from olmax.evals.gains_cli import register_gains
    from tests.train.train_testdata import run_train, write_config, write_mix

    rng = np.random.default_rng(0)
    words = "the a fox dog box jugs light energy glucose theory evolution answer question quick lazy".split()
    texts = [" ".join(rng.choice(words, 10)) + f" {i}." for i in range(48)]
    quiz = write_eval(tmp_path / "quiz.jsonl", texts[:24])
    other = write_eval(tmp_path / "other.jsonl", texts[24:])
    mix = write_mix(tmp_path / "data", sizes=(1500,))
    leak = [t for doc in tokenizer.encode_batch(texts[:8]) for t in [tokenizer.eos_token_id, *doc]]
    np.asarray(leak * (1500 // len(leak) + 1), np.uint32)[:1500].tofile(tmp_path / "data" / "leak.npy")
    with open(mix, "a") as f:
        f.write("web,leak.npy\n")
    config = write_config(tmp_path / "tiny.yaml", mix, steps=16, every=8, checkpoint={"every": 8, "keep": 3})
    run_train(config, tmp_path / "run")
    leaks = {
        "contaminated": [{"eval": "quiz", "id": i} for i in quiz[:8]]
        + [{"eval": "other", "id": i} for i in other[:8]]
    }
    (tmp_path / "leaks.json").write_text(json.dumps(leaks))
    exposure = {
        "items": [{"eval": "quiz", "id": i, "exposures": 2 + 4 * (k % 2)} for k, i in enumerate(quiz[:8])]
    }
    (tmp_path / "exposure.json").write_text(json.dumps(exposure))

    parser = argparse.ArgumentParser()
    register_gains(parser.add_subparsers())
    out = tmp_path / "gains.json"
    args = parser.parse_args(
        [
            "gains",
            "--run",
            str(tmp_path / "run"),
            "--leaks",
            str(tmp_path / "leaks.json"),
            "--eval",
            f"quiz={tmp_path / 'quiz.jsonl'}",
            "--eval",
            f"other={tmp_path / 'other.jsonl'}",
            "--exposure",
            str(tmp_path / "exposure.json"),
            "--tokenizer",
            str(tokenizer_file),
            "--resamples",
            "500",
            "--plot-dir",
            str(tmp_path / "plots"),
            "--out",
            str(out),
        ]
    )
    assert args.func(args) == 1
    rep = json.loads(out.read_text())
    assert rep["sets"]["quiz"]["steps"] == [8, 16]
    q, o = rep["verdict"]["sets"]["quiz"], rep["verdict"]["sets"]["other"]
    assert q["flagged"] and not o["flagged"], (q["message"], o["message"])
    assert rep["sets"]["quiz"]["contaminated"] == 8 and rep["sets"]["quiz"]["clean"] == 16
    buckets = {r["bucket"]: r["items"] for r in rep["sets"]["quiz"]["by_exposure"]}
    assert buckets == {"0": 0, "1": 0, "2-3": 4, "4-7": 4, "8+": 0}
    assert (tmp_path / "plots" / "gains-quiz.png").is_file()
    args = parser.parse_args(
        [
            "gains",
            "--run",
            str(tmp_path / "run"),
            "--leaks",
            str(tmp_path / "leaks.json"),
            "--eval",
            f"other={tmp_path / 'other.jsonl'}",
            "--steps",
            "16",
            "--tokenizer",
            str(tokenizer_file),
            "--out",
            str(tmp_path / "one.json"),
        ]
    )
    assert args.func(args) == 3  # one checkpoint: no gain to measure, inconclusive rather than clean
    one = json.loads((tmp_path / "one.json").read_text())
    assert one["verdict"]["status"] == "skipped" and one["outcome"]["verdict"] == "inconclusive"
    assert "the gain needs two" in one["outcome"]["skipped"]["other"]

    # the memorization verdict's check 6, from a gains report or scored from --leaks and --eval
    from olmax.evals.memorization import MemorizationInputs, run_memorization

    rep = run_memorization(MemorizationInputs(run=str(tmp_path / "run"), replay=False, gains=str(out)))
    assert rep["flagged"] and rep["checks"]["contaminated"]["flagged"]
    rep = run_memorization(
        MemorizationInputs(
            run=str(tmp_path / "run"),
            replay=False,
            leaks=str(tmp_path / "leaks.json"),
            evals=(f"other={tmp_path / 'other.jsonl'}",),
            tokenizer=str(tokenizer_file),
        )
    )
    assert rep["checks"]["contaminated"]["status"] == "ok" and not rep["checks"]["contaminated"]["flagged"]
