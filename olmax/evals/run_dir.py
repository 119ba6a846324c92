"""What `olmax eval memorization --run DIR` derives from a training run folder on its own.

A run folder written by `olmax train` holds `config.yaml` (the resolved experiment config),
`metrics.jsonl` and Orbax checkpoints under `checkpoints/<step>/{state,data,meta}`. From these:
  * `load_run_model(DIR)`: the params of the newest complete checkpoint as an olmax model on an eval mesh;
  * `replay_exposure(DIR, step)`: exposure counts by content, with the plan's. The loader's order is
    replayed (no training needed) for steps 1..step, every served window is hashed, and each distinct
    content gets one row: its count is how many served windows had its exact tokens, its planned count
    the most servings any one physical window holding it had (a path the mix lists twice is one physical
    window served twice by plan; a byte-identical copy under another name is another physical window, so
    its servings come on top of the plan). Counting by content, not by instance id, is what catches a
    shard copied into the mix: its windows are different instance ids with identical tokens (each file is
    cut into windows from its start). Unserved instances of every source are sampled as the unseen
    stratum, counted the same way (a copy of a served window is not unseen).
Replay reads every served window, so it suits small runs; for long runs write an exposure file from the
loader audit instead (`--exposure`, format in olmax/evals/exposure_file.py).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from olmax.data.loader import open_loader, resolve_mix
from olmax.errors import OlmaxError
from olmax.evals.exposure_file import Exposure, mix_repetition, physical_windows, read_instance_tokens
from olmax.train.config import load_run_config
from olmax.train.export import restore_run_model


def latest_step(run_dir: str | Path) -> int | None:
    """The newest complete checkpoint step under DIR/checkpoints (None when there is none): committed by
    Orbax and matching its seal, the trainer's own rule (nothing is moved; the trainer does that)."""
    from olmax.train.checkpoint import complete_steps

    steps = complete_steps(Path(run_dir) / "checkpoints")
    return steps[0] if steps else None


def load_run_model(run_dir: str | Path, step: int | None = None, dtype: str | None = None, mesh=None):
    """(model, step): checkpoint `step` (default: the newest) of a training run as an `EvalModel` on `mesh`
    (a Mesh, a --mesh spec, None for auto: olmax.evals.eval_mesh), its parameters restored straight into
    their shards, computing in `dtype` (default: the run's compute dtype)."""
    from jax.sharding import Mesh

    from olmax.evals.eval_mesh import eval_config, eval_mesh
    from olmax.evals.eval_model import as_eval_model

    cfg = eval_config(load_run_config(run_dir).model, dtype)
    mesh = mesh if isinstance(mesh, Mesh) else eval_mesh(mesh, cfg)
    rm = restore_run_model(run_dir, step, cfg.dtype, mesh=mesh)
    return as_eval_model(rm.model, mesh), rm.step


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
    tally = _ContentTally(index)
    tally.add(distinct, times)
    # the unseen stratum: unserved instances of every source, counted by content too
    rng = np.random.default_rng(seed)
    src_all = index.source_ids(np.arange(index.num_instances))
    unserved = np.setdiff1d(np.arange(index.num_instances), distinct)
    extra = [
        rng.choice(pool, size=min(unseen_per_source, pool.size), replace=False)
        for s in range(len(index.label_names))
        if (pool := unserved[src_all[unserved] == s]).size
    ]
    if extra:
        tally.add(np.sort(np.concatenate(extra)).astype(np.int64), None)
    ids, counts, planned, tokens = tally.rows()
    source = np.asarray(index.label_names)[index.source_ids(ids)]
    return Exposure(
        ids,
        counts,
        source,
        tokens,
        d.seq_len,
        d.mix,
        step,
        f"{run_dir} (replayed)",
        planned,
        mix_repetition(index),
    )


class _ContentTally:
    """One row per distinct window content: its servings (every instance holding it), its planned servings
    (the most any one physical window holding it was scheduled: a path listed twice is one physical window
    served twice by plan; a copy under another name is a second one, so its servings are beyond the plan),
    and the first instance id and tokens that hold it."""

    def __init__(self, index):
        self.index = index
        self.first: dict[bytes, int] = {}  # digest -> row
        self.ids: list[int] = []
        self.tokens: list[np.ndarray] = []
        self.served: list[int] = []
        self.by_window: list[dict[tuple[int, int], int]] = []  # per row: physical window -> servings

    def add(self, ids: np.ndarray, times: np.ndarray | None) -> None:
        """Instances `ids`, served `times` each (None: not served, listed for the unseen stratum)."""
        if not ids.size:
            return
        tokens = read_instance_tokens(self.index, ids)
        windows = physical_windows(self.index, ids).tolist()
        times = np.zeros(ids.size, np.int64) if times is None else times
        for i, row, window, t in zip(ids.tolist(), tokens, windows, times.tolist()):
            dg = _digest(row)
            r = self.first.get(dg)
            if r is None:
                r = self.first[dg] = len(self.ids)
                self.ids.append(i)
                self.tokens.append(row)
                self.served.append(0)
                self.by_window.append({})
            self.served[r] += t
            w = self.by_window[r]
            w[tuple(window)] = w.get(tuple(window), 0) + t

    def rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ids, servings, planned servings, tokens) in the order contents were first met."""
        n, seq = len(self.ids), self.index.seq_len
        return (
            np.asarray(self.ids, np.int64),
            np.asarray(self.served, np.int64),
            np.asarray([max(w.values(), default=0) for w in self.by_window], np.int64),
            np.stack(self.tokens).astype(np.int64) if n else np.zeros((0, seq), np.int64),
        )
