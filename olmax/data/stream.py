"""The one description of a data stream: which tokens, cut how, in which order.

`StreamSpec` is shared by everything that reads a stream: the trainer (its `data` config area), the
loader, `olmax data batches / plan`, the loader and stream audits, exposure and the evals. Two specs
that are equal (read knobs aside) give the same global batches. `open_index` and `open_loader` are the
only ways the rest of the package turns a spec into an index or a process's loader, so a field added
here reaches every command at once.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from olmax.data.mixfile import OLMO_CORE_PREFIX
from olmax.errors import OlmaxError
from olmax.storage import is_url

if TYPE_CHECKING:
    from olmax.data.index import TokenIndex
    from olmax.data.loader import Loader
    from olmax.data.mixfile import Mix
    from olmax.data.packing import PackedIndex

DATA_SEED = 34521  # OLMo 3 stage-1 data seed: OLMo-core NumpyDataLoaderConfig(seed=34521)
DEMO_MIX = "demo"  # `mix` value: the embedded stdlib code+prose mix (olmax.data.demo_mix), built on first use
UNSET_MIX = ("???", "")  # a recipe that names its mix only in a comment (configs/olmo3_7b_stage1.yaml)
ORDERS = ("olmo-core", "feistel")


@dataclass(frozen=True)
class StreamSpec:
    """Mix, base dir, {TOKENIZER} value, sequence length, global batch, seed, order and work dir.

    Everything but the read knobs (`num_threads`, `prefetch_buffer_size`, `num_workers`) decides the
    batch stream; the read knobs never change what is seen, only how fast.
    """

    mix: str = DEMO_MIX  # mix file path/URL, `olmo-core:NAME`, or "demo"
    base_dir: str | None = None  # base for the mix's relative paths (OLMo-core's mix_base_dir)
    tokenizer_id: str | None = None  # value of {TOKENIZER} in mix paths; None: OLMo-core's dolma2 name
    seq_len: int = 8192  # tokens per instance L (OLMo 3 stages 1-2)
    global_batch_size: int = 512  # sequences per optimizer step, whatever the device count
    seed: int = DATA_SEED
    order: str = "olmo-core"  # or "feistel": stateless, no order file, not AI2's order
    work_dir: str | None = None  # order files; None: $OLMAX_WORK_DIR or the temp dir
    document_masks: bool = False  # attend within documents only (segment ids from EOS); off in stages 1-2
    # OLMo-core's NumpyPackedFSLDataset (stage 3): whole documents packed by OBFD into L-token instances,
    # padded, per group of `source_group_size` files after a `source_permutation_seed` file shuffle
    packed: bool = False
    source_group_size: int = 1
    source_permutation_seed: int | None = None
    num_threads: int = 2  # Grain read threads; 0 reads synchronously (never changes the stream)
    prefetch_buffer_size: int = 4  # batches read ahead
    num_workers: int = 0  # Grain prefetch processes (mp_prefetch); 0: none

    def __post_init__(self) -> None:
        if self.seq_len <= 0:
            raise OlmaxError(f"seq_len must be positive, got {self.seq_len}")
        if self.global_batch_size <= 0:
            raise OlmaxError(f"global_batch_size must be positive, got {self.global_batch_size}")
        if self.order not in ORDERS:
            raise OlmaxError(f"order {self.order!r}: use one of {', '.join(ORDERS)}")
        if self.source_group_size < 1:
            raise OlmaxError(f"source_group_size must be >= 1, got {self.source_group_size}")
        if not self.packed and (self.source_group_size != 1 or self.source_permutation_seed is not None):
            raise OlmaxError(
                "source_group_size and source_permutation_seed apply to packed streams only; "
                "set data.packed=true (--packed)"
            )

    def replace(self, **fields) -> StreamSpec:
        return dataclasses.replace(self, **fields)

    def resolve_mix(self) -> str:
        """The mix file to read: `mix` as given, or the embedded demo mix's path (built on first use)."""
        if self.mix in UNSET_MIX or self.mix is None:
            raise OlmaxError(
                "data.mix is not set: this recipe names the OLMo-core mix it trains on in "
                "its comment; prepare or download it and pass --mix PATH (or data.mix=PATH)"
            )
        if self.mix != DEMO_MIX:
            if not (self.mix.startswith(OLMO_CORE_PREFIX) or is_url(self.mix) or os.path.exists(self.mix)):
                raise OlmaxError(f"mix {self.mix}: no such file; pass --mix PATH (or data.mix=PATH)")
            return self.mix
        from olmax.data.demo_mix import ensure_demo_mix

        return str(ensure_demo_mix(work_dir_path(self.work_dir) / "demo-mix"))

    def open_index(self, *, seq_len: int | None = None, **kwargs) -> TokenIndex | PackedIndex:
        """The index of this stream's mix at `seq_len` (default the spec's): fixed windows (`build_index`,
        which takes the kwargs) or, for a packed stream, the packed instances (`build_packed_index`; kwargs
        `dtype`, `vocab_size`, `eos_token_id`, `pad_token_id`, `bos_token_id`, default dolma2's; `progress`
        shows a bar while packing)."""
        from olmax.data.index import build_index

        mix = self.read_mix()
        seq_len = self.seq_len if seq_len is None else seq_len
        progress = kwargs.pop("progress", False)
        if not self.packed:
            return build_index(mix, seq_len, **kwargs)
        from olmax.data.index import DOLMA2_EOS, DOLMA2_PAD, DOLMA2_VOCAB_SIZE
        from olmax.data.packing import build_packed_index

        return build_packed_index(
            mix.paths,
            mix.labels,
            seq_len,
            eos_token_id=kwargs.get("eos_token_id", DOLMA2_EOS),
            pad_token_id=kwargs.get("pad_token_id", DOLMA2_PAD),
            vocab_size=kwargs.get("vocab_size", DOLMA2_VOCAB_SIZE),
            bos_token_id=kwargs.get("bos_token_id"),
            dtype=kwargs.get("dtype", "uint32"),
            source_group_size=self.source_group_size,
            source_permutation_seed=self.source_permutation_seed,
            work_dir=str(work_dir_path(self.work_dir)),
            progress=progress,
        )

    def file_index(self) -> TokenIndex:
        """Every file of the mix with its size (a window index at L = 1, short files kept), whatever the
        stream's instances: what the content audits (leaks, dedup) read."""
        from olmax.data.index import build_index

        return build_index(self.read_mix(), 1, allow_short_files=True)

    def read_mix(self) -> Mix:
        """The parsed mix: its files' paths and labels, `{TOKENIZER}` and the base dir resolved."""
        from olmax.data.mixfile import read_mix

        return read_mix(self.resolve_mix(), base_dir=self.base_dir, tokenizer=self.tokenizer_id)

    def open_loader(
        self,
        index: TokenIndex | None = None,
        *,
        process_index: int | None = None,
        process_count: int | None = None,
        **kwargs,
    ) -> Loader:
        """This process's Loader (default: JAX's process index and count) over `index` or a fresh one.

        kwargs: `num_epochs`, `eos_token_id`, `bos_token_id` (see `Loader`)."""
        from olmax.data.loader import Loader

        return Loader(
            self.open_index() if index is None else index,
            self,
            process_index=process_index,
            process_count=process_count,
            **kwargs,
        )

    def describe(self) -> str:
        """One line for logs: what decides the stream."""
        packed = (
            f", packed (OBFD, groups of {self.source_group_size} files, file shuffle seed "
            f"{self.source_permutation_seed})"
            if self.packed
            else ""
        )
        return (
            f"mix {self.mix}, L {self.seq_len}, G {self.global_batch_size}, seed {self.seed}, "
            f"order {self.order}" + packed + (", document masks" if self.document_masks else "")
        )


def work_dir_path(work_dir: str | None) -> Path:
    """Where order files and the demo mix live: `work_dir`, else $OLMAX_WORK_DIR, else the temp dir."""
    from olmax.data.order import default_work_dir

    return Path(work_dir or default_work_dir())
