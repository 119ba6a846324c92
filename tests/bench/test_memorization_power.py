"""bench/memorization_power.py: the power table's arithmetic, the dosed stream, and (slow) a tiny run where
a moderate dose (8x) is detected by the contaminated-vs-clean check while the clean control is not flagged."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load():
    spec = importlib.util.spec_from_file_location("bench_memorization_power", BENCH / "memorization_power.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def fake_run(mp, dose: int, flagged: set[str], skipped: frozenset = frozenset()) -> dict:
    return {
        "dose": dose,
        "checks": {
            c: {
                "flagged": c in flagged,
                "status": "skipped" if c in skipped else ("flagged" if c in flagged else "ok"),
                "message": "",
            }
            for c in mp.CHECKS
        },
    }


def test_table_rates_and_smallest_dose():
    mp = load()
    doses = [1, 2, 4, 8]
    runs = [fake_run(mp, 0, {"exposure"} if seed == 0 else set()) for seed in range(5)]
    for seed in range(5):
        runs += [
            fake_run(mp, 1, set(), skipped=frozenset({"exposure", "extract"})),
            fake_run(mp, 2, {"contaminated"} if seed < 2 else set()),
            fake_run(mp, 4, {"contaminated", "exposure"} if seed < 4 else {"contaminated"}),
            fake_run(mp, 8, {"contaminated", "exposure"} if seed < 4 else {"contaminated"}),
        ]
    table = mp.power_table(runs, doses)
    assert table["exposure"]["false_positive_rate"] == pytest.approx(0.2)
    assert table["contaminated"]["by_dose"]["2"] == {"flagged": 2, "runs": 5, "skipped": 0}
    assert table["contaminated"]["smallest_detected_dose"] == 4  # 2/5 at 2x is below 80%
    assert table["exposure"]["smallest_detected_dose"] == 4  # 4/5 = 80% at 4x and 8x
    assert table["extract"]["smallest_detected_dose"] is None
    text = mp.format_table(table, doses)
    assert "| exposure | 1/5 | skip | 0/5 | 4/5 | 4/5 | 4x |" in text
    assert "| extract | 0/5 | skip | 0/5 | 0/5 | 0/5 | not at 8x |" in text


def test_stream_serves_each_replayed_window_dose_times():
    mp = load()
    st = mp.Setting(seq_len=16, batch=4, steps=20, replayed=5, clean_items=6, per_stratum=7)
    pool = mp.text_windows(16, st.replayed + st.clean_items + st.per_stratum + st.steps * st.batch)
    assert len({w.tobytes() for w in pool}) == len(pool) and pool.max() < 256
    sp = mp.split(pool, st, seed=1)
    for dose in (0, 3):
        rows = mp.stream(sp, st, dose, seed=1)
        assert rows.shape == (80, 16)
        seen = [w.tobytes() for w in rows]
        assert all(seen.count(w.tobytes()) == dose for w in sp.replayed)
        assert not {w.tobytes() for w in np.concatenate([sp.clean, sp.unseen])} & set(seen)
        assert len(set(seen)) == 80 - (dose - 1) * 5 if dose else len(set(seen)) == 80


@pytest.mark.slow
def test_moderate_dose_is_detected_and_clean_is_not():
    mp = load()
    st = mp.Setting(batch=4, steps=320, replayed=24, clean_items=48, per_stratum=24, resamples=500)
    result = mp.run_power(st, seeds=[0], doses=[8], log=lambda *_: None)
    by = {r["dose"]: r["checks"] for r in result["runs"]}
    assert by[8]["contaminated"]["flagged"], by[8]["contaminated"]["message"]
    assert not any(c["flagged"] for c in by[0].values()), {k: c["message"] for k, c in by[0].items()}
    assert result["table"]["contaminated"]["smallest_detected_dose"] == 8
