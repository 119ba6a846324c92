"""Exposure counts: how many times the run's loader served each training instance, with its tokens.

File format (written by the loader audit, or by hand), either
  .npz with arrays
      instance_id  int64 (N,)   global instance ids of the mix index at `seq_len` (olmax.data.index)
      count        int64 (N,)   times the loader served the instance up to the evaluated step (0 = unseen)
      source       str   (N,)   optional: the source label of each instance (else read from the mix)
      tokens       int   (N, L) optional: the instance tokens (else read from the mix's shards)
      seq_len      int   ()     optional when `tokens` is given
      mix          str   ()     optional: the mix file the ids index (a --mix argument overrides it)
      step         int   ()     optional: the step the counts run up to
      planned      int64 (N,)   optional: the servings the mix plans for the instance's content by `step`
                                (a path the mix lists k times is served up to k times an epoch by plan);
                                without it each window is taken as planned at most once
  or .json with the same keys, arrays as lists ({"format": "olmax-exposure/1", "instance_id": [...], ...}).

Instances may list only those seen (count >= 1): with a mix, `sample_unseen` adds never-served instances
of the same sources as the count-0 stratum.

The plan is the null of the memorization checks: a window is *over-served* when its count exceeds its
planned servings, *as planned* when they are equal (never-served where the plan says never is as planned).
`repetition_by_source` states, per source, the planned and the served repetition.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from olmax.data.loader import stream_index
from olmax.data.packing import PackedIndex
from olmax.data.reader import TokenReader
from olmax.data.stream import StreamSpec
from olmax.errors import OlmaxError

FORMAT = "olmax-exposure/1"


@dataclass
class Exposure:
    instance_id: np.ndarray  # int64 (N,)
    count: np.ndarray  # int64 (N,)
    source: np.ndarray | None  # str (N,)
    tokens: np.ndarray | None  # int64 (N, L)
    seq_len: int | None
    mix: str | None
    step: int | None
    path: str
    planned: np.ndarray | None = None  # int64 (N,): servings the plan schedules by `step`; None: unknown
    mix_repetition: dict[str, float] | None = None  # per source: times the mix lists each of its windows


def _scalar(v):
    if v is None:
        return None
    v = np.asarray(v)
    return v.item() if v.ndim == 0 else v


def read_exposure(path: str | Path) -> Exposure:
    """Read and validate an exposure file (.npz or .json)."""
    path = Path(path)
    if not path.is_file():
        raise OlmaxError(
            f"{path}: exposure file not found; write one from the loader audit (format in "
            "olmax/evals/exposure_file.py)"
        )
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            raw = {k: z[k] for k in z.files}
    elif path.suffix == ".json":
        try:
            raw = json.loads(path.read_text())
        except ValueError as e:
            raise OlmaxError(f"{path}: invalid JSON ({e})") from None
        if raw.get("format", FORMAT) != FORMAT:
            raise OlmaxError(f"{path}: format {raw.get('format')!r}, expected {FORMAT!r}")
    else:
        raise OlmaxError(f"{path}: exposure files are .npz or .json")
    missing = [k for k in ("instance_id", "count") if k not in raw]
    if missing:
        raise OlmaxError(f"{path}: missing {missing}; an exposure file needs instance_id and count arrays")
    ids = np.asarray(raw["instance_id"], np.int64).reshape(-1)
    count = np.asarray(raw["count"], np.int64).reshape(-1)
    if ids.shape != count.shape:
        raise OlmaxError(f"{path}: instance_id has {ids.size} entries but count has {count.size}")
    if count.size and count.min() < 0:
        raise OlmaxError(f"{path}: negative exposure count at row {int(np.argmin(count))}")
    source = np.asarray(raw["source"]).astype(str) if "source" in raw else None
    if source is not None and source.shape != ids.shape:
        raise OlmaxError(f"{path}: source has {source.size} entries for {ids.size} instances")
    tokens = np.asarray(raw["tokens"], np.int64) if "tokens" in raw else None
    seq_len = _scalar(raw.get("seq_len"))
    if tokens is not None:
        if tokens.ndim != 2 or tokens.shape[0] != ids.size:
            raise OlmaxError(f"{path}: tokens must have shape (N={ids.size}, L), got {tokens.shape}")
        seq_len = seq_len or tokens.shape[1]
    planned = np.asarray(raw["planned"], np.int64).reshape(-1) if "planned" in raw else None
    if planned is not None and planned.shape != ids.shape:
        raise OlmaxError(f"{path}: planned has {planned.size} entries for {ids.size} instances")
    if planned is not None and planned.size and planned.min() < 0:
        raise OlmaxError(f"{path}: negative planned count at row {int(np.argmin(planned))}")
    return Exposure(
        ids,
        count,
        source,
        tokens,
        None if seq_len is None else int(seq_len),
        None if raw.get("mix") is None else str(_scalar(raw["mix"])),
        None if raw.get("step") is None else int(_scalar(raw["step"])),
        str(path),
        planned,
    )


def attach_mix(
    exp: Exposure, stream: StreamSpec | None, unseen_per_source: int = 0, seed: int = 0
) -> Exposure:
    """Fill in sources and tokens from the mix the ids index (`stream`'s mix, base dir and {TOKENIZER},
    else the mix the exposure file names); optionally add unseen instances per source."""
    if exp.tokens is not None and exp.source is not None and not unseen_per_source:
        return exp
    if stream is None and exp.mix is not None:
        stream = StreamSpec(mix=exp.mix)
    if stream is None:
        if exp.tokens is None:
            raise OlmaxError(
                f"{exp.path}: has no tokens and names no mix; pass --mix MIX (the run's mix file)"
            )
        if exp.source is None:  # one undivided source
            exp = dataclasses.replace(exp, source=np.full(exp.count.shape, "all"), mix=None)
        return exp
    if exp.seq_len is None:
        raise OlmaxError(f"{exp.path}: has no seq_len; add it (the run's sequence length)")
    index = stream_index(stream, seq_len=exp.seq_len)
    ids, count, planned = exp.instance_id, exp.count, exp.planned
    if unseen_per_source:
        rng = np.random.default_rng(seed)
        listed = np.unique(ids)
        extra = []
        for s in np.unique(index.source_ids(ids)) if ids.size else []:
            pool = UnseenPool(index, int(s), listed)
            # choice(n) draws the same positions as choice(pool_array) would, without the array
            picks = rng.choice(pool.size, size=min(unseen_per_source, pool.size), replace=False)
            extra.append(pool.at(np.asarray(picks, np.int64)))
        if extra:
            new = np.concatenate(extra).astype(np.int64)
            ids, count = np.concatenate([ids, new]), np.concatenate([count, np.zeros(new.size, np.int64)])
            if planned is not None:
                planned = np.concatenate([planned, np.zeros(new.size, np.int64)])
    source = np.asarray(index.label_names)[index.source_ids(ids)]
    tokens = read_instance_tokens(index, ids)
    return Exposure(
        ids,
        count,
        source,
        tokens,
        exp.seq_len,
        stream.mix,
        exp.step,
        exp.path,
        planned,
        exp.mix_repetition if exp.mix_repetition is not None else mix_repetition(index),
    )


def planned_counts(exp: Exposure, repeat_min: int = 2) -> np.ndarray:
    """int64 (N,): each window's planned servings; without the exposure's own (an exposure file that has
    no `planned` array) every window is taken as planned up to repeat_min - 1 times (once by default)."""
    if exp.planned is not None:
        return exp.planned
    return np.minimum(exp.count, repeat_min - 1)


def repetition_by_source(exp: Exposure, repeat_min: int = 2) -> dict[str, dict]:
    """Per source: its planned and its served repetition over the windows listed (servings per window
    served at least once; the plan's the same over the windows it serves), the repetition the mix plans
    per epoch (how many times it lists each window, when known), and how many windows were served beyond,
    as or (never) below the plan."""
    if exp.source is None:
        return {}
    planned = planned_counts(exp, repeat_min)
    out = {}
    for src in sorted(set(exp.source.tolist())):
        of = exp.source == src
        c, p = exp.count[of], planned[of]
        out[src] = {
            "planned_repetition": float(p.sum() / max(1, int((p > 0).sum()))),
            "served_repetition": float(c.sum() / max(1, int((c > 0).sum()))),
            "mix_repetition": (exp.mix_repetition or {}).get(src),
            "windows": int(of.sum()),
            "over_served": int((c > p).sum()),
            "as_planned": int((c == p).sum()),
            "under_served": int((c < p).sum()),
            "never_served": int((c == 0).sum()),
            "plan": "the mix"
            if exp.planned is not None
            else f"assumed: each window at most {repeat_min - 1}x",
        }
    return out


def mix_repetition(index) -> dict[str, float] | None:
    """Per source label, how many times the mix lists each of its windows: instances over distinct physical
    windows (a path listed twice gives 2.0; a prefix listed once more gives the fraction). None for a
    packed index, whose instances are not windows of one file."""
    from olmax.audit.spans import physical_ids

    if isinstance(index, PackedIndex):
        return None
    phys = physical_ids(tuple(index.paths))
    counts = np.asarray(index.counts, np.int64)
    out = {}
    for k, name in enumerate(index.label_names):
        files = np.flatnonzero(index.file_label_ids == k)
        _, first = np.unique(phys[files], return_index=True)
        distinct = int(counts[files[first]].sum())
        out[name] = round(float(counts[files].sum()) / distinct, 6) if distinct else 0.0
    return out


def physical_windows(index, ids: np.ndarray) -> np.ndarray:
    """int64 (N, 2): (physical file, first token offset) of each instance: the instances a path listed k
    times adds share one row (the same window by plan); a copy under another name does not. A packed
    instance is its own window: (instance id, -1)."""
    from olmax.audit.spans import physical_ids

    if isinstance(index, PackedIndex):
        ids = np.asarray(ids, np.int64)
        return np.stack([ids, np.full(ids.size, -1, np.int64)], axis=1)
    phys = physical_ids(tuple(index.paths))
    files, starts = index.locate(np.asarray(ids, np.int64))
    return np.stack([phys[files], np.asarray(starts, np.int64)], axis=1)


class UnseenPool:
    """The sorted instance ids of source `source` that are not in `listed` (sorted, distinct), by rank,
    without materializing them: a source's instances are its files' contiguous id ranges, so the k-th is
    found by two binary searches (memory: the source's file table and `listed`, never N)."""

    def __init__(self, index, source: int, listed: np.ndarray):
        if isinstance(index, PackedIndex):  # packed instances mix files: list this source's rows directly
            ids = np.arange(index.num_instances)
            self._ids = np.setdiff1d(ids[index.source_ids(ids) == source], listed)
            self.size = int(self._ids.size)
            return
        self._ids = None
        files = np.flatnonzero(index.file_label_ids == source)
        counts = index.counts[files]
        self._first = index.offsets[files]  # first id of each of the source's files (increasing)
        self._ends = np.cumsum(counts)  # rank just past each file's instances, within the source
        mine = listed[index.source_ids(listed) == source] if listed.size else listed
        pos = self._rank_in_source(mine)  # ranks of the listed ids within the source (sorted)
        self._skip = pos - np.arange(pos.size)  # unseen ranks before each listed one
        self.size = int(self._ends[-1] if self._ends.size else 0) - int(mine.size)

    def _rank_in_source(self, ids: np.ndarray) -> np.ndarray:
        f = np.searchsorted(self._first, ids, side="right") - 1
        return np.r_[0, self._ends][f] + (ids - self._first[f])

    def at(self, ranks: np.ndarray) -> np.ndarray:
        """int64 ids of the pool's elements at `ranks` (0-based positions in the sorted pool)."""
        if self._ids is not None:
            return self._ids[ranks].astype(np.int64)
        q = ranks + np.searchsorted(self._skip, ranks, side="right")  # rank within the whole source
        f = np.searchsorted(self._ends, q, side="right")
        start = np.r_[0, self._ends][f]
        return (self._first[f] + (q - start)).astype(np.int64)


def read_instance_tokens(index, ids: np.ndarray) -> np.ndarray:
    """(N, L) int64 tokens of global instances `ids` of a TokenIndex (read by the loader's TokenReader)
    or a PackedIndex (its PAD-padded rows)."""
    ids = np.asarray(ids)
    if isinstance(index, PackedIndex):
        return index.read(ids.astype(np.int64))["input_ids"].astype(np.int64)
    files, starts = index.locate(ids)
    out = np.empty((ids.size, index.seq_len), np.dtype(index.dtype))
    reader = TokenReader(index)
    try:
        return reader.read(files, starts, out).astype(np.int64)
    finally:
        reader.close()
