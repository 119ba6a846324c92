"""Memorization flags: fire on synthetic runs whose train loss falls while held-out loss does not, stay
quiet on healthy ones; exposure-stratified loss and the extraction probe on a stub that memorized a chain."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from olmax.cli import main
from olmax.evals.curves import read_csv_curve, read_run
from olmax.evals.exposure_file import Exposure, attach_mix, read_exposure
from olmax.evals.memorization import (
    Thresholds,
    check_exposure,
    check_extraction,
    check_gap,
    check_reference,
)
from tests.evals.evals_synthetic import STEPS, base_loss, write_reference_csv, write_run


def test_gap_check_flags_memorization_and_not_a_healthy_run(tmp_path):
    th = Thresholds()
    healthy = check_gap(read_run(write_run(tmp_path / "ok", memorize=False)), th)
    bad = check_gap(read_run(write_run(tmp_path / "bad", memorize=True)), th)
    assert healthy["status"] == "ok" and not healthy["flagged"]
    assert bad["flagged"] and bad["sets"]["c4"]["flagged"]
    got = bad["sets"]["c4"]
    assert got["from_step"] == 400 and got["train_drop"] == pytest.approx(
        0.8 + base_loss(400) - base_loss(1000), abs=0.05
    )
    assert got["heldout_share"] < th.gap_heldout_share and "share" in got["message"]


def test_gap_check_skips_a_set_unlike_the_training_mix(tmp_path):
    """A held-out set whose loss sits far from the train loss and barely moves (QA text for a code
    model) is not evidence either way: check 2 skips it instead of flagging a healthy run."""
    run = tmp_path / "ood"
    run.mkdir()
    records = [{"step": s, "loss": float(base_loss(s))} for s in range(STEPS + 1)]
    records += [{"step": s, "eval/qa/ce": 9.0 - 0.0001 * s} for s in range(100, STEPS + 1, 100)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    got = check_gap(read_run(run), Thresholds())
    assert got["status"] == "skipped" and not got["flagged"]
    assert "unlike the training mix" in got["sets"]["qa"]["message"]


def test_reference_check(tmp_path):
    ref = read_csv_curve(write_reference_csv(tmp_path / "ref.csv"))
    th = Thresholds()
    ok = check_reference(read_run(write_run(tmp_path / "ok", memorize=False)), ref, th)
    bad = check_reference(read_run(write_run(tmp_path / "bad", memorize=True)), ref, th)
    assert ok["status"] == "ok" and abs(ok["train_gain"]) < 0.05
    assert bad["flagged"] and bad["train_gain"] == pytest.approx(0.8, abs=0.05)
    assert bad["sets"]["c4"]["heldout_share"] < 0.1
    # a run beating a reference that has no held-out curve is reported, not flagged
    (tmp_path / "train_only.csv").write_text(
        "step,loss\n" + "\n".join(f"{s},{base_loss(s):.5f}" for s in range(0, STEPS + 1, 50)) + "\n"
    )
    un = check_reference(read_run(tmp_path / "bad"), read_csv_curve(tmp_path / "train_only.csv"), th)
    assert un["status"] == "unattributed" and not un["flagged"]


def memorization(*argv) -> int:
    return main(["eval", "memorization", *map(str, argv)])


def test_cli_exit_codes_and_report(tmp_path, capsys):
    ref = write_reference_csv(tmp_path / "ref.csv")
    out = tmp_path / "r.json"
    # two checks can run (gap, reference): below min_checks_ran 3, a healthy run is inconclusive, not clean
    ok = write_run(tmp_path / "ok", False)
    assert memorization("--run", ok, "--reference", ref, "--out", out) == 3
    report = json.loads(out.read_text())
    assert report["verdict"] == "inconclusive" and report["exit_code"] == 3 and report["flagged"] is False
    assert report["ran"] == ["gap", "reference"] and report["checks"]["exposure"]["status"] == "skipped"
    assert memorization("--run", ok, "--reference", ref, "--threshold", "min_checks_ran=2", "--out", out) == 0
    assert json.loads(out.read_text())["verdict"] == "clean"
    bad = write_run(tmp_path / "bad", True)
    assert memorization("--run", bad, "--reference", ref, "--plot", tmp_path / "bad.png", "--out", out) == 1
    assert (tmp_path / "bad.png").read_bytes()[:4] == b"\x89PNG"
    report = json.loads(out.read_text())
    assert (
        report["flagged"] is True
        and report["verdict"] == "flagged"
        and report["checks"]["gap"]["flagged"]
        and report["checks"]["reference"]["flagged"]
    )
    assert (
        report["thresholds"]["reference_heldout_share"] == 0.5
        and report["thresholds"]["gap_heldout_share"] == 0.1
    )
    assert "FLAGGED by gap, reference" in capsys.readouterr().out
    # a threshold override makes the same run pass
    argv = ("--run", bad, "--threshold", "gap_heldout_share=-1", "--threshold", "min_checks_ran=1")
    assert memorization(*argv, "--out", out) == 0


def test_cli_says_inconclusive_when_most_checks_skip(tmp_path, capsys):
    """A run with metrics and held-out records only: the gap check runs, the other nine skip. That is no
    clean bill of health: the verdict is inconclusive, exit 3, and the summary says what each skipped check
    needs."""
    out = tmp_path / "r.json"
    assert memorization("--run", write_run(tmp_path / "run", False), "--out", out) == 3
    text = capsys.readouterr().out
    assert "memorization: INCONCLUSIVE (exit 3): 1 of 10 checks could run, at least 3 must" in text
    assert "not flagged" not in text and "  ran: gap\n" in text
    assert "    reference: no --reference given" in text
    assert "    exposure: needs a model (--checkpoint, or the run's checkpoints/) and exposure counts" in text
    report = json.loads(out.read_text())
    assert report["verdict"] == "inconclusive" and len(report["skipped"]) == 9


V = 64


def chain(start, n):
    """A deterministic walk x -> 5x + 3 (mod 32) over tokens 0..31: what the stub has memorized."""
    out = [start]
    for _ in range(n - 1):
        out.append((5 * out[-1] + 3) % 32)
    return out


def stub_model():
    """Logits peaked on the chain's next token for tokens 0..31, uniform for tokens 32..63."""
    table = np.zeros((V, V), np.float32)
    for t in range(32):
        table[t, (5 * t + 3) % 32] = 12.0
    table = jnp.asarray(table)
    return lambda ids: table[ids]


def synthetic_exposure(memorized: bool, n=12, length=80, seed=0, served=5, planned=None):
    """`n` windows served `served` times (the stub knows them when `memorized`), then `n` never-served and `n`
    once-served random windows; `planned`: the plan's servings of the first `n` (None: no plan in the file,
    each window taken as planned at most once; the others are as planned either way)."""
    rng = np.random.default_rng(seed)
    rows, counts = [], []
    for i in range(n):  # the served-`served`-times windows
        rows.append(chain(i % 32, length) if memorized else list(rng.integers(32, V, length)))
        counts.append(served)
    for c in (0, 1):  # unseen and once-seen
        for _ in range(n):
            rows.append(list(rng.integers(32, V, length)))
            counts.append(c)
    tokens = np.asarray(rows, np.int64)
    counts = np.asarray(counts)
    plan = None if planned is None else np.r_[np.full(n, planned), counts[n:]]
    return Exposure(
        np.arange(len(rows)),
        counts,
        np.asarray(["web"] * len(rows)),
        tokens,
        length,
        None,
        None,
        "synthetic",
        plan,
    )


def test_exposure_and_extraction_flag_a_memorizing_model():
    th = Thresholds()
    m = stub_model()
    exp = check_exposure(m, synthetic_exposure(True), th, probe_len=64, batch_size=8)
    assert exp["flagged"] and exp["flagged_sources"] == ["web"]
    web = exp["sources"]["web"]
    # no plan in the file: each window planned at most once, so the 5x windows are compared with once-seen
    assert web["as_planned"]["ce"] == pytest.approx(np.log(V), rel=1e-5)  # uniform over 64
    assert web["as_planned"]["mean_servings"] == 1.0 and web["as_planned"]["windows"] == 12
    assert web["over_served"]["ce"] < 0.01 and web["over_served"]["windows"] == 12
    assert "12 windows served 5.0x where the plan serves 1.0x vs" in web["compared"]
    assert web["detectable_nats"] == max(th.exposure_gap_nats, 3 * web["excess_stderr"])
    assert f"{web['detectable_nats']:.3f} nats at this sample" in exp["message"]
    fewer = check_exposure(m, synthetic_exposure(True), th, per_stratum=6, probe_len=64, batch_size=8)
    assert (
        "6 windows served 5.0x where the plan serves 1.0x (a sample of 12)"
        in (fewer["sources"]["web"]["compared"])
    )
    ext = check_extraction(m, synthetic_exposure(True), th, batch_size=8)
    assert ext["flagged"] and ext["over_served"]["exact_match_rate"] == 1.0
    assert ext["as_planned"]["exact_match_rate"] == 0.0


def test_planned_repetition_is_the_null():
    """Windows the stub knows perfectly, served twice: with a plan that serves them twice (a source the mix
    lists twice) no check compares or flags them; without the plan they are repetition and flag."""
    th = Thresholds()
    m = stub_model()
    planned = synthetic_exposure(True, served=2, planned=2)
    for verdict in (
        check_exposure(m, planned, th, probe_len=64),
        check_extraction(m, planned, th),
    ):
        assert verdict["status"] == "ok" and not verdict["flagged"], verdict["message"]
        assert verdict["compared"] == "nothing" and "beyond its plan" in verdict["message"]
    assert check_exposure(m, synthetic_exposure(True, served=2), th, probe_len=64)["flagged"]


def test_over_served_windows_are_compared_with_their_own_planned_count():
    """Windows planned 2x served 4x against windows planned 2x served 2x (never against once-served text):
    the stub knows only the over-served ones, and the check says which windows it compared."""
    th = Thresholds()
    m = stub_model()
    rng = np.random.default_rng(3)
    over = [chain(i % 32, 80) for i in range(12)]
    twice = [list(rng.integers(32, V, 80)) for _ in range(12)]
    once = [chain((i + 7) % 32, 80) for i in range(12)]  # known but served once: not the baseline
    tokens = np.asarray(over + twice + once, np.int64)
    exp = Exposure(
        np.arange(36),
        np.repeat([4, 2, 1], 12),
        np.asarray(["prose"] * 36),
        tokens,
        80,
        None,
        None,
        "synthetic",
        np.repeat([2, 2, 1], 12),
    )
    verdict = check_exposure(m, exp, th, probe_len=64)
    prose = verdict["sources"]["prose"]
    assert verdict["flagged"] and prose["as_planned"]["mean_servings"] == 2.0
    assert prose["as_planned"]["ce"] == pytest.approx(np.log(V), rel=1e-5)
    assert (
        "12 windows served 4.0x where the plan serves 2.0x vs 12 served as planned (2.0x)"
        in prose["compared"]
    )


def test_exposure_and_extraction_quiet_on_a_healthy_model():
    th = Thresholds()
    m = stub_model()
    exp = check_exposure(m, synthetic_exposure(False), th, probe_len=64)
    assert exp["status"] == "ok" and abs(exp["sources"]["web"]["excess_nats"]) < 1e-4
    ext = check_extraction(m, synthetic_exposure(False), th)
    assert ext["status"] == "ok" and ext["rate_difference"] == 0.0


def test_exposure_file_formats_and_mix_tokens(tmp_path):
    # two shards of a mix: instance i of seq_len 8 holds tokens 8i .. 8i+7 (offset per file)
    (tmp_path / "a.npy").write_bytes(np.arange(0, 64, dtype=np.uint32).tobytes())
    (tmp_path / "b.npy").write_bytes(np.arange(1000, 1032, dtype=np.uint32).tobytes())
    (tmp_path / "mix.txt").write_text("web,a.npy\ncode,b.npy\n")
    (tmp_path / "e.json").write_text(
        json.dumps(
            {
                "format": "olmax-exposure/1",
                "seq_len": 8,
                "mix": str(tmp_path / "mix.txt"),
                "instance_id": [1, 9],
                "count": [3, 1],
            }
        )
    )
    exp = attach_mix(read_exposure(tmp_path / "e.json"), None, unseen_per_source=2)
    assert exp.tokens[0].tolist() == list(range(8, 16))
    assert exp.tokens[1].tolist() == list(range(1008, 1016))
    assert exp.source[:2].tolist() == ["web", "code"]
    assert (exp.count[2:] == 0).all() and set(exp.source[2:]) == {"web", "code"}
    assert 1 not in exp.instance_id[2:] and 9 not in exp.instance_id[2:]
    np.savez(
        tmp_path / "e.npz",
        instance_id=np.array([0, 1]),
        count=np.array([1, 2]),
        tokens=np.zeros((2, 8), np.uint32),
    )
    z = read_exposure(tmp_path / "e.npz")
    assert z.seq_len == 8 and z.count.tolist() == [1, 2]
    (tmp_path / "bad.json").write_text(json.dumps({"instance_id": [1, 2], "count": [1]}))
    from olmax.errors import OlmaxError

    with pytest.raises(OlmaxError, match="count has 1"):
        read_exposure(tmp_path / "bad.json")


def test_cli_runs_model_checks_on_a_checkpoint(hf_checkpoint, tmp_path):
    """A random model has memorized nothing: checks 1 and 4 run on it and do not flag."""
    rng = np.random.default_rng(1)
    run = tmp_path / "run"
    run.mkdir()
    # a random model's CE on random ids is about ln(1000) = 6.9: log a train loss a bit above it
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 7.2}) + "\n" for s in range(1, 30))
    )
    np.savez(
        run / "exposure.npz",
        instance_id=np.arange(12),
        count=np.repeat([0, 1, 4], 4),
        source=np.array(["web"] * 12),
        tokens=rng.integers(0, 990, (12, 64)),
    )
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "eval",
                "memorization",
                "--run",
                str(run),
                "--checkpoint",
                str(hf_checkpoint),
                "--per-stratum",
                "4",
                "--probe-len",
                "32",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    checks = json.loads(out.read_text())["checks"]
    assert checks["exposure"]["status"] == "ok" and checks["extract"]["status"] == "ok"
    assert checks["train_vs_unseen"]["status"] == "ok" and checks["train_vs_unseen"]["gap_nats"] < 0
    assert checks["exposure"]["sources"]["web"]["over_served"]["windows"] == 4
    assert abs(checks["exposure"]["sources"]["web"]["excess_nats"]) < 0.2


def test_train_vs_unseen():
    """Train loss logged below the checkpoint's loss on never-served text flags; at or above it does not."""
    from olmax.evals.curves import Curves
    from olmax.evals.memorization import check_train_vs_unseen

    exp = synthetic_exposure(False)
    exp.step = 100
    steps = np.arange(1, 121, dtype=np.float64)

    def run(loss):
        return Curves("synthetic", steps, np.full(steps.shape, loss))

    th = Thresholds()
    healthy = check_train_vs_unseen(stub_model(), run(np.log(V) + 0.02), exp, th)
    assert healthy["status"] == "ok" and healthy["unseen_ce"] == pytest.approx(np.log(V), rel=1e-5)
    assert healthy["coverage"] == 1.0 and healthy["train_loss"] == pytest.approx(np.log(V) + 0.02)
    bad = check_train_vs_unseen(stub_model(), run(np.log(V) - 0.5), exp, th)
    assert bad["flagged"] and bad["gap_nats"] == pytest.approx(0.5, rel=1e-4)
    # only steps up to the exposure's step count: later (lower) losses are ignored
    later = Curves("synthetic", steps, np.where(steps <= 100, np.log(V), 0.0))
    assert check_train_vs_unseen(stub_model(), later, exp, th)["status"] == "ok"
