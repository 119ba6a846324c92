"""Online replay monitor: hash each batch's rows as training consumes them and alert on a repeat.

Contract. `StreamMonitor.update(step, rows, host=, instance_ids=)` hashes every row (xxh3-64 of its
uint32 bytes: ~6 us per 8192-token row, a few ms per 512-row global batch, far under 1% of a
training step) and checks it against the rows already seen in the same epoch (epoch = step //
steps_per_epoch; one epoch when that is not given). A repeat beyond the planned multiplicity raises
`ReplayError` (or, with on_repeat="log", is recorded and logged) naming the step, host, row and
instance of both occurrences. Planned repetition (a path the mix lists k times holds each of its
instances k times per epoch) is allowed when the monitor knows the index: pass `index` and the
loader's `instance_ids`. Two memories: exact (a dict per epoch; ~100 bytes per row, positions of the
first occurrence reported) or a Bloom filter (`bloom_bits`, fixed memory, false-positive rate
(1 - exp(-k n / m))^k reported; rows of planned-repeat instances are not checked in this mode).
`state_dict()`/`load_state_dict()` round-trip everything (save it with the checkpoint), so a resume
that replays steps is caught by the restored monitor. `counters()` is what the trainer logs.

Several hosts. `update_all_hosts(step, local_rows, instance_ids=)` is called by every JAX process at
every step: each hashes its own rows, the hashes (+ instance ids, process index: 20 bytes per row,
~10 KB for a 512-row global batch) are all-gathered, and every process's monitor checks the whole
global batch in host order. Every process then holds identical state and counters, so the state
process 0 saves restores every process (on any process count), a replay on any host raises on all of
them at the same step (no process is left waiting in a collective), and a content two hosts emit in
the same step is caught the step it happens (the later host's row is the repeat). `update(..., host=)`
checks one host's rows alone (a single-process loop, or a test).

Wiring into a training loop (what `olmax train` does, olmax/train/loop.py):
    monitor = StreamMonitor(steps_per_epoch=loader.batches_per_epoch, index=loader.index)
    monitor.load_state_json(meta["monitor"])               # on resume, on every process
    batch = next(it)
    monitor.update_all_hosts(step, batch["input_ids"],
                             instance_ids=batch["instance_ids"])  # raises ReplayError at the replay
    metrics.update(monitor.counters()); meta["monitor"] = monitor.state_json()
"""

from __future__ import annotations

import base64
import logging
import math
from dataclasses import asdict, dataclass

import numpy as np

from olmax.errors import OlmaxError
from olmax.hashing import row_hashes

log = logging.getLogger("olmax.audit.monitor")


@dataclass(frozen=True)
class RepeatAlert:
    step: int
    host: int
    row: int
    instance: int
    first_step: int  # -1 when unknown (Bloom mode)
    first_host: int
    first_row: int
    first_instance: int

    def __str__(self) -> str:
        first = (
            f"first seen at step {self.first_step}, host {self.first_host}, row {self.first_row} "
            f"(instance {self.first_instance})"
            if self.first_step >= 0
            else "probably seen before in this epoch (Bloom filter)"
        )
        return (
            f"data replay: step {self.step}, host {self.host}, row {self.row} (instance "
            f"{self.instance}) repeats content {first}"
        )


class ReplayError(OlmaxError):
    def __init__(self, alert: RepeatAlert):
        super().__init__(str(alert))
        self.alert = alert


class _Bloom:
    def __init__(self, bits: int, k: int):
        self.m = int(bits)
        self.k = int(k)
        self.bits = np.zeros((self.m + 7) // 8, dtype=np.uint8)
        self.n = 0

    def _idx(self, h: np.ndarray) -> np.ndarray:
        # Kirsch-Mitzenmacher: k indexes from two halves of the 64-bit hash
        h1 = (h & np.uint64(0xFFFFFFFF)).astype(np.uint64)
        h2 = (h >> np.uint64(32)) | np.uint64(1)
        i = np.arange(self.k, dtype=np.uint64)[None, :]
        return ((h1[:, None] + i * h2[:, None]) % np.uint64(self.m)).astype(np.int64)

    def add_and_test(self, h: np.ndarray) -> np.ndarray:
        """bool (R,): whether each hash was (probably) present before this call; then adds them all."""
        out = np.zeros(h.size, dtype=bool)
        for j in range(h.size):  # sequential: a repeat inside one batch must be seen too
            idx = self._idx(h[j : j + 1])[0]
            present = (self.bits[idx >> 3] >> (idx & 7).astype(np.uint8)) & 1
            out[j] = bool(present.all())
            np.bitwise_or.at(self.bits, idx >> 3, (1 << (idx & 7)).astype(np.uint8))
        self.n += h.size
        return out

    def false_positive_rate(self) -> float:
        return (1 - math.exp(-self.k * self.n / self.m)) ** self.k


_agreed_rows: int | None = None  # the per-process row count all processes were checked to share


def gather_hashes(
    hashes: np.ndarray, instance_ids: np.ndarray | None
) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Every process's (row hashes uint64, instance ids int64 or None), in process order.

    One `process_allgather` of 5 uint32 words per row (hash, instance id, process index: 64-bit
    values travel as two words, so it works without jax_enable_x64); every process must call it with
    the same row count, which the first call (and any call with a new count) checks with one more
    small all-gather, raising a clear error instead of a mismatched collective. With one process no
    collective runs."""
    import jax

    hashes = np.ascontiguousarray(hashes, dtype=np.uint64)
    if jax.process_count() == 1:
        return [(hashes, None if instance_ids is None else np.asarray(instance_ids, dtype=np.int64))]
    from jax.experimental import multihost_utils

    ids = np.full(hashes.size, -1, np.int64) if instance_ids is None else np.asarray(instance_ids, np.int64)
    if ids.shape != hashes.shape:
        raise OlmaxError(
            f"monitor: {hashes.size} rows but {ids.size} instance ids on process "
            f"{jax.process_index()}; pass one instance id per row"
        )
    global _agreed_rows
    if _agreed_rows != hashes.size:  # first call (or a new local batch size): agree on the row count
        counts = np.asarray(multihost_utils.process_allgather(np.asarray([hashes.size], np.int32))).reshape(
            -1
        )
        if (counts != hashes.size).any():
            raise OlmaxError(
                "monitor: processes feed different row counts per step ("
                + ", ".join(f"process {p}: {int(c)}" for p, c in enumerate(counts))
                + "); every process must pass its G / P rows of the global batch"
            )
        _agreed_rows = hashes.size
    words = np.empty((hashes.size, 5), np.uint32)
    words[:, 0:2] = hashes.view(np.uint32).reshape(-1, 2)
    words[:, 2:4] = np.ascontiguousarray(ids).view(np.uint32).reshape(-1, 2)
    words[:, 4] = jax.process_index()
    out = np.asarray(multihost_utils.process_allgather(words))  # (processes, R, 5)
    if out.shape[1]:  # blocks in process order, whatever order the device mesh gathered them in
        out = out[np.argsort(out[:, 0, 4], kind="stable")]
    result = []
    for block in out:
        h = np.ascontiguousarray(block[:, 0:2]).view(np.uint64).reshape(-1)
        i = np.ascontiguousarray(block[:, 2:4]).view(np.int64).reshape(-1)
        result.append((h, None if instance_ids is None else i))
    return result


class StreamMonitor:
    """See the module docstring."""

    def __init__(
        self,
        *,
        steps_per_epoch: int | None = None,
        index=None,
        on_repeat: str = "raise",
        bloom_bits: int | None = None,
        bloom_hashes: int = 7,
    ):
        if on_repeat not in ("raise", "log"):
            raise OlmaxError(f"on_repeat must be 'raise' or 'log', got {on_repeat!r}")
        self.steps_per_epoch = steps_per_epoch
        self.on_repeat = on_repeat
        self.bloom_bits, self.bloom_hashes = bloom_bits, bloom_hashes
        self._allowed = None
        if index is not None:
            from olmax.audit.spans import physical_ids

            phys = physical_ids(index.paths)
            self._index, self._phys = index, phys
            self._allowed = np.bincount(phys)[phys]  # per file: how many mix lines share its file
        self.epoch = 0
        self.rows = 0
        self.repeats = 0
        self.alerts: list[RepeatAlert] = []
        self._reset()

    def _reset(self) -> None:
        self._seen: dict[int, list[int]] = {}  # hash -> [count, step, host, row, instance]
        self._copies: dict[int, set[int]] = {}  # hash -> instances seen, for planned-copy content
        self._bloom = _Bloom(self.bloom_bits, self.bloom_hashes) if self.bloom_bits else None

    def _planned(self, instance_ids: np.ndarray | None, n: int) -> np.ndarray:
        if self._allowed is None or instance_ids is None:
            return np.ones(n, dtype=np.int64)
        return self._allowed[self._index.files_of(np.asarray(instance_ids))]

    def update(
        self,
        step: int,
        rows: np.ndarray,
        *,
        host: int = 0,
        instance_ids: np.ndarray | None = None,
        epoch: int | None = None,
    ) -> list[RepeatAlert]:
        """Check one host's rows (R, L) of global step `step`; returns the alerts it raised.

        `epoch` (the loader's data epoch) overrides `step // steps_per_epoch`: a trainer reports its own
        1-based step numbers, which need not be stream positions (e.g. after a global batch change)."""
        rows = np.asarray(rows)
        new = self._check(step, row_hashes(rows.reshape(-1, rows.shape[-1])), host, instance_ids, epoch)
        return self._report(new)

    def update_all_hosts(
        self, step: int, rows: np.ndarray, *, instance_ids: np.ndarray | None = None, epoch: int | None = None
    ) -> list[RepeatAlert]:
        """Check global step `step`, given this process's rows (R, L); every process calls it at each step.

        Each process hashes its own rows; with several JAX processes the hashes and instance ids are
        all-gathered (`gather_hashes`, 20 bytes per row), and every process checks all hosts' rows in
        host order. So every process holds the same state (any one's `state_dict()` restores all), and
        a content two hosts emit in one step is caught as a repeat at the later host. With one process
        this is `update(step, rows, host=0, ...)`."""
        rows = np.asarray(rows)
        hashes = row_hashes(rows.reshape(-1, rows.shape[-1]))
        new: list[RepeatAlert] = []
        for host, (h, ids) in enumerate(gather_hashes(hashes, instance_ids)):
            new += self._check(step, h, host, ids, epoch)
        return self._report(new)

    def _check(
        self, step: int, hashes: np.ndarray, host: int, instance_ids: np.ndarray | None, epoch: int | None
    ) -> list[RepeatAlert]:
        """Record one host's row hashes of step `step`; returns the repeats found (not yet reported)."""
        if epoch is None:
            epoch = step // self.steps_per_epoch if self.steps_per_epoch else 0
        if epoch != self.epoch:
            self.epoch = epoch
            self._reset()
        planned = self._planned(instance_ids, hashes.size)
        inst = np.asarray(instance_ids) if instance_ids is not None else np.full(hashes.size, -1)
        new: list[RepeatAlert] = []
        if self._bloom is not None:
            check = planned == 1
            present = self._bloom.add_and_test(hashes[check])
            for r in np.flatnonzero(check)[present].tolist():
                new.append(RepeatAlert(step, host, r, int(inst[r]), -1, -1, -1, -1))
        else:
            for r, h in enumerate(hashes.tolist()):
                rec = self._seen.get(h)
                i = int(inst[r])
                if rec is None:
                    self._seen[h] = [1, step, host, r, i]
                    continue
                rec[0] += 1
                # a planned copy is another instance with the same content; the same instance twice
                # in one epoch is never planned
                others = self._copies.setdefault(h, {rec[4]}) if planned[r] > 1 else None
                if rec[0] > planned[r] or i < 0 or (others is not None and i in others):
                    new.append(RepeatAlert(step, host, r, i, rec[1], rec[2], rec[3], rec[4]))
                elif others is not None:
                    others.add(i)
        self.rows += hashes.size
        return new

    def _report(self, new: list[RepeatAlert]) -> list[RepeatAlert]:
        self.repeats += len(new)
        self.alerts += new
        for alert in new:
            log.error("%s", alert)
        if new and self.on_repeat == "raise":
            raise ReplayError(new[0])
        return new

    def counters(self) -> dict:
        """What a trainer records per step in metrics.jsonl."""
        out = {"audit_rows": self.rows, "audit_repeats": self.repeats, "audit_epoch": self.epoch}
        if self._bloom is not None:
            out["audit_bloom_fp_rate"] = self._bloom.false_positive_rate()
        return out

    def state_dict(self) -> dict:
        """Numpy arrays and ints only (Orbax- and JSON-friendly)."""
        state = {
            "epoch": self.epoch,
            "rows": self.rows,
            "repeats": self.repeats,
            "alerts": [asdict(a) for a in self.alerts],
        }
        if self._bloom is not None:
            state.update(bloom=self._bloom.bits.copy(), bloom_n=self._bloom.n)
        else:
            keys = np.fromiter(self._seen.keys(), dtype=np.uint64, count=len(self._seen))
            meta = np.asarray(list(self._seen.values()), dtype=np.int64).reshape(-1, 5)
            pairs = [(h, i) for h, insts in self._copies.items() for i in sorted(insts)]
            state.update(
                seen_hashes=keys,
                seen_meta=meta,
                copy_hashes=np.asarray([h for h, _ in pairs], dtype=np.uint64),
                copy_instances=np.asarray([i for _, i in pairs], dtype=np.int64),
            )
        return state

    def state_json(self) -> dict:
        """`state_dict()` with arrays as base64 (dtype, shape, bytes): fits a checkpoint's JSON metadata."""

        def enc(v):
            if isinstance(v, np.ndarray):
                return {
                    "__array__": base64.b64encode(np.ascontiguousarray(v).tobytes()).decode("ascii"),
                    "dtype": v.dtype.str,
                    "shape": list(v.shape),
                }
            return v

        return {k: enc(v) for k, v in self.state_dict().items()}

    def load_state_json(self, state: dict) -> None:
        """Inverse of `state_json`."""

        def dec(v):
            if isinstance(v, dict) and "__array__" in v:
                raw = base64.b64decode(v["__array__"])
                return np.frombuffer(raw, dtype=np.dtype(v["dtype"])).reshape(v["shape"]).copy()
            return v

        self.load_state_dict({k: dec(v) for k, v in state.items()})

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.rows, self.repeats = int(state["epoch"]), int(state["rows"]), int(state["repeats"])
        self.alerts = [RepeatAlert(**a) for a in state.get("alerts", [])]
        self._reset()
        if "bloom" in state:
            if self._bloom is None or self._bloom.bits.size != np.asarray(state["bloom"]).size:
                raise OlmaxError(
                    "monitor state holds a Bloom filter of another size; build the monitor "
                    "with the same bloom_bits"
                )
            self._bloom.bits[:] = np.asarray(state["bloom"], dtype=np.uint8)
            self._bloom.n = int(state["bloom_n"])
        else:
            for h, m in zip(
                np.asarray(state["seen_hashes"], dtype=np.uint64).tolist(),
                np.asarray(state["seen_meta"], dtype=np.int64).reshape(-1, 5).tolist(),
            ):
                self._seen[h] = list(m)
            for h, i in zip(
                np.asarray(state.get("copy_hashes", []), dtype=np.uint64).tolist(),
                np.asarray(state.get("copy_instances", []), dtype=np.int64).tolist(),
            ):
                self._copies.setdefault(h, set()).add(i)
