"""What `olmax eval memorization --run DIR` derives from a training run folder on its own.

A run folder written by `olmax train` holds `config.yaml` (the resolved experiment config),
`metrics.jsonl` and Orbax checkpoints under `checkpoints/<step>/{state,data,meta}`. From these:
  * `load_run_model(DIR)`: the params of the newest complete checkpoint as an olmax model;
  * `replay_exposure(DIR, step)`: exposure counts by content. The loader's order is replayed (no
    training needed) for steps 1..step, every served window is hashed, and each instance's count is how
    many served windows had its exact tokens. Counting by content, not by instance id, is what catches a
    source re-listed in the mix: its copies are different instance ids with identical windows (each file
    is cut into windows from its start). Unserved instances of every source are sampled as the unseen
    stratum, counted the same way (a copy of a served window is not unseen).
Replay reads every served window, so it suits small runs; for long runs write an exposure file from the
loader audit instead (`--exposure`, format in olmax/evals/exposure_file.py).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np

from olmax.data.loader import open_loader, resolve_mix
from olmax.errors import OlmaxError
from olmax.evals.exposure_file import Exposure, read_instance_tokens
from olmax.train.config import load_run_config
from olmax.train.export import restore_run_model


def latest_step(run_dir: str | Path) -> int | None:
    """The newest complete checkpoint step under DIR/checkpoints (None when there is none): committed by
    Orbax and matching its seal, the trainer's own rule (nothing is moved; the trainer does that)."""
    from olmax.train.checkpoint import complete_steps

    steps = complete_steps(Path(run_dir) / "checkpoints")
    return steps[0] if steps else None


def load_run_model(run_dir: str | Path, step: int | None = None, dtype: str = "float32"):
    """(model, step): the params of checkpoint `step` (default: the newest) of a training run."""
    rm = restore_run_model(run_dir, step, dtype)
    return rm.model, rm.step


def _digest(row: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(row, np.uint32).tobytes(), digest_size=16).digest()


def replay_exposure(
    run_dir: str | Path,
    step: int,
    *,
    unseen_per_source: int = 64,
    seed: int = 0,
    max_instances: int = 2_000_000,
) -> Exposure:
    """Exposure by content for the first `step` global batches of the run (see the module docstring)."""
    run_dir = Path(run_dir)
    d = load_run_config(run_dir).data
    d = d.replace(mix=resolve_mix(d))  # resolved once: "demo" becomes the prepared mix file's path
    mix = d.mix
    loader = open_loader(d, process_index=0, process_count=1)
    index = loader.index
    if step * d.global_batch_size > max_instances:
        raise OlmaxError(
            f"replaying {step} steps x {d.global_batch_size} rows reads more than {max_instances:,} "
            "windows; pass --exposure with the loader audit's counts instead"
        )
    bpe = loader.batches_per_epoch
    served = (
        np.concatenate([loader.instance_ids((s - 1) // bpe + 1, (s - 1) % bpe) for s in range(1, step + 1)])
        if step
        else np.zeros(0, np.int64)
    )
    distinct, times = np.unique(served, return_counts=True)
    tokens = read_instance_tokens(index, distinct)
    by_content: Counter[bytes] = Counter()
    digests = [_digest(r) for r in tokens]
    for dg, t in zip(digests, times.tolist()):
        by_content[dg] += t
    # the unseen stratum: unserved instances of every source, counted by content too
    rng = np.random.default_rng(seed)
    src_all = index.source_ids(np.arange(index.num_instances))
    unserved = np.setdiff1d(np.arange(index.num_instances), distinct)
    extra = [
        rng.choice(pool, size=min(unseen_per_source, pool.size), replace=False)
        for s in range(len(index.label_names))
        if (pool := unserved[src_all[unserved] == s]).size
    ]
    extra_ids = np.sort(np.concatenate(extra)).astype(np.int64) if extra else np.zeros(0, np.int64)
    extra_tokens = read_instance_tokens(index, extra_ids)
    ids = np.concatenate([distinct, extra_ids])
    all_tokens = np.concatenate([tokens, extra_tokens])
    counts = np.asarray(
        [by_content[dg] for dg in digests] + [by_content.get(_digest(r), 0) for r in extra_tokens], np.int64
    )
    source = np.asarray(index.label_names)[index.source_ids(ids)]
    return Exposure(ids, counts, source, all_tokens, d.seq_len, mix, step, f"{run_dir} (replayed)")
