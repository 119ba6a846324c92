"""The Grain data source: element k is this process's rows of global batch k of the stream.

Contract. The stream numbers batches across epochs: k = (epoch - 1) * batches_per_epoch + step, with
batches_per_epoch = N // G (the permutation's tail is dropped to whole batches, as in OLMo-core).
Global batch (epoch, step) is positions [step*G, (step+1)*G) of the epoch's order; process I of P
holds positions I::P of it, so a global batch never depends on P. This source is the ONLY layer that
shards: the pipeline built on it must not be given Grain `ShardOptions` (that would shard twice).
Each element is read with one batch-level gather; it is a pure function of (index, G, seed, order, k).
"""

from __future__ import annotations

import threading

import numpy as np

from olmax.data.index import TokenIndex
from olmax.data.order import EpochOrder, epoch_order
from olmax.data.packing import PackedIndex
from olmax.data.reader import TokenReader
from olmax.data.stream import StreamSpec
from olmax.errors import OlmaxError

# Length of an unbounded stream: far more epochs than any run makes, still a plain int for Grain.
UNBOUNDED_EPOCHS = 1 << 20


def document_masks(
    input_ids: np.ndarray, eos_token_id: int, bos_token_id: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row (segment_ids, positions), int32 (R, L), for intra-document attention masking.

    A document ends with its EOS (or, with a BOS id, starts at its BOS); segment ids count the
    documents begun earlier in the row, positions restart at 0 at each document start.
    """
    rows, length = input_ids.shape
    if bos_token_id is None:
        ends = input_ids == eos_token_id
        segment_ids = np.cumsum(ends, axis=1, dtype=np.int32) - ends
        starts = np.zeros_like(ends)
        starts[:, 1:] = ends[:, :-1]
    else:
        starts = input_ids == bos_token_id
        segment_ids = np.cumsum(starts, axis=1, dtype=np.int32)
    starts[:, 0] = True
    t = np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length))
    last_start = np.maximum.accumulate(np.where(starts, t, 0), axis=1)
    return segment_ids.astype(np.int32), (t - last_start).astype(np.int32)


class BatchSource:
    """A Grain `RandomAccessDataSource` of whole per-process batches (see the module contract)."""

    def __init__(
        self,
        index: TokenIndex | PackedIndex,
        spec: StreamSpec,
        *,
        process_index: int = 0,
        process_count: int = 1,
        num_epochs: int | None = None,
    ):
        """`spec` gives the batch (global batch size), the order (seed, order kind, work dir) and the
        document masks (`document_masks`, its EOS and BOS ids)."""
        global_batch_size, seed, order = spec.global_batch_size, spec.seed, spec.order
        if global_batch_size <= 0:
            raise OlmaxError(f"--global-batch-size must be positive, got {global_batch_size}")
        if process_count <= 0 or global_batch_size % process_count:
            raise OlmaxError(
                f"--global-batch-size {global_batch_size} is not divisible by "
                f"--process-count {process_count}; every process must get G/P whole rows"
            )
        if not 0 <= process_index < process_count:
            raise OlmaxError(f"--process-index {process_index} is outside [0, {process_count})")
        if index.num_instances < global_batch_size:
            raise OlmaxError(
                f"the mix holds {index.num_instances} instances of {index.seq_len} tokens, "
                f"fewer than one global batch of {global_batch_size}; add data or lower "
                f"--global-batch-size/--seq-len"
            )
        self.index = index
        self.global_batch_size = global_batch_size
        self.seed = seed
        self.order = order
        self.work_dir = spec.work_dir
        self.process_index = process_index
        self.process_count = process_count
        self.num_epochs = num_epochs
        self.document_masks = spec.document_masks
        self.eos_token_id = spec.eos_token_id
        self.bos_token_id = spec.bos_token_id
        self.batches_per_epoch = index.num_instances // global_batch_size
        self._reader = None if isinstance(index, PackedIndex) else TokenReader(index)
        self._orders: dict[int, EpochOrder] = {}
        self._lock = threading.Lock()
        epoch_order(order, 1, seed, 1)  # fail fast on an unknown order kind

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_orders"], state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._orders, self._lock = {}, threading.Lock()

    def __len__(self) -> int:
        return self.batches_per_epoch * (self.num_epochs or UNBOUNDED_EPOCHS)

    def __repr__(self) -> str:
        # Stable across processes and restarts: Grain keys checkpoints on it.
        return (
            f"olmax.BatchSource(fingerprint={self.index.fingerprint}, seq_len={self.index.seq_len}, "
            f"global_batch_size={self.global_batch_size}, seed={self.seed}, order={self.order}, "
            f"process={self.process_index}/{self.process_count})"
        )

    def position(self, k: int) -> tuple[int, int]:
        """(epoch, step) of stream element k."""
        return 1 + k // self.batches_per_epoch, k % self.batches_per_epoch

    def stream_index(self, epoch: int, step: int) -> int:
        return (epoch - 1) * self.batches_per_epoch + step

    def epoch_order(self, epoch: int) -> EpochOrder:
        """The global order of `epoch` (cached for the epochs in flight; one builder per host)."""
        order = self._orders.get(epoch)
        if order is None:
            with self._lock:
                order = self._orders.get(epoch)
                if order is None:
                    order = epoch_order(self.order, self.index.num_instances, self.seed, epoch, self.work_dir)
                    # Keep the epochs in flight around a boundary, drop older ones.
                    self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
                    self._orders[epoch] = order
        return order

    def rows(self, epoch: int, start: int, stop: int) -> np.ndarray:
        """int64 (stop - start, G/P): the global instance ids of this process's rows of batches
        [start, stop) of `epoch`, one line per step. The one place the stream is split among processes:
        batch s is positions [s*G, (s+1)*G) of the epoch's order and process I holds positions I::P of
        it, read for the whole run of steps as one strided slice (G/P whole rows per step)."""
        if not 0 <= start < stop <= self.batches_per_epoch:
            raise IndexError(f"steps [{start}, {stop}) outside epoch of {self.batches_per_epoch} batches")
        g, p = self.global_batch_size, self.process_count
        ids = self.epoch_order(epoch).take(start * g + self.process_index, stop * g, p)
        return ids.astype(np.int64).reshape(stop - start, g // p)

    def instance_ids(self, epoch: int, step: int) -> np.ndarray:
        """int64 (G/P,): the global instance ids of this process's rows of batch (epoch, step)."""
        return self.rows(epoch, step, step + 1)[0]

    def read(self, epoch: int, step: int) -> dict[str, np.ndarray]:
        """This process's rows of global batch (epoch, step), as numpy arrays."""
        ids = self.instance_ids(epoch, step)
        if self._reader is None:  # packed instances: whole documents, PAD-padded, with their label mask
            rows = self.index.read(ids)
            out = {
                "input_ids": rows["input_ids"],
                "instance_ids": ids,
                "source": rows["source"],
                "label_mask": rows["label_mask"],
            }
        else:
            files, starts = self.index.locate(ids)
            buf = np.empty((ids.size, self.index.seq_len), dtype=self.index.dtype)
            self._reader.read(files, starts, buf)
            # Token ids are < 2^31, so uint32 reinterprets as int32 with no copy.
            input_ids = buf.view(np.int32) if buf.dtype == np.uint32 else buf.astype(np.int32)
            out = {"input_ids": input_ids, "instance_ids": ids, "source": self.index.file_label_ids[files]}
        if self.document_masks:
            out["segment_ids"], out["positions"] = document_masks(
                out["input_ids"], self.eos_token_id, self.bos_token_id
            )
        return out

    def __getitem__(self, k: int) -> dict[str, np.ndarray]:
        return self.read(*self.position(int(k)))
