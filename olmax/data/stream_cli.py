"""The command-line options that describe a data stream, registered once for every command that reads one.

One name per meaning: `--tokenizer-id` is the value of `{TOKENIZER}` in mix paths (a tokenizer *file* is
`--tokenizer` wherever a command needs one). `--config RECIPE` takes the stream from a training recipe's
`data` section (a preset name or a YAML path, exactly as `olmax train --config` reads it), and every
explicit flag overrides it, so `olmax audit loader --config configs/olmo3_7b_stage1.yaml --mix MIX`
audits what that run will load.
"""

from __future__ import annotations

import argparse

from olmax.data.stream import ORDERS, StreamSpec
from olmax.errors import OlmaxError

# option dest -> (flag, StreamSpec field)
_FLAGS = {
    "mix": "--mix",
    "base_dir": "--base-dir",
    "tokenizer_id": "--tokenizer-id",
    "seq_len": "--seq-len",
    "global_batch_size": "--global-batch-size",
    "seed": "--seed",
    "order": "--order",
    "work_dir": "--work-dir",
    "packed": "--packed",
    "source_group_size": "--source-group-size",
    "source_permutation_seed": "--source-permutation-seed",
}


def add_stream_options(
    p: argparse.ArgumentParser,
    *,
    seq_len: bool = True,
    batch: bool = True,
    order: bool = True,
    work_dir: bool = True,
) -> None:
    """Register `--config`, the mix options and, as asked, `--seq-len`, `--global-batch-size`, the order
    (`--seed`, `--order`) and `--work-dir`.

    Every option defaults to "not given", so `stream_from_args` can tell a flag from the recipe's value."""
    g = p.add_argument_group("data stream (explicit flags override --config)")
    g.add_argument(
        "--config",
        metavar="RECIPE",
        help="take the stream from a training recipe's data section (preset name or YAML path)",
    )
    g.add_argument(
        "--mix",
        help="mix file of `label,path` lines (DIR/mix.txt from `olmax data prepare`), an "
        "fsspec URL, `olmo-core:NAME` (an official OLMo-core mix; needs --base-dir) or `demo`",
    )
    g.add_argument(
        "--base-dir",
        help="folder or URL that relative mix paths resolve against (default: the mix file's own folder)",
    )
    g.add_argument(
        "--tokenizer-id",
        help="value of {TOKENIZER} in mix paths (default: the name OLMo-core uses for dolma2)",
    )
    if seq_len:
        g.add_argument("--seq-len", type=int, help="tokens per instance L (8192 in OLMo 3 stages 1-2)")
        g.add_argument(
            "--packed",
            action="store_const",
            const=True,
            default=None,
            help="instances are whole documents packed into L tokens by Optimized Best-Fit "
            "Decreasing and padded (OLMo-core's NumpyPackedFSLDataset, OLMo 3 stage 3); L must "
            "be a power of two",
        )
        g.add_argument(
            "--source-group-size",
            type=int,
            help="packed: files packed together, in groups of K consecutive files (default 1; stage 3: 8)",
        )
        g.add_argument(
            "--source-permutation-seed",
            type=int,
            help="packed: shuffle the mix's files with "
            "random.Random(R) first (default: no shuffle; stage 3: 123)",
        )
    if batch:
        g.add_argument(
            "--global-batch-size", type=int, help="sequences per global batch G (512 in OLMo 3 stage 1)"
        )
    if order:
        g.add_argument("--seed", type=int, help=f"data seed (default {StreamSpec.seed}, OLMo 3 stage 1)")
        g.add_argument(
            "--order",
            choices=ORDERS,
            help="olmo-core (default): AI2's permutation, cached in an "
            "order file; feistel: stateless, not AI2's",
        )
    if work_dir:
        g.add_argument("--work-dir", help="order and spill files (default $OLMAX_WORK_DIR or the temp dir)")


def stream_from_args(args: argparse.Namespace, *, required: tuple[str, ...] = ("mix",)) -> StreamSpec:
    """The stream the options describe: the recipe's data section (with `--config`) or the defaults,
    overridden by every flag given. `required` fields must come from a flag or the recipe."""
    given = {k: v for k in _FLAGS if (v := getattr(args, k, None)) is not None}
    if getattr(args, "config", None):
        from olmax.train.config import load_config

        base = load_config(args.config).data
    else:
        base = StreamSpec()
        missing = [_FLAGS[k] for k in required if k not in given]
        if missing:
            raise OlmaxError(
                f"{', '.join(missing)} required (or --config RECIPE, whose data section gives "
                f"{'them' if len(missing) > 1 else 'it'})"
            )
    return base.replace(**given)
