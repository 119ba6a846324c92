"""The online monitor in a simulated training loop over olmax's loader: a clean epoch (with planned
repetition) raises nothing; a resume that restores a stale loader state is caught at the step it
happens, by a monitor restored from the same checkpoint; the Bloom mode catches it too."""

from __future__ import annotations

import json

import numpy as np
import pytest

from olmax.audit.monitor import ReplayError, StreamMonitor
from olmax.data.index import open_index
from olmax.data.loader import Loader
from olmax.data.state import LoaderState
from olmax.data.stream import StreamSpec
from tests.audit.audit_testdata import write_mix

L, G = 64, 8


@pytest.fixture(scope="module")
def loader(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("monitor")
    s = corpus["shards"]
    mix = write_mix(
        root / "mix.txt", [("code", s["code-0"]), ("prose", s["prose-0"]), ("prose", s["prose-0"])]
    )  # planned 2x
    index = open_index(mix, L)
    cfg = StreamSpec(seq_len=L, global_batch_size=G, seed=11, work_dir=str(root / "w"), num_threads=0)
    return Loader(index, cfg, process_index=0, process_count=1)


def train(loader, monitor, start_state, first_step, last_step, checkpoints):
    """A stand-in training loop: feeds the monitor, checkpoints loader + monitor state each step."""
    it = loader.iterate(start_state)
    for step in range(first_step, last_step):
        batch = next(it)
        monitor.update(step, batch["input_ids"], instance_ids=batch["instance_ids"])
        checkpoints[step + 1] = {
            "loader": it.state.to_dict(),
            "monitor": json.loads(json.dumps(monitor.state_dict(), default=_js)),
        }
    it.close()


def _js(o):
    return o.tolist() if isinstance(o, np.ndarray) else int(o)


def test_clean_epoch_with_planned_repetition_has_no_alert(loader):
    monitor = StreamMonitor(steps_per_epoch=loader.batches_per_epoch, index=loader.index)
    train(loader, monitor, None, 0, loader.batches_per_epoch, {})
    assert monitor.counters()["audit_repeats"] == 0
    assert monitor.rows == loader.batches_per_epoch * G
    # without the index, the planned copies of the prose shard look like replays
    naive = StreamMonitor(steps_per_epoch=loader.batches_per_epoch, on_repeat="log")
    train(loader, naive, None, 0, loader.batches_per_epoch, {})
    assert naive.repeats > 0


@pytest.mark.parametrize("bloom_bits", [None, 1 << 16])
def test_stale_resume_is_caught_at_its_step(loader, bloom_bits):
    ckpt = {}
    monitor = StreamMonitor(
        steps_per_epoch=loader.batches_per_epoch, index=loader.index, bloom_bits=bloom_bits
    )
    train(loader, monitor, None, 0, 6, ckpt)
    # Resume at step 6 with the monitor state of step 6 but a loader state saved at step 4 (the bug).
    restored = StreamMonitor(
        steps_per_epoch=loader.batches_per_epoch, index=loader.index, bloom_bits=bloom_bits
    )
    restored.load_state_dict(ckpt[6]["monitor"])
    with pytest.raises(ReplayError) as e:
        train(loader, restored, LoaderState.from_dict(ckpt[4]["loader"]), 6, 10, ckpt)
    alert = e.value.alert
    assert alert.step == 6
    if bloom_bits is None:
        assert alert.first_step == 4 and alert.first_instance == alert.instance
        assert "step 6" in str(e.value) and "first seen at step 4" in str(e.value)
    # the right resume passes
    again = StreamMonitor(steps_per_epoch=loader.batches_per_epoch, index=loader.index, bloom_bits=bloom_bits)
    again.load_state_dict(ckpt[6]["monitor"])
    train(loader, again, LoaderState.from_dict(ckpt[6]["loader"]), 6, 10, {})
    assert again.repeats == 0 and again.rows == 10 * G
