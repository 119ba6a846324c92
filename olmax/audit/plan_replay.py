"""The loader audit's plan replay in bounded memory: every rank's rows of every step, streamed in blocks.

`PlanReplay.blocks()` yields the rows of the audited window (stream step k, rank, instance id) in emission
order, one `Block` of consecutive steps of one epoch at a time. Every rank's own loader is asked for its
rows of the block's steps through `Loader.rows` (the split the trainer's loader reads its batches with), for
every step of the window: nothing is re-derived from the loader's contract. Each step's rows, all ranks
together, are compared as a multiset with the step's global batch (positions [s*G, (s+1)*G) of the epoch's
order, OLMo-core's batch): `stats` counts rows held twice in a step and steps whose ranks' union is not
the global batch. `PlanTally` folds the blocks into the plan checks' counts with a seen bitmap per epoch
(N bits) and a step bitmap per epoch (N / G bytes): nothing of the size of the window is kept.
Memory: about 70 bytes per row of one block (`block_rows`, default 2^20 rows), plus N / 8 bytes per
audited epoch, whatever the process count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from olmax.audit.audit_config import LoaderAuditConfig
from olmax.cli_fields import named
from olmax.data.loader import open_loader
from olmax.data.packing import PackedIndex
from olmax.data.state import LoaderState
from olmax.errors import OlmaxError

BLOCK_ROWS = 1 << 20  # rows per block: ~70 MB of block arrays, ~0.1 s of work each at stage 1


@dataclass(frozen=True)
class Block:
    """Rows of consecutive stream steps of one epoch, in emission order (step, then rank, then row)."""

    epoch: int
    k: np.ndarray  # int64: stream step of each row
    rank: np.ndarray  # int16
    ids: np.ndarray  # int64: global instance id


class PlanReplay:
    """The audited window of `config` (a LoaderAuditConfig) over `index`; see the module docstring.
    `block_steps` (default: `BLOCK_ROWS` rows' worth) is how many steps each loader is asked for at once."""

    def __init__(self, index, config, *, block_steps: int | None = None):
        self.index, self.config = index, config
        G = config.stream.global_batch_size
        self.block_steps = max(1, block_steps if block_steps is not None else BLOCK_ROWS // max(1, G))
        self.reference = self._loaders(1)[0]
        self.bpe = self.reference.batches_per_epoch
        cfg = config
        self.total = cfg.steps if cfg.steps is not None else (cfg.epochs or 1) * self.bpe
        if self.total <= 0:
            raise OlmaxError(
                f"nothing to audit: {named(LoaderAuditConfig, 'steps')} / "
                f"{named(LoaderAuditConfig, 'epochs')} give {self.total} steps"
            )
        self.stats: dict = {}

    def _loaders(self, process_count: int):
        """One loader per rank, reading synchronously (ids only, no token reads)."""
        spec = self.config.stream.replace(num_threads=0)
        return [
            open_loader(spec, self.index, process_index=p, process_count=process_count)
            for p in range(process_count)
        ]

    def blocks(self, on_epoch: Callable[[int], None] | None = None) -> Iterator[Block]:
        """The window's rows, block by block; `stats` holds the rank/resume counts once exhausted.
        `on_epoch(e)` is called before the first row of epoch e is asked for (before its order is opened)."""

        cfg, bpe = self.config, self.bpe
        loaders = self._loaders(cfg.process_count)
        pending = sorted(set(cfg.resume_at))
        stats = dict(
            overlap_rows=0, union_bad_steps=0, rank_checked_steps=0, resumes=[], bad_step_examples=[]
        )
        entered: set[int] = set()
        k = 0
        while k < self.total:
            if pending and pending[0] == k:
                pending.pop(0)
                epoch, step = 1 + k // bpe, k % bpe
                state = LoaderState.from_dict(loaders[0].state_at(epoch, step).to_dict())
                loaders = self._loaders(cfg.resume_process_count or cfg.process_count)
                e2, s2 = loaders[0].resume_position(state)
                saved, k = k, (e2 - 1) * bpe + s2
                stats["resumes"].append(
                    {"saved_before_step": saved, "resumed_at_step": k, "process_count": len(loaders)}
                )
            epoch, step = 1 + k // bpe, k % bpe
            if on_epoch is not None and epoch not in entered:
                entered.add(epoch)
                on_epoch(epoch)
            # A run of steps: up to the next resume point, the epoch's end, the block size or the window's end.
            end = min(epoch * bpe, k + self.block_steps, self.total)
            if pending and pending[0] > k:
                end = min(end, pending[0])
            ids, rank = self._ask(loaders, epoch, step, step + (end - k), stats)
            stats["rank_checked_steps"] += end - k
            yield Block(
                epoch, np.repeat(np.arange(k, end, dtype=np.int64), ids.shape[1]), rank, ids.reshape(-1)
            )
            k = end
        self.stats = stats

    def _ask(self, loaders, epoch: int, start: int, stop: int, stats: dict) -> tuple[np.ndarray, np.ndarray]:
        """Every rank's rows of steps [start, stop) of `epoch`, checked against the global batches:
        (ids (steps, rows per step), each row's rank, flat)."""
        per_rank = [ld.rows(epoch, start, stop) for ld in loaders]  # each (steps, G/P), the loader's split
        ids = np.concatenate(per_rank, axis=1)  # (steps, G): a step's rows, rank by rank
        G = self.config.stream.global_batch_size
        n = stop - start
        want = self.reference.epoch_order(epoch).take(start * G, stop * G).astype(np.int64).reshape(n, G)
        got = np.sort(ids, axis=1)
        twice = got[:, 1:] == got[:, :-1]
        stats["overlap_rows"] += int(twice.sum())
        if got.shape == want.shape:
            bad = (got != np.sort(want, axis=1)).any(axis=1) | twice.any(axis=1)
        else:  # a rank handed out the wrong number of rows: no step of the block is the global batch
            bad = np.ones(n, bool)
        stats["union_bad_steps"] += int(bad.sum())
        room = self.config.examples - len(stats["bad_step_examples"])
        if room > 0 and bad.any():
            first = (epoch - 1) * self.bpe + start + np.flatnonzero(bad)[:room]
            stats["bad_step_examples"] += first.tolist()
        widths = [r.shape[1] for r in per_rank]
        rank = np.tile(np.repeat(np.arange(len(per_rank), dtype=np.int16), widths), n)
        return ids, rank


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
