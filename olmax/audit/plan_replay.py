"""The loader audit's plan replay in bounded memory: the audited window's rows, streamed in blocks of steps.

`PlanReplay.blocks()` yields the rows of the audited window (stream step k, rank, instance id) in emission
order, one `Block` at a time: a block is one rank-checked step (every rank's loader asked, its rows
checked against the global batch) or a run of up to `block_steps` unchecked steps of one epoch, read as
one slice of the epoch's order (global batch s is positions [sG, (s+1)G) of the order, rank = position
mod P: the loader's contract). `PlanTally` folds the blocks into the plan checks' counts with a seen
bitmap per epoch (N bits) and a step bitmap per epoch (N / G bytes): nothing of the size of the window
is kept. Memory: about 20 bytes per row of one block, plus N / 8 bytes per audited epoch.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from olmax.audit.config import LoaderAuditConfig
from olmax.cli_fields import named
from olmax.data.loader import open_loader
from olmax.data.packing import PackedIndex
from olmax.data.state import LoaderState
from olmax.errors import OlmaxError


@dataclass(frozen=True)
class Block:
    """Rows of consecutive stream steps of one epoch, in emission order."""

    epoch: int
    k: np.ndarray  # int64: stream step of each row
    rank: np.ndarray  # int16
    ids: np.ndarray  # int64: global instance id


class PlanReplay:
    """The audited window of `config` (a LoaderAuditConfig) over `index`; see the module docstring."""

    def __init__(self, index, config, *, block_steps: int = 1024):
        self.index, self.config, self.block_steps = index, config, max(1, block_steps)
        self.reference = self._loaders(1)[0]
        self.bpe = self.reference.batches_per_epoch
        cfg = config
        self.total = cfg.steps if cfg.steps is not None else (cfg.epochs or 1) * self.bpe
        if self.total <= 0:
            raise OlmaxError(
                f"nothing to audit: {named(LoaderAuditConfig, 'steps')} / "
                f"{named(LoaderAuditConfig, 'epochs')} give {self.total} steps"
            )
        n_check = max(1, cfg.rank_check_steps)
        checked = np.linspace(0, self.total - 1, min(self.total, n_check)).round().astype(int)
        self.checked_steps = sorted(set(checked.tolist()))
        self.stats: dict = {}

    def _loaders(self, process_count: int):
        """One loader per rank, reading synchronously (ids only, no token reads)."""
        spec = self.config.stream.replace(num_threads=0)
        return [
            open_loader(spec, self.index, process_index=p, process_count=process_count)
            for p in range(process_count)
        ]

    def _next_checked(self, k: int) -> int:
        i = bisect.bisect_right(self.checked_steps, k)
        return self.checked_steps[i] if i < len(self.checked_steps) else self.total

    def blocks(self, on_epoch: Callable[[int], None] | None = None) -> Iterator[Block]:
        """The window's rows, block by block; `stats` holds the rank/resume counts once exhausted.
        `on_epoch(e)` is called before the first row of epoch e is asked for (before its order is opened)."""

        cfg, bpe, G = self.config, self.bpe, self.config.stream.global_batch_size
        loaders = self._loaders(cfg.process_count)
        pending = sorted(set(cfg.resume_at))
        stats = dict(overlap_rows=0, union_bad_steps=0, rank_checked_steps=0, resumes=[])
        entered: set[int] = set()
        k = 0
        while k < self.total:
            check = k in self.checked_steps
            if pending and pending[0] == k:
                pending.pop(0)
                epoch, step = 1 + k // bpe, k % bpe
                state = LoaderState.from_dict(loaders[0].state_at(epoch, step).to_dict())
                loaders = self._loaders(cfg.resume_process_count or cfg.process_count)
                e2, s2 = loaders[0].resume_position(state)
                k2 = (e2 - 1) * bpe + s2
                stats["resumes"].append(
                    {"saved_before_step": k, "resumed_at_step": k2, "process_count": len(loaders)}
                )
                k, check = k2, True
            epoch, step = 1 + k // bpe, k % bpe
            if on_epoch is not None and epoch not in entered:
                entered.add(epoch)
                on_epoch(epoch)
            if check:
                stats["rank_checked_steps"] += 1
                global_ids = self.reference.instance_ids(epoch, step)
                rows = [ld.instance_ids(epoch, step) for ld in loaders]
                allrows = np.concatenate(rows)
                stats["overlap_rows"] += int(allrows.size - np.unique(allrows).size)
                if not np.array_equal(np.sort(allrows), np.sort(global_ids)):
                    stats["union_bad_steps"] += 1
                rank = np.concatenate([np.full(r.size, i, dtype=np.int16) for i, r in enumerate(rows)])
                yield Block(epoch, np.full(allrows.size, k, dtype=np.int64), rank, allrows.astype(np.int64))
                k += 1
                continue
            # A run of unchecked steps: up to the next checked step, resume point, epoch end or block size.
            end = min(self._next_checked(k), (epoch * bpe), k + self.block_steps, self.total)
            if pending and pending[0] > k:
                end = min(end, pending[0])
            n = end - k
            order = self.reference.epoch_order(epoch)
            ids = order.take(step * G, (step + n) * G).astype(np.int64)
            rank = (np.arange(ids.size) % len(loaders)).astype(np.int16)
            yield Block(epoch, np.repeat(np.arange(k, end, dtype=np.int64), G), rank, ids)
            k = end
        self.stats = stats


def _set_bits(bitmap: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Set the bits of sorted distinct ids `u` in `bitmap`; returns the mask of those already set."""
    if not u.size:
        return np.zeros(0, bool)
    byte = u >> 3
    bit = np.uint8(1) << (u & 7).astype(np.uint8)
    # ids sharing a byte are adjacent (u is sorted): one read and one write per distinct byte
    first = np.r_[True, byte[1:] != byte[:-1]]
    starts = np.flatnonzero(first)
    where = byte[starts]
    old = bitmap[where]
    already = (old[np.cumsum(first) - 1] & bit) != 0
    bitmap[where] = old | np.bitwise_or.reduceat(bit, starts)
    return already


class PlanTally:
    """The plan checks' counts over a stream of blocks (see the module docstring)."""

    def __init__(self, index, bpe: int, examples: int):
        self.index, self.bpe, self.examples = index, bpe, examples
        self.N = index.num_instances
        self.seen: dict[int, np.ndarray] = {}  # epoch -> bitmap of instances emitted in it
        self.steps_seen: dict[int, np.ndarray] = {}  # epoch -> bool per step of it
        self.distinct: dict[int, int] = {}  # epoch -> distinct instances emitted in it
        self.over_rows = 0  # rows repeating an instance within its epoch
        self.over_keys = np.zeros(0, np.int64)  # the smallest (epoch-1)*N+id keys emitted twice, sorted
        self.rows = 0
        self.observed = np.zeros(len(index.label_names), np.int64)  # packed: tokens per source, else rows
        self._packed = isinstance(index, PackedIndex)

    def add(self, block: Block) -> None:
        e, ids = block.epoch, block.ids
        if e not in self.seen:
            self.seen[e] = np.zeros((self.N + 7) // 8, np.uint8)
            self.steps_seen[e] = np.zeros(self.bpe, bool)
            self.distinct[e] = 0
        self.steps_seen[e][block.k - (e - 1) * self.bpe] = True
        self.rows += ids.size
        s = np.sort(ids)
        dup = np.r_[False, s[1:] == s[:-1]] if s.size else np.zeros(0, bool)
        u = s[~dup]
        already = _set_bits(self.seen[e], u)
        self.distinct[e] += int(u.size - already.sum())
        self.over_rows += int(dup.sum() + already.sum())
        over = np.union1d(s[dup], u[already]) + (e - 1) * self.N
        if over.size and self.examples > 0:
            if self.over_keys.size < self.examples or over[0] < self.over_keys[-1]:
                self.over_keys = np.union1d(self.over_keys, over)[: self.examples]
        if self._packed:
            self.observed += np.asarray(list(self.index.tokens_by_label(ids).values()), np.int64)
        else:
            # sorted ids: the file lookup walks the offsets in order (cache-friendly), same counts
            self.observed += np.bincount(self.index.source_ids(s), minlength=self.observed.size)

    def steps(self) -> int:
        return int(sum(int(v.sum()) for v in self.steps_seen.values()))

    def full_epochs(self) -> list[int]:
        return [e for e in sorted(self.steps_seen) if bool(self.steps_seen[e].all())]


def emitted_at(replay: PlanReplay, keys: np.ndarray, num_instances: int) -> dict[int, list[dict]]:
    """{key: [{"step", "rank"}, ...] in emission order} for epoch keys (epoch-1)*N+id: a second pass over
    the window, made only when the plan repeats instances (to list where the first examples were emitted)."""
    out: dict[int, list[dict]] = {int(x): [] for x in keys.tolist()}
    for block in replay.blocks():
        key = block.ids + (block.epoch - 1) * num_instances
        for i in np.flatnonzero(np.isin(key, keys)).tolist():
            out[int(key[i])].append({"step": int(block.k[i]), "rank": int(block.rank[i])})
    return out


def materialize(blocks: list[Block], bpe: int) -> dict:
    """Kept blocks as whole-window arrays (k, epoch, rank, ids; 26 bytes per row), for the content checks and
    the exposure file, which need every row at once: small mixes only."""
    if not blocks:
        empty = np.zeros(0, np.int64)
        return {"k": empty, "epoch": empty, "rank": np.zeros(0, np.int16), "ids": empty}
    k = np.concatenate([b.k for b in blocks])
    return {
        "k": k,
        "epoch": 1 + k // bpe,
        "rank": np.concatenate([b.rank for b in blocks]),
        "ids": np.concatenate([b.ids for b in blocks]),
    }
