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
from typing import ClassVar

from olmax.cli_fields import Option, named, setting
from olmax.data.tokenfile import DEFAULT_DTYPE, DTYPES
from olmax.errors import OlmaxError

DATA_SEED = 34521  # OLMo 3 stage-1 data seed: OLMo-core NumpyDataLoaderConfig(seed=34521)
DEMO_MIX = "demo"  # `mix` value: the embedded stdlib code+prose mix (olmax.data.prepare.demo_mix)
DEMO_MIX_FOLDER = "demo-mix"  # ... prepared under the stream's work dir by the command that reads it
UNSET_MIX = ("???", "")  # a recipe that names its mix only in a comment (configs/olmo3_7b_stage1.yaml)
ORDERS = ("olmo-core", "feistel")
# dolma2's special tokens, as OLMo-core's TokenizerConfig.dolma2() gives them (OLMo 3's tokenizer)
DOLMA2_VOCAB_SIZE = 100278
DOLMA2_EOS = 100257  # <|endoftext|>: ends every document
DOLMA2_PAD = 100277  # <|pad|>: fills packed rows


@dataclass(frozen=True)
class StreamSpec:
    """Mix, base dir, {TOKENIZER} value, sequence length, global batch, seed, order and work dir.

    Everything but the read knobs (`num_threads`, `prefetch_buffer_size`, `num_workers`) decides the
    batch stream; the read knobs never change what is seen, only how fast.
    """

    CONFIG_KEY: ClassVar[str] = "data"  # a recipe's `data` section

    mix: str = setting(
        DEMO_MIX,
        "mix file of `label,path` lines (DIR/mix.txt from `olmax data prepare`), an fsspec URL, "
        "`olmo-core:NAME` (an official OLMo-core mix; needs --base-dir) or `demo`",
    )
    base_dir: str | None = setting(  # OLMo-core's mix_base_dir
        None, "folder or URL that relative mix paths resolve against (default: the mix file's own folder)"
    )
    tokenizer_id: str | None = setting(  # None: OLMo-core's dolma2 name
        None, "value of {TOKENIZER} in mix paths (default: the name OLMo-core uses for dolma2)"
    )
    # the token files' ids: uint32 (dolma2, olmax prepare) or uint16 (OLMo-core mixes)
    dtype: str = setting(DEFAULT_DTYPE, cli=False)
    # the special tokens of the stream's tokenizer: documents end at EOS (and, with a BOS, start at it);
    # packed rows are padded with PAD
    eos_token_id: int = setting(DOLMA2_EOS, f"EOS id: ends documents (dolma2: {DOLMA2_EOS})")
    pad_token_id: int = setting(DOLMA2_PAD, f"PAD id: fills packed rows (dolma2: {DOLMA2_PAD})")
    bos_token_id: int | None = setting(None, cli=False)  # dolma2 has none
    seq_len: int = setting(8192, "tokens per instance L (8192 in OLMo 3 stages 1-2)")
    global_batch_size: int = setting(  # whatever the device count
        512, "sequences per global batch G (512 in OLMo 3 stage 1)"
    )
    seed: int = setting(DATA_SEED, f"data seed (default {DATA_SEED}, OLMo 3 stage 1)")
    order: str = setting(  # "feistel": no order file, not AI2's order
        "olmo-core",
        "olmo-core (default): AI2's permutation, cached in an order file; feistel: stateless, not AI2's",
        option=Option(choices=ORDERS),
    )
    work_dir: str | None = setting(  # order files
        None, "order and spill files (default $OLMAX_WORK_DIR or the temp dir)"
    )
    # attend within documents only (segment ids from EOS); off in stages 1-2
    document_masks: bool = setting(False, cli=False)
    # OLMo-core's NumpyPackedFSLDataset (stage 3): whole documents packed by OBFD into L-token instances,
    # padded, per group of `source_group_size` files after a `source_permutation_seed` file shuffle
    packed: bool = setting(
        False,
        "instances are whole documents packed into L tokens by Optimized Best-Fit Decreasing and padded "
        "(OLMo-core's NumpyPackedFSLDataset, OLMo 3 stage 3); L must be a power of two",
    )
    source_group_size: int = setting(
        1, "packed: files packed together, in groups of K consecutive files (default 1; stage 3: 8)"
    )
    source_permutation_seed: int | None = setting(
        None,
        "packed: shuffle the mix's files with random.Random(R) first (default: no shuffle; stage 3: 123)",
    )
    num_threads: int = setting(
        2, cli=False
    )  # Grain read threads; 0 reads synchronously (never changes the stream)
    prefetch_buffer_size: int = setting(4, cli=False)  # batches read ahead
    num_workers: int = setting(0, cli=False)  # Grain prefetch processes (mp_prefetch); 0: none

    def __post_init__(self) -> None:
        def name(field: str) -> str:
            return named(StreamSpec, field)

        if self.seq_len <= 0:
            raise OlmaxError(f"{name('seq_len')} must be positive, got {self.seq_len}")
        if self.global_batch_size <= 0:
            raise OlmaxError(f"{name('global_batch_size')} must be positive, got {self.global_batch_size}")
        if self.dtype not in DTYPES:
            raise OlmaxError(f"{name('dtype')} {self.dtype!r}: token files are {' or '.join(DTYPES)}")
        if self.order not in ORDERS:
            raise OlmaxError(f"{name('order')} {self.order!r}: use one of {', '.join(ORDERS)}")
        if self.source_group_size < 1:
            raise OlmaxError(f"{name('source_group_size')} must be >= 1, got {self.source_group_size}")
        if not self.packed and (self.source_group_size != 1 or self.source_permutation_seed is not None):
            raise OlmaxError(
                f"{name('source_group_size')} and {name('source_permutation_seed')} apply to packed "
                f"streams only; set {name('packed')}"
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
