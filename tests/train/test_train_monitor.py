"""The online replay monitor inside `olmax train`: counters in metrics.jsonl, a replayed resume caught."""

import json

import jax
import pytest

from olmax.audit.monitor import ReplayError
from olmax.data.loader import Loader
from olmax.train.config import load_config
from olmax.train.loop import train
from tests.train.train_testdata import metrics, write_config, write_mix

jax.config.update("jax_numpy_rank_promotion", "raise")


def test_monitor_counts_rows_and_is_checkpointed(tmp_path):
    config = write_config(tmp_path / "t.yaml", write_mix(tmp_path / "data"), steps=4, every=2)
    train(load_config(config, []), tmp_path / "run")
    recs = metrics(tmp_path / "run")
    assert [r["audit_rows"] for r in recs] == [8, 16, 24, 32] and all(r["audit_repeats"] == 0 for r in recs)
    meta = json.loads((tmp_path / "run" / "checkpoints" / "4" / "meta" / "metadata").read_text())
    assert meta["monitor"]["rows"] == 32 and meta["monitor"]["repeats"] == 0


def test_a_resume_that_replays_steps_is_caught_at_the_step_it_happens(tmp_path, monkeypatch):
    config = write_config(tmp_path / "t.yaml", write_mix(tmp_path / "data"), steps=6, every=3)
    run = tmp_path / "run"
    train(load_config(config, []), run)  # steps 1..6, checkpoints at 3 and 6 (one epoch is 7 steps)

    # inject the seed's bug: on resume the loader restarts 3 steps too early, replaying steps 4-6
    real = Loader.iterate

    def replaying(self, state=None):
        return real(self, self.state_at(1, 3) if state is not None else None)

    monkeypatch.setattr(Loader, "iterate", replaying)
    with pytest.raises(ReplayError) as err:
        train(load_config(config, ["train.steps=10"]), run)
    assert "data replay: step 7, host 0, row 0" in str(err.value)
    assert "first seen at step 4, host 0, row 0" in str(err.value)
    assert max(r["step"] for r in metrics(run)) == 6  # nothing was trained on the replayed rows

    # the same resume without the monitor trains on the replay silently: the danger it guards against
    train(load_config(config, ["train.steps=7", "train.monitor=false"]), run)
    assert max(r["step"] for r in metrics(run)) == 7
