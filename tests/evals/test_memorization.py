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


def test_cli_runs_model_checks_on_a_checkpoint(hf_checkpoint, tmp_path, capsys):
    """A random model has memorized nothing: checks 1 and 4 run on it and do not flag. Four windows served
    4x are too few for any comparing check to see a 4x dose, so the verdict is inconclusive, not clean, and
    each check says its power."""
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
        == 3
    )
    report = json.loads(out.read_text())
    checks = report["checks"]
    assert report["verdict"] == "inconclusive" and report["underpowered"] and not report["flagged"]
    assert checks["extract"]["status"] == "ok" and checks["min_k_pp"]["status"] == "ok"
    assert checks["train_vs_unseen"]["status"] == "ok" and checks["train_vs_unseen"]["gap_nats"] < 0
    assert checks["exposure"]["sources"]["web"]["over_served"]["windows"] == 4
    assert abs(checks["exposure"]["sources"]["web"]["excess_nats"]) < 0.2
    for name in ("exposure", "zlib"):  # the two comparing checks with a power model and no extra input
        assert checks[name]["status"] == "inconclusive" and not checks[name]["flagged"]
        assert checks[name]["power"]["value"] < 0.9 and checks[name]["power"]["dose"] == 4
        assert checks[name]["message"].startswith("inconclusive (power ")
        figures = checks[name]["sources"]["web"]["power"]
        assert figures["over_served"] == 4 and figures["as_planned"] == 4
    # the tiny random model is sized like the tiny measurement: its effect is the one assumed
    assert "bench/results/mem.json" in report["power_section"]["effect_source"]
    text = capsys.readouterr().out
    assert "memorization: INCONCLUSIVE (exit 3): power " in text and "at 4x: no check that compared" in text
    assert "    zlib, source web: smallest dose flagged with 90% power" in text


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


def random_windows(n_over: int, n_planned: int, length: int = 64, seed: int = 0) -> Exposure:
    """`n_over` random windows served 4x (no plan in the file: each taken as planned once) and `n_planned`
    served once."""
    rng = np.random.default_rng(seed)
    n = n_over + n_planned
    return Exposure(
        np.arange(n),
        np.r_[np.full(n_over, 4), np.ones(n_planned, np.int64)],
        np.asarray(["web"] * n),
        rng.integers(0, 990, (n, length)),
        length,
        None,
        None,
        "synthetic",
    )


def test_a_check_with_enough_windows_stays_clean_and_one_with_too_few_is_inconclusive(model):
    """The same random model, which memorized nothing, and the same effect per serving: with few over-served
    windows zlib cannot see a 4x dose and says inconclusive, and so does the verdict (exit 3); with the
    windows the calculator says it needs for 90% at 4x, the same check is ok and the verdict clean (exit 0)."""
    from olmax.evals.memorization import memorization_report
    from olmax.evals.power import Effect
    from olmax.evals.verdicts import Models, Probe

    effect = Effect(0.02, "a test's")

    def report(n_over):
        probe = Probe(per_stratum=2 * n_over, probe_len=64, batch_size=16)
        return memorization_report(
            None, exposure=random_windows(n_over, 2 * n_over), models=Models(model, probe, effect=effect)
        )

    few = report(4)
    zlib = few["checks"]["zlib"]
    assert zlib["status"] == "inconclusive" and zlib["power"]["value"] < 0.9
    assert few["verdict"] == "inconclusive" and few["exit_code"] == 3 and few["underpowered"]
    assert few["power"]["check"] in ("exposure", "zlib")  # the best of the checks that compared
    need = zlib["sources"]["web"]["power"]["windows_needed"]["4"]
    assert need is not None and need > 4
    enough = report(need + need // 4)  # a margin: the spread is measured again on other windows
    zlib = enough["checks"]["zlib"]
    assert zlib["status"] == "ok" and not zlib["flagged"] and zlib["power"]["value"] >= 0.9
    assert enough["verdict"] == "clean" and enough["exit_code"] == 0 and not enough["underpowered"]
    # check 1 cannot see 4x at any sample here: 3 servings x 0.02 nats is under its 0.1 nats floor
    exposure = enough["checks"]["exposure"]
    assert (
        exposure["status"] == "inconclusive"
        and exposure["sources"]["web"]["power"]["windows_needed"]["4"] is None
    )


def test_power_probe_says_what_each_source_could_show(hf_checkpoint, tmp_path, capsys):
    """`--power` on a run where nothing was served beyond the plan: the verdict rests on the counts (clean),
    and each source says the smallest dose each check could have seen and the windows it would need."""
    rng = np.random.default_rng(2)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 7.2}) + "\n" for s in range(1, 30))
    )
    np.savez(
        run / "exposure.npz",
        instance_id=np.arange(40),
        count=np.repeat([0, 1], [8, 32]),
        source=np.array(["web"] * 40),
        tokens=rng.integers(0, 990, (40, 64)),
    )
    out = tmp_path / "r.json"
    argv = ["--run", run, "--checkpoint", hf_checkpoint, "--per-stratum", "8", "--probe-len", "64"]
    assert memorization(*argv, "--power", "--power-effect", "0.05", "--out", out) == 0
    report = json.loads(out.read_text())
    assert report["verdict"] == "clean" and report["power"] is None  # nothing compared: no check rated
    sec = report["power_section"]
    assert sec["effect_nats"] == 0.05 and sec["effect_source"] == "given (--power-effect)"
    web = sec["sources"]["web"]
    assert web["windows"] == 32 and set(web["checks"]) == {"exposure", "zlib"}
    for f in web["checks"].values():
        assert (f["over_served"], f["as_planned"]) == (8, 8)
        assert f["smallest_dose"] is None or f["smallest_dose"] > 1
        assert set(f["windows_needed"]) == {"2", "4"}
    text = capsys.readouterr().out
    assert "had a source been served beyond its plan" in text
    assert "      zlib, source web (32 windows): smallest dose flagged with 90% power" in text
    assert memorization(*argv, "--power-effect", "0", "--out", out) == 2


def test_the_power_dose_is_a_threshold(model):
    """`power_dose` moves the bar the verdict reads: the check states its power at that dose too, and a dose
    it sees well enough makes the same comparison clean."""
    from olmax.evals.memorization import memorization_report
    from olmax.evals.power import Effect
    from olmax.evals.verdicts import Models, Probe, Thresholds

    def report(dose):
        return memorization_report(
            None,
            exposure=random_windows(8, 16),
            models=Models(
                model, Probe(per_stratum=16, probe_len=64, batch_size=16), effect=Effect(0.02, "a test's")
            ),
            thresholds=Thresholds(power_dose=dose),
        )

    at4, at64 = report(4), report(64)
    zlib4, zlib64 = at4["checks"]["zlib"], at64["checks"]["zlib"]
    assert zlib64["power"]["dose"] == 64 and "64" in zlib64["sources"]["web"]["power"]["power"]
    assert zlib64["power"]["value"] > zlib4["power"]["value"]
    assert at4["verdict"] == "inconclusive" and at64["verdict"] == "clean"
    best = at64["power"]["check"]
    assert at64["power"]["value"] >= 0.9 and at64["checks"][best]["status"] == "ok"
