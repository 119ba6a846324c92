"""The batch loader: OLMo-core's global batches, this process's rows, through a prefetching Grain pipeline.

Contract. For a mix indexed at sequence length L, global batch size G (sequences) and seed S, the
global batch (epoch, step) equals OLMo-core's `NumpyFSLDataLoader` batch `step` of that epoch (with
`global_batch_size=G*L` tokens); process I of P receives its positions I::P, in that order. Each
element yielded is a dict of numpy arrays: `input_ids` int32 (G/P, L), `instance_ids` int64 (G/P,)
(global instance indices, for audits), `source` int32 (G/P,) (ids into `index.label_names`), and
with `document_masks=True` `segment_ids` and `positions` int32 (G/P, L); a packed stream (OLMo-core's
`NumpyPackedFSLDataset`, olmax.data.packing) adds `label_mask` bool (G/P, L), False on padding. Prefetch threads read
ahead but Grain hands elements out in stream order, so their number never changes what is seen.
`BatchIterator.state` after n batches, restored by any process count (and any G that divides the
consumed tokens), continues the stream exactly; epochs roll over to a fresh permutation.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from olmax.data.grain_source import BatchSource
from olmax.data.index import TokenFields, TokenIndex, build_index
from olmax.data.mixfile import OLMO_CORE_PREFIX, Mix, missing_mix, read_mix
from olmax.data.order import default_work_dir, work_dir_path
from olmax.data.packing import PackedIndex, PackSpec, build_packed_index
from olmax.data.state import LoaderState, advance, resume_step
from olmax.data.stream import DEMO_MIX, DEMO_MIX_FOLDER, DOLMA2_VOCAB_SIZE, UNSET_MIX, StreamSpec
from olmax.data.tokenfile import DEFAULT_DTYPE
from olmax.errors import OlmaxError
from olmax.storage import is_url

if TYPE_CHECKING:
    from olmax.data.order import EpochOrder


class BatchIterator(Iterator[dict[str, np.ndarray]]):
    """Yields this process's batches in stream order; `state` is the position after the last one."""

    def __init__(self, loader: Loader, state: LoaderState, start: int):
        import grain

        self._loader = loader
        self._state = state
        self.index = start
        dataset = grain.MapDataset.source(loader.source)[start:]
        cfg = loader.spec
        if cfg.num_threads > 0 or cfg.num_workers > 0:
            options = grain.ReadOptions(
                num_threads=max(1, cfg.num_threads), prefetch_buffer_size=max(1, cfg.prefetch_buffer_size)
            )
            pipeline = dataset.to_iter_dataset(options)
            if cfg.num_workers > 0:
                from absl import flags

                if not flags.FLAGS.is_parsed():  # Grain reads absl flags in mp_prefetch
                    flags.FLAGS.mark_as_parsed()
                # Workers read disjoint slices of the stream and Grain interleaves them back in
                # order; the source is 1:1, so the output does not depend on their number.
                pipeline = pipeline.mp_prefetch(grain.MultiprocessingOptions(num_workers=cfg.num_workers))
            self._it = iter(pipeline)
        else:
            self._it = (dataset[i] for i in range(len(dataset)))

    @property
    def state(self) -> LoaderState:
        return self._state

    @property
    def position(self) -> tuple[int, int]:
        """(epoch, step) of the next batch."""
        return self._loader.source.position(self.index)

    def close(self) -> None:
        """Stop prefetch threads/processes (also done on garbage collection)."""
        close = getattr(self._it, "close", None)
        if close is not None:
            close()

    def __next__(self) -> dict[str, np.ndarray]:
        batch = next(self._it)
        self.index += 1
        self._state = advance(
            self._state,
            global_batch_size=self._loader.spec.global_batch_size,
            batches_per_epoch=self._loader.batches_per_epoch,
        )
        return batch


FROM_STREAM = object()  # an id argument not given: the stream's (a BOS of None means "no BOS")


class Loader:
    """Binds an index, a stream spec and this process's place; hands out batches and iterators.

    `num_epochs` (None: unbounded) stops the stream; `eos_token_id` / `bos_token_id` mark documents
    for `document_masks` (default: the stream's, `spec.eos_token_id` / `spec.bos_token_id`; OLMo 3: EOS
    100257, no BOS)."""

    def __init__(
        self,
        index: TokenIndex,
        spec: StreamSpec,
        *,
        process_index: int | None = None,
        process_count: int | None = None,
        num_epochs: int | None = None,
        eos_token_id: int | None = None,
        bos_token_id: int | None | object = FROM_STREAM,
    ):
        if process_index is None or process_count is None:
            import jax

            process_index = jax.process_index() if process_index is None else process_index
            process_count = jax.process_count() if process_count is None else process_count
        if index.seq_len != spec.seq_len:
            raise OlmaxError(
                f"the index was built at seq_len {index.seq_len}, the stream asks for {spec.seq_len}"
            )
        self.index = index
        self.spec = spec
        self.num_epochs = num_epochs
        source_spec = spec.replace(
            work_dir=spec.work_dir or default_work_dir(),
            eos_token_id=spec.eos_token_id if eos_token_id is None else eos_token_id,
            bos_token_id=spec.bos_token_id if bos_token_id is FROM_STREAM else bos_token_id,
        )
        self.source = BatchSource(
            index,
            source_spec,
            process_index=process_index,
            process_count=process_count,
            num_epochs=num_epochs,
        )

    @property
    def batches_per_epoch(self) -> int:
        """N // G: OLMo-core drops the permutation's tail to whole global batches."""
        return self.source.batches_per_epoch

    @property
    def rows_per_process(self) -> int:
        return self.spec.global_batch_size // self.source.process_count

    def state_at(self, epoch: int = 1, step: int = 0) -> LoaderState:
        """The state just before global batch (epoch, step)."""
        if epoch < 1:
            raise OlmaxError(f"--epoch must be >= 1 (epochs are 1-based, as in OLMo-core), got {epoch}")
        if not 0 <= step < self.batches_per_epoch:
            raise OlmaxError(
                f"--start-step {step} is outside the epoch's {self.batches_per_epoch} "
                f"global batches (N // G with N={self.index.num_instances}, "
                f"G={self.spec.global_batch_size})"
            )
        cfg = self.spec
        return LoaderState(
            fingerprint=self.index.fingerprint,
            seed=cfg.seed,
            epoch=epoch,
            tokens_processed=step * cfg.global_batch_size * cfg.seq_len,
            seq_len=cfg.seq_len,
            global_batch_size=cfg.global_batch_size,
            order=cfg.order,
        )

    def resume_position(self, state: LoaderState) -> tuple[int, int]:
        """(epoch, step) where `state` continues under this loader's settings; refuses mismatches."""
        cfg = self.spec
        return resume_step(
            state,
            fingerprint=self.index.fingerprint,
            seed=cfg.seed,
            order=cfg.order,
            seq_len=cfg.seq_len,
            global_batch_size=cfg.global_batch_size,
            batches_per_epoch=self.batches_per_epoch,
        )

    def instance_ids(self, epoch: int, step: int) -> np.ndarray:
        """int64 (G/P,): which instances this process's rows of batch (epoch, step) hold (no reads)."""
        return self.source.instance_ids(epoch, step)

    def rows(self, epoch: int, start: int, stop: int) -> np.ndarray:
        """int64 (stop - start, G/P): this process's instance ids for steps [start, stop) of `epoch`, a
        line per step (no reads): the same split `batch` and `iterate` read, asked for a run of steps."""
        return self.source.rows(epoch, start, stop)

    def epoch_order(self, epoch: int) -> EpochOrder:
        """The global order of `epoch` (1-based): the instance ids of its positions, every process's rows."""
        return self.source.epoch_order(epoch)

    def batch(self, epoch: int, step: int) -> dict[str, np.ndarray]:
        """This process's rows of global batch (epoch, step), read directly (no pipeline)."""
        return self.source.read(epoch, step)

    def iterate(self, state: LoaderState | None = None) -> BatchIterator:
        """Batches from `state` (default: epoch 1, step 0) onward, prefetched through Grain."""
        state = state or self.state_at(1, 0)
        epoch, step = self.resume_position(state)
        if self.num_epochs is not None and epoch > self.num_epochs:
            raise OlmaxError(
                f"the state is past the last epoch ({self.num_epochs}); raise num_epochs to keep training"
            )
        # Re-express the position at this loader's G so `state` advances in its units from here.
        tokens = state.tokens_processed if (epoch, step) != (state.epoch + 1, 0) else 0
        current = LoaderState(
            state.fingerprint,
            state.seed,
            epoch,
            tokens,
            state.seq_len,
            self.spec.global_batch_size,
            state.order,
        )
        return BatchIterator(self, current, self.source.stream_index(epoch, step))


# --------------------------------------------------------------------------------------------- factories
# The only ways the rest of the package turns a StreamSpec (plain data) into a mix, an index or a loader.
def demo_mix_folder(spec: StreamSpec) -> Path:
    """Where the embedded demo mix of the stream's work dir is prepared (olmax.data.prepare.demo_mix)."""
    return work_dir_path(spec.work_dir) / DEMO_MIX_FOLDER


def resolve_mix(spec: StreamSpec) -> str:
    """The mix file to read: `spec.mix` as given, or the path of the demo mix, which the command that reads
    the stream has prepared (`olmax.data.prepare.demo_mix.ensure_stream_mix`: loading never writes shards)."""
    if spec.mix in UNSET_MIX or spec.mix is None:
        raise OlmaxError(
            "data.mix is not set: this recipe names the OLMo-core mix it trains on in "
            "its comment; prepare or download it and pass --mix PATH (or data.mix=PATH)"
        )
    if spec.mix != DEMO_MIX:
        if not (spec.mix.startswith(OLMO_CORE_PREFIX) or is_url(spec.mix) or os.path.exists(spec.mix)):
            raise missing_mix(spec.mix)
        return spec.mix
    path = demo_mix_folder(spec) / "shards" / "mix.txt"
    if not path.is_file():
        raise OlmaxError(
            f"the demo mix is not prepared in {path.parent.parent}: the olmax commands prepare it when a "
            "stream names `mix: demo`; from Python, call "
            "olmax.data.prepare.demo_mix.ensure_stream_mix(spec) first, or pass --mix PATH"
        )
    return str(path)


def stream_mix(spec: StreamSpec) -> Mix:
    """The parsed mix of the stream: its files' paths and labels, `{TOKENIZER}` and the base dir resolved."""
    return read_mix(resolve_mix(spec), base_dir=spec.base_dir, tokenizer=spec.tokenizer_id)


def stream_index(spec: StreamSpec, *, seq_len: int | None = None, **kwargs) -> TokenIndex | PackedIndex:
    """The index of the stream's mix at `seq_len` (default the spec's), in the spec's dtype: fixed windows
    (`build_index`, which takes the kwargs) or, for a packed stream, the packed instances
    (`build_packed_index`; kwargs `dtype`, `eos_token_id`, `pad_token_id`, `bos_token_id`, default the
    stream's, and `vocab_size`, default dolma2's; `progress` shows a bar while packing)."""
    mix = stream_mix(spec)
    seq_len = spec.seq_len if seq_len is None else seq_len
    progress = kwargs.pop("progress", False)
    if not spec.packed:
        stream_fields = {
            "dtype": spec.dtype,
            "eos_token_id": spec.eos_token_id,
            "pad_token_id": spec.pad_token_id,
            "bos_token_id": spec.bos_token_id,
        }
        allow = kwargs.pop("allow_short_files", False)
        return build_index(
            mix, seq_len, fields=TokenFields(**{**stream_fields, **kwargs}), allow_short_files=allow
        )
    pack = PackSpec(
        eos_token_id=kwargs.get("eos_token_id", spec.eos_token_id),
        pad_token_id=kwargs.get("pad_token_id", spec.pad_token_id),
        vocab_size=kwargs.get("vocab_size", DOLMA2_VOCAB_SIZE),
        bos_token_id=kwargs.get("bos_token_id", spec.bos_token_id),
        dtype=kwargs.get("dtype", spec.dtype),
        source_group_size=spec.source_group_size,
        source_permutation_seed=spec.source_permutation_seed,
    )
    return build_packed_index(
        mix.paths, mix.labels, seq_len, pack, work_dir=str(work_dir_path(spec.work_dir)), progress=progress
    )


def file_index(spec: StreamSpec) -> TokenIndex:
    """Every file of the stream's mix with its size (a window index at L = 1, short files kept), whatever
    the stream's instances: what the content audits (leaks, dedup) read, in uint32 only so far."""
    if spec.dtype != DEFAULT_DTYPE:
        raise OlmaxError(
            f"data.dtype {spec.dtype}: the content audits (leaks, dedup) read {DEFAULT_DTYPE} token files "
            "only; retokenize with `olmax data prepare` (uint32)"
        )
    return build_index(stream_mix(spec), 1, allow_short_files=True)


def open_loader(
    spec: StreamSpec,
    index: TokenIndex | None = None,
    *,
    process_index: int | None = None,
    process_count: int | None = None,
    **kwargs,
) -> Loader:
    """This process's Loader of `spec` (default: JAX's process index and count) over `index` or a fresh one.

    kwargs: `num_epochs`, `eos_token_id`, `bos_token_id` (see `Loader`)."""
    return Loader(
        stream_index(spec) if index is None else index,
        spec,
        process_index=process_index,
        process_count=process_count,
        **kwargs,
    )
