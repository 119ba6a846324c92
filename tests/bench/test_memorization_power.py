"""bench/studies/memorization_power.py: the power table's arithmetic (rates, smallest dose, AUROC across runs, the
any-check verdicts, the power predicted beside them), the streams (the reference's order kept, a dose's extra
servings in spare rows) and the exposure the checks are given, the design's power and the plan's seconds at
the chip's shape, and (slow) tiny runs where a 16x dose is flagged while the clean control, with its
planned-2x source, is not flagged by any check."""

from __future__ import annotations

import json

import numpy as np
import pytest


def load():
    from bench.studies import memorization_power

    return memorization_power


def fake_run(mp, dose: int, flagged: set[str], skipped: frozenset = frozenset(), stat: float = 0.0) -> dict:
    return {
        "dose": dose,
        "seconds": dict.fromkeys(mp.CHECKS, 0.5),
        "checks": {
            c: {
                "flagged": c in flagged,
                "status": "skipped" if c in skipped else ("flagged" if c in flagged else "ok"),
                "statistic": None if c in skipped else stat + (1.0 if c in flagged else 0.0),
                "message": "",
            }
            for c in mp.CHECKS
        },
    }


def test_table_rates_smallest_dose_and_auroc():
    mp = load()
    doses = [1, 2, 4, 8]
    runs = [fake_run(mp, 0, {"exposure"} if seed == 0 else set(), stat=0.1 * seed) for seed in range(5)]
    for seed in range(5):
        runs += [
            fake_run(mp, 1, set(), skipped=frozenset({"exposure", "extract"})),
            fake_run(mp, 2, {"contaminated"} if seed < 2 else set()),
            fake_run(mp, 4, {"contaminated", "exposure"} if seed < 4 else {"contaminated"}),
            fake_run(mp, 8, {"contaminated", "exposure"} if seed < 4 else {"contaminated"}),
        ]
    table = mp.power_table(runs, doses)
    assert table["exposure"]["false_positive_rate"] == pytest.approx(0.2)
    assert table["contaminated"]["by_dose"]["2"] == {"flagged": 2, "runs": 5, "skipped": 0, "auroc": 0.46}
    assert table["contaminated"]["smallest_detected_dose"] == 4  # 2/5 at 2x is below 80%
    assert table["exposure"]["smallest_detected_dose"] == 4  # 4/5 = 80% at 4x and 8x
    assert table["extract"]["smallest_detected_dose"] is None
    # clean statistics 0, .1, .2, .3, .4 (+1 for the flagged seed 0): the 4x contaminated runs (all 1.0)
    # beat all five -> 1.0; the 2x ones (1, 1, 0, 0, 0): 2 x 5 wins, 3 x (1 tie + 4 losses) = 11.5 / 25
    assert table["contaminated"]["by_dose"]["4"]["auroc"] == 1.0
    assert table["exposure"]["by_dose"]["1"]["auroc"] is None and table["exposure"]["seconds_per_run"] == 0.5
    text = mp.format_table(table, doses)
    assert "| exposure | 1/5 | skip | 0/5 (0.00) | 4/5 (0.72) | 4/5 (0.72) | 4x | 0.50 |" in text
    assert "| extract | 0/5 | skip | 0/5 (0.10) | 0/5 (0.10) | 0/5 (0.10) | no power by 8x | 0.50 |" in text


def test_any_check_verdicts():
    mp = load()
    runs = [
        fake_run(mp, 0, set()),
        fake_run(mp, 2, {"reference_ratio"}),
        fake_run(mp, 2, {"zlib", "exposure"}),
    ]
    table = mp.power_table(runs, [2])
    assert table["any_with_reference"]["by_dose"]["2"]["flagged"] == 2
    assert table["any_without_reference"]["by_dose"]["2"]["flagged"] == 1
    assert table["any_without_reference"]["by_dose"]["0"]["flagged"] == 0


def test_effect_is_paired_by_seed_and_windows_needed_come_from_the_calculator():
    mp = load()
    st = mp.Setting()  # 2x over-serves 128 windows, 4x 240, 8x 102

    def run(seed, dose, planned, dosed, sd=0.4, sd_net=0.05):
        effect = {
            "planned_ce": planned,
            "dosed_ce": {"128": dosed, "240": dosed, "102": dosed + 0.01},
            "sd_windows_nats": sd,
            "sd_net_of_reference_nats": sd_net,
        }
        return {"seed": seed, "dose": dose, "effect": effect}

    # seed 1's dosed windows are harder (+0.10 over its as-planned ones when served once): its 2x gain is
    # 0.04 over that, not -0.06
    runs = [run(0, 0, 2.0, 1.95), run(1, 0, 2.0, 2.10, sd=0.6, sd_net=0.07), run(0, 2, 2.0, 1.90)]
    runs += [run(1, 2, 2.0, 2.06), run(0, 4, 2.0, 1.95), run(1, 4, 2.0, 2.10), run(0, 8, 2.0, 1.90)]
    eff = mp.effect_table(runs, [2, 4, 8], st)
    assert eff["2"]["per_seed"] == pytest.approx([0.05, 0.04]) and eff["2"]["windows"] == 128
    assert eff["2"]["gain_nats"] == pytest.approx(0.045) and eff["8"]["windows"] == 102
    assert eff["8"]["per_seed"] == pytest.approx([0.05]) and eff["8"]["per_serving_nats"] == pytest.approx(
        0.05 / 7
    )
    assert eff["sd_windows_nats"] == pytest.approx(0.5) and eff["sd_net_of_reference_nats"] == pytest.approx(
        0.06
    )
    # 90% power under the membership checks' rule (z 3, AUROC 0.6), twice as many as planned
    from olmax.evals.power import Rule, power

    n = eff["2"]["windows_needed_with_reference"]
    rule = Rule("rank", 3.0, 0.6)
    assert power(0.045, 0.06, n, 2 * n, rule) >= 0.9 > power(0.045, 0.06, n - 1, 2 * (n - 1), rule)
    # without a reference a 0.045 gain over 0.5 nats of spread is an AUROC of 0.525: under the floor
    assert eff["2"]["windows_needed_without_reference"] is None
    assert eff["4"]["windows_needed_with_reference"] is None  # no gain: no sample reaches 90%
    assert "never (AUROC under 0.6)" in mp.format_effect(eff, [2, 4, 8])


def small_setting(mp, **over):
    values = dict(
        seq_len=16, batch=4, steps=40, compared=40, twice=4, unseen=6, replayed=8, replayed_2x=6, control=5
    )
    return mp.Setting(**{**values, **over})


def test_streams_keep_the_reference_order_and_the_exposure_says_what_was_served():
    mp = load()
    st = small_setting(mp)  # 160 rows: 40 compared, 2 x 4 planned-2x, 112 spare
    assert st.spare() == 112 and [st.dosed_windows(d) for d in (0, 2, 4, 16)] == [5, 6, 8, 7]
    pool = mp.text_windows(16, mp.pool_size(st))
    assert len({w.tobytes() for w in pool}) == len(pool) and pool.max() < 256
    lay = mp.layout(pool, st)
    sp = mp.split(st, seed=1)
    assert len(sp.dosed) == 8 and not set(sp.dosed) & set(sp.planned)
    assert sp.dosed.tolist() != mp.split(st, seed=2).dosed.tolist()  # each seed its own draw
    never = {w.tobytes() for w in lay.unseen}
    clean = mp.stream(lay, sp, st, 0, seed=1)
    assert (clean == mp.stream(lay, mp.split(st, 5), st, 0, seed=5)).all()  # one order for every clean run
    for dose in (0, 4, 16):
        rows = mp.stream(lay, sp, st, dose, seed=1)
        assert rows.shape == (160, 16)
        seen = [w.tobytes() for w in rows]
        w = st.dosed_windows(dose)
        over = lay.compared[sp.dosed[:w]] if dose else lay.compared[sp.dosed[:0]]
        assert all(seen.count(x.tobytes()) == dose for x in over)
        assert all(seen.count(x.tobytes()) == 1 for x in lay.compared[sp.planned])
        assert all(seen.count(x.tobytes()) == 2 for x in lay.twice)  # the planned-2x source, in every mix
        assert not never & set(seen)
        # every row that is not an extra serving stays where the reference has it
        moved = np.flatnonzero((rows != clean).any(axis=1))
        assert len(moved) == (dose - 1) * w if dose else len(moved) == 0
        spare = {x.tobytes() for x in lay.spare}
        assert all(clean[i].tobytes() in spare for i in moved)
        exp = mp.exposure_of(lay, sp, st, dose)
        truth = {}
        for x in seen:
            truth[x] = truth.get(x, 0) + 1
        assert (exp.count > 0).sum() == w + 4 + st.ratio * w
        for row, count, planned in zip(exp.tokens, exp.count, exp.planned):
            served = truth.get(row.astype(np.int32).tobytes(), 0)
            if dose or count != st.control_label:  # a clean run's control windows are labelled 16x
                assert count == served, (count, served)
            assert planned == (2 if any((row == t).all() for t in lay.twice) else min(served, 1))
        items = mp.items_of(lay, sp, st, dose)
        assert len(items) == w * (1 + st.ratio) and (items[:w] == exp.tokens[:w]).all()
    assert small_setting(mp, compared=20).problem([2]) is not None  # 8 dosed need 16 as planned
    assert small_setting(mp).problem([2, 4, 8]) is None


@pytest.mark.slow
def test_a_16x_dose_is_flagged_and_clean_is_not():
    mp = load()
    result = mp.run_power(mp.Setting(), seeds=[0], doses=[16], clean_seeds=[0], log=lambda *_: None)
    by = {r["dose"]: r["checks"] for r in result["runs"]}
    for check in ("contaminated", "reference_ratio"):  # both flag seed 0 at 16x in bench/results/mem.json
        assert by[16][check]["flagged"], by[16][check]["message"]
    assert not any(c["flagged"] for c in by[0].values()), {k: c["message"] for k, c in by[0].items()}
    assert result["table"]["reference_ratio"]["by_dose"]["16"]["auroc"] == 1.0  # one run each: 16x > clean
    assert result["effect"]["16"]["windows"] == 48 and result["effect"]["16"]["gain_nats"] > 0


# ------------------------------------------------------------------------------------------ the chip's shape
def small_tpu(mp):
    """The tpu preset's wiring (bf16 compute, MHA, OLMo 3's window, the budget and resume paths) at a size a
    CPU trains in well under a second a run."""
    values = {**mp.SHAPES["tpu"], **mp.SMOKE}
    values.update(
        steps=16,
        compared=24,
        unseen=4,
        replayed=6,
        replayed_2x=5,
        control=4,
        extract=4,
        checkpoints=2,
        keep=2,
        warmup=4,
        d_model=32,
        n_layers=4,
        n_heads=4,
        n_kv_heads=4,
        mlp_hidden=64,
    )
    return mp.Setting(**values)


def test_tpu_design_has_the_power_and_fits_one_call():
    """At the chip's shape, by the previous chip table's measurements: each verdict has >= 90% power at its
    dose (4x without a reference, 2x with one), and the table's 20 trainings and 19 runs' checks plan under
    the 550 s a call's budget leaves, from that table's measured seconds."""
    mp = load()
    st = mp.Setting(**mp.SHAPES["tpu"])
    assert st.model_config().dtype == "bfloat16" and st.model_config().n_kv_heads == 12
    assert st.problem([2, 4, 8]) is None
    assert [st.dosed_windows(d) for d in (0, 2, 4, 8)] == [128, 128, 240, 102]
    dz = mp.design(st, [2, 4, 8])
    assert dz["4x"]["noref"] >= 0.9 and dz["2x"]["ref"] >= 0.9 and dz["8x"]["noref"] >= 0.9
    # if a window's effect falls with the source's size as the tiny model's did, every dose loses power
    falls = mp.design(st, [2, 4, 8], fall=mp.MEASURED_TPU["fall_tiny"])
    assert mp.MEASURED_TPU["fall_tiny"] == pytest.approx(0.331, abs=1e-3)
    assert all(falls[f"{d}x"][k] <= dz[f"{d}x"][k] for d in (2, 4, 8) for k in ("noref", "ref"))
    assert falls["4x"]["noref"] < dz["4x"]["noref"]
    # check 9's 4x z of 2.05 at 64 vs 128 windows is an AUROC of 0.591: 0.325 sd, 0.108 a serving
    assert dz["diff_d_per_serving"] == pytest.approx(0.1085, abs=5e-4)
    # the clean runs' false alarms: check 6's 2.5% a run dominates; the rank checks' floor sits above z 3
    assert dz["clean"]["alpha_contaminated"] == pytest.approx(0.025, abs=1e-4)
    assert dz["clean"]["alpha_noref"] < 0.03 and dz["clean"]["none_flagged_noref"] > 0.7
    todo = mp.schedule([0, 1, 2], [2, 4, 8], list(range(10)))
    p = mp.plan(st, todo, {0, 1, 2}, True)
    assert p["runs"] == 19
    m = mp.MEASURED_TPU
    # 20 trainings of 1,600 rows at the measured 9.0 ms a row, the compile once
    assert p["train_s"] + p["reference_s"] > 20 * 1600 * m["train_s_per_row"]
    assert 450 < p["total_s"] < 520


def test_default_setting_builds_tiny():
    mp = load()
    from olmax.model import tiny

    assert mp.Setting().model_config() == tiny(max_position_embeddings=256)


def test_schedule_skips_done_runs_and_seeds():
    mp = load()
    assert mp.schedule([0, 1], [2, 4], [0, 1, 2]) == [(0, [0, 2, 4]), (1, [0, 2, 4]), (2, [0])]
    done = [(0, 0), (0, 2), (0, 4), (1, 0)]
    assert mp.schedule([0, 1], [2, 4], [0, 1, 2], done) == [(1, [2, 4]), (2, [0])]


def fake_level(mp, dose, flagged, stat):
    checks = {c: {"flagged": False, "status": "ok", "statistic": 0.0} for c in mp.CHECKS}
    checks[mp.RUN_LEVEL] = {"flagged": flagged, "status": "flagged" if flagged else "ok", "statistic": stat}
    return {"seed": 0, "dose": dose, "checks": checks, "seconds": {}}


def test_run_level_is_check_3_on_train_and_heldout_loss():
    mp = load()
    st = mp.Setting(steps=40)
    ref = mp.Reference(None, np.full(40, 2.0), heldout_ce=2.5, compared_ce=np.zeros(0))
    # train loss 0.2 below the reference's, held-out 0.01 below: the gain is not shared -> flagged
    v = mp.run_level(np.full(40, 1.8), 2.49, ref, st)
    assert v["flagged"] and v["train_gain"] == pytest.approx(0.2) and v["statistic"] == pytest.approx(0.19)
    # held-out follows (0.15 of 0.2: share 0.75 >= 0.5) -> not flagged
    assert not mp.run_level(np.full(40, 1.8), 2.35, ref, st)["flagged"]
    # a train-loss gain under reference_gain_nats (0.05) is noise, whatever held-out does
    assert not mp.run_level(np.full(40, 1.97), 2.6, ref, st)["flagged"]
    # only the last train_window (20) steps count: an early gain that closed by the end is not one
    early = np.concatenate([np.full(20, 1.0), np.full(20, 2.0)])
    assert mp.run_level(early, 2.5, ref, st)["train_gain"] == pytest.approx(0.0)
    # tabulated beside the window checks and summarised as rates, outside the any-check verdicts
    runs = [fake_level(mp, 0, s == 0, 0.1 * s) for s in range(4)]
    runs += [fake_level(mp, 2, True, 1.0), fake_level(mp, 4, True, 1.0), fake_level(mp, 4, False, 0.05)]
    table = mp.power_table(runs, [2, 4])
    assert table[mp.RUN_LEVEL]["by_dose"]["4"]["flagged"] == 1
    assert table["any_with_reference"]["by_dose"]["4"]["flagged"] == 0
    result = {
        "table": table,
        "doses": [2, 4],
        "effect": mp.effect_table([], [2, 4], st),
        "runs": runs,
        "left": [],
    }
    s = mp.summary(result)
    assert s["run_level"]["clean"] == [1, 4] and s["run_level"]["4x"] == [1, 2]
    assert s["run_level"]["rate_dosed"] == pytest.approx(2 / 3)
    assert s["run_level"]["false_alarm_rate"] == pytest.approx(0.25)
    assert s["clean_noref"] == [0, 4] and s["4x_ref"] == [0, 2] and s["effect"]["2x"] is None


def test_tpu_preset_runs_stops_on_its_budget_and_resumes(tmp_path):
    mp = load()
    st = small_tpu(mp)
    assert st.dtype == "bfloat16" and st.window == 4096
    ticks = iter(range(10**6))

    def clock():  # 30 s a reading: where the budget stops is deterministic
        return 30.0 * next(ticks)

    kw = dict(seeds=[0], doses=[4], clean_seeds=[0], log=lambda *_: None, clock=clock)
    saved = []
    first = mp.run_power(st, **kw, budget_s=90, on_run=saved.append, stamp={"device": "cpu", "shape": "tpu"})
    # the plan's compile (73 s) and the reference come before the first run: past 90 s at the first reading
    assert first["stopped"] and first["left"] and "and the reference run" in first["stopped"]
    assert first["runs"] == [] and not saved
    ticks = iter(range(10**6))
    # the reference and the clean run fit (30 + 73 s); that run reads 30 s of training and 30 of checks,
    # which the next run is then expected to take too: at 330 s it would end past 360
    part = mp.run_power(st, **kw, budget_s=360, on_run=saved.append, stamp={"device": "cpu", "shape": "tpu"})
    got = [(r["seed"], r["dose"]) for r in part["runs"]]
    assert part["stopped"] and got == [(0, 0)] and part["left"] == [[0, 4]]
    assert saved[-1]["runs"] == part["runs"] and all(r["stamp"]["shape"] == "tpu" for r in part["runs"])
    path = mp.write_record(part, ["bench/studies/memorization_power.py"], True, tmp_path, "mem_tpu")
    rec = json.loads(path.read_text())
    assert rec["summary"]["clean_noref"][1] == 1 and rec["summary"]["complete"] is False
    assert {
        "clean_noref",
        "4x_noref",
        "clean_ref",
        "4x_ref",
        "run_level",
        "effect",
        "design",
        "device",
    } <= set(rec["summary"])
    done, calls = mp.read_runs(path, st)
    assert len(done) == len(got) and len(calls) == 1
    with pytest.raises(SystemExit, match="setting differs"):
        mp.read_runs(path, mp.Setting())
    rest = mp.run_power(st, seeds=[0], doses=[4], clean_seeds=[0], log=lambda *_: None, done=done)
    assert [(r["seed"], r["dose"]) for r in rest["runs"]] == [(0, 0), (0, 4)]
    assert rest["new_runs"] == 1 and not rest["left"] and rest["stopped"] is None
    assert rest["table"]["any_with_reference"]["by_dose"]["0"]["runs"] == 1
    assert rest["table"][mp.RUN_LEVEL]["by_dose"]["4"]["runs"] == 1
    final = json.loads(mp.write_record(rest, ["x"], True, tmp_path, "mem_tpu", calls).read_text())
    assert final["summary"]["complete"] and final["summary"]["clean_ref"][1] == 1
    assert final["summary"]["effect"]["4x"]["per_serving_nats"] == pytest.approx(
        final["summary"]["effect"]["4x"]["gain_nats"] / 3
    )
    assert len(final["notes"]["calls"]) == 2 and len(final["notes"]["runs"]) == 2
