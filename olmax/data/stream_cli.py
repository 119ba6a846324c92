"""The command-line options that describe a data stream, registered once for every command that reads one.

One name per meaning: `--tokenizer-id` is the value of `{TOKENIZER}` in mix paths (a tokenizer *file* is
`--tokenizer` wherever a command needs one). `--config RECIPE` takes the stream from a training recipe's
`data` section (a preset name or a YAML path, exactly as `olmax train --config` reads it), and every
explicit flag overrides it, so `olmax audit loader --config configs/olmo3_7b_stage1.yaml --mix MIX`
audits what that run will load.
"""

from __future__ import annotations

import argparse

from olmax.cli_fields import add_fields, flag_of, values_from_args
from olmax.data.stream import DEMO_MIX, StreamSpec
from olmax.errors import OlmaxError
from olmax.recipe import recipe_section

# The stream fields each kind of command takes as options (help, type and choices: StreamSpec's fields)
_MIX = ("mix", "base_dir", "tokenizer_id")
_SEQ = ("seq_len", "packed", "source_group_size", "source_permutation_seed")
_BATCH = ("global_batch_size",)
_ORDER = ("seed", "order")
_WORK = ("work_dir",)
_IDS = ("eos_token_id", "pad_token_id")  # by the commands that take them: add_token_id_options
_FLAGS = _MIX + _SEQ + _BATCH + _ORDER + _WORK + _IDS


def add_stream_options(
    p: argparse.ArgumentParser,
    *,
    seq_len: bool = True,
    batch: bool = True,
    order: bool = True,
    work_dir: bool = True,
) -> None:
    """Register `--config`, the mix options and, as asked, `--seq-len` (and the packing options),
    `--global-batch-size`, the order (`--seed`, `--order`) and `--work-dir`.

    Every option defaults to "not given", so `stream_from_args` can tell a flag from the recipe's value."""
    g = p.add_argument_group("data stream (explicit flags override --config)")
    g.add_argument(
        "--config",
        metavar="RECIPE",
        help="take the stream from a training recipe's data section (preset name or YAML path)",
    )
    fields = _MIX + (_SEQ if seq_len else ()) + (_BATCH if batch else ()) + (_ORDER if order else ())
    add_fields(g, StreamSpec, only=fields + (_WORK if work_dir else ()), unset=True)


def add_token_id_options(p: argparse.ArgumentParser) -> None:
    """`--eos-token-id` and `--pad-token-id`: the stream's special tokens (default dolma2's, or the
    recipe's with --config)."""
    add_fields(p, StreamSpec, only=_IDS, unset=True)


def stream_from_args(args: argparse.Namespace, *, required: tuple[str, ...] = ("mix",)) -> StreamSpec:
    """The stream the options describe: the recipe's data section (with `--config`) or the defaults,
        overridden by every flag given. `required` fields must come from a flag or the recipe. A stream that
    names the demo mix finds it prepared."""
    given = values_from_args(args, StreamSpec, only=_FLAGS, given_only=True)
    if getattr(args, "config", None):
        base = recipe_section(args.config, "data", StreamSpec)
    else:
        base = StreamSpec()
        missing = [flag_of(StreamSpec, k) for k in required if k not in given]
        if missing:
            raise OlmaxError(
                f"{', '.join(missing)} required (or --config RECIPE, whose data section gives "
                f"{'them' if len(missing) > 1 else 'it'})"
            )
    spec = base.replace(**given)
    prepare_named_demo_mix(spec)
    return spec


def prepare_named_demo_mix(spec: StreamSpec) -> None:
    """When the stream names the demo mix (`mix: demo`, the tiny recipe's), prepare it where the loader
    finds it (olmax.data.prepare.demo_mix; only then is the preparation pipeline imported). Every command
    that reads a stream calls this before loading, so loading itself never writes shards."""
    if spec.mix == DEMO_MIX:
        from olmax.data.prepare.demo_mix import ensure_stream_mix

        ensure_stream_mix(spec)
