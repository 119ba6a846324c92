"""The one description of a data stream: which tokens, cut how, in which order.

`StreamSpec` is shared by everything that reads a stream: the trainer (its `data` config area), the
loader, `olmax data batches / plan`, the loader and stream audits, exposure and the evals. Two specs
that are equal (read knobs aside) give the same global batches. It is plain data: the factories that turn
it into a mix, an index or a process's loader (`stream_index`, `open_loader`, ...) live in
olmax.data.loader, so a field added here reaches every command at once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from olmax.data.tokenfile import DEFAULT_DTYPE, DTYPES
from olmax.errors import OlmaxError

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
    dtype: str = (
        DEFAULT_DTYPE  # the token files' ids: uint32 (dolma2, olmax prepare) or uint16 (OLMo-core mixes)
    )
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
        if self.dtype not in DTYPES:
            raise OlmaxError(f"dtype {self.dtype!r}: token files are {' or '.join(DTYPES)}")
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
