"""`olmax data batches` and `olmax data plan`: dump a process's batches, or summarize a mix's epoch."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from olmax.data.tokenfile import DTYPES

if TYPE_CHECKING:
    from olmax.data.index import TokenIndex
    from olmax.data.stream import StreamSpec

_WHERE = (
    "Relative paths in the mix resolve against --base-dir when given, else against the mix "
    "file's own folder; `olmo-core:NAME` reads an official OLMo-core mix (needs --base-dir)."
)


def _add_mix_args(p: argparse.ArgumentParser, *, order: bool) -> None:
    from olmax.data.stream_cli import add_stream_options, add_token_id_options

    add_stream_options(p, order=order, work_dir=order)
    p.add_argument("--dtype", choices=DTYPES, help="token dtype of the files (default: the stream's, uint32)")
    p.add_argument(
        "--allow-short-files",
        action="store_true",
        help="let files shorter than --seq-len contribute no instances (OLMo-core does "
        "this silently) instead of failing",
    )
    p.add_argument(
        "--check-vocab",
        type=int,
        default=0,
        metavar="N",
        help="read N random instances first and fail if a token id is >= --vocab-size",
    )
    p.add_argument("--vocab-size", type=int, default=100278, help="vocabulary size (dolma2: 100278)")
    add_token_id_options(p)


def add_commands(data_sub: argparse._SubParsersAction) -> None:
    """Register `batches` and `plan` under `olmax data`."""
    b = data_sub.add_parser(
        "batches",
        help="write this process's rows of global batches A..A+N-1 to an .npy file",
        description="Write this process's rows of global batches A..A+N-1 as an int32 array of shape "
        "(N, G/P, L). Global batches equal OLMo-core's NumpyFSLDataLoader batches for the "
        "same mix, L, G and seed; process I holds positions I::P of each. Steps past the "
        "end of the epoch continue into the next epoch's permutation. " + _WHERE,
    )
    _add_mix_args(b, order=True)
    b.add_argument("--start-step", type=int, default=0, help="first batch A, within --epoch")
    b.add_argument("--steps", type=int, required=True, help="number of batches N to write")
    b.add_argument("--epoch", type=int, default=1, help="1-based epoch of --start-step (default 1)")
    b.add_argument("--process-count", type=int, default=1, help="data-parallel processes P")
    b.add_argument("--process-index", type=int, default=0, help="this process I, 0 <= I < P")
    b.add_argument("--out", required=True, help="output FILE.npy, written atomically")
    b.add_argument(
        "--doc-lens-out",
        default=None,
        metavar="LENS.npy",
        help="also write each row's document lengths, int32 (N, G/P, D), zero-padded to the most "
        "documents in a row, as OLMo-core's collator pads `doc_lens` (EOS ends a document; a packed "
        "row's padding is its own segment)",
    )
    b.set_defaults(func=run_batches)

    p = data_sub.add_parser(
        "plan",
        help="instances, tokens, steps per epoch, per-source token share and fingerprint",
        description="Summarize one epoch of a mix at sequence length L and global batch G: instances, "
        "tokens, steps per epoch, each source's share of the tokens, and the OLMo-core "
        "data fingerprint a resume is checked against. " + _WHERE,
    )
    _add_mix_args(p, order=False)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--out", help="also write the plan as JSON to this file")
    p.set_defaults(func=run_plan)


def _stream(args: argparse.Namespace) -> StreamSpec:
    from olmax.data.stream_cli import stream_from_args

    return stream_from_args(args, required=("mix", "seq_len", "global_batch_size"))


def _index(args: argparse.Namespace, stream: StreamSpec) -> TokenIndex:
    from olmax.data.loader import stream_index

    index = stream_index(
        stream,
        dtype=args.dtype or stream.dtype,
        allow_short_files=args.allow_short_files,
        vocab_size=args.vocab_size,
        progress=True,
    )
    if args.check_vocab > 0 and not stream.packed:  # a packed index checks every token while packing
        from olmax.data.reader import check_token_ids

        check_token_ids(index, args.vocab_size, samples=args.check_vocab)
    return index


def run_batches(args: argparse.Namespace) -> int:
    import numpy as np

    from olmax.data.loader import open_loader
    from olmax.errors import OlmaxError

    if args.steps < 1:
        raise OlmaxError(f"--steps must be >= 1, got {args.steps}")
    stream = _stream(args)
    loader = open_loader(
        stream,
        _index(args, stream),
        process_index=args.process_index,
        process_count=args.process_count,
    )
    it = loader.iterate(loader.state_at(args.epoch, args.start_step))
    lens: list[np.ndarray] = []
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, f".{os.path.basename(args.out)}.{os.getpid()}.tmp.npy")
    try:
        arr = np.lib.format.open_memmap(
            tmp, mode="w+", dtype=np.int32, shape=(args.steps, loader.rows_per_process, stream.seq_len)
        )
        for n in range(args.steps):
            arr[n] = next(it)["input_ids"]
            if args.doc_lens_out:
                from olmax.data.packing import batch_doc_lens

                lens.append(batch_doc_lens(arr[n], stream.eos_token_id))
        arr.flush()
        del arr
        if args.doc_lens_out:
            from olmax.atomic import temp_path

            out = np.zeros((args.steps, loader.rows_per_process, max(x.shape[1] for x in lens)), np.int32)
            for n, x in enumerate(lens):
                out[n, :, : x.shape[1]] = x
            with temp_path(args.doc_lens_out, suffix=".npy") as t:
                np.save(t, out)
        os.replace(tmp, args.out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    print(
        f"wrote {args.out}: {args.steps} batches x {loader.rows_per_process} rows x {stream.seq_len} "
        f"tokens (epoch {args.epoch}, steps {args.start_step}..{args.start_step + args.steps - 1}, "
        f"process {args.process_index}/{args.process_count})"
    )
    return 0


def plan(index, global_batch_size: int) -> dict:
    """The numbers `olmax data plan` prints, as a dict (`index`: a TokenIndex or a PackedIndex; for packed
    instances `tokens` counts document tokens, padding excluded, and sources count by document)."""
    import numpy as np

    from olmax.data.packing import PackedIndex

    steps = index.num_instances // global_batch_size
    packed = isinstance(index, PackedIndex)
    by_label = index.tokens_by_label()
    total = max(1, index.num_tokens)
    extra = (
        {
            "packed": True,
            "padding_fraction": index.padding_fraction,
            "source_group_size": index.source_group_size,
        }
        if packed
        else {"packed": False}
    )
    return {
        "files": len(index.paths),
        "seq_len": index.seq_len,
        "global_batch_size": global_batch_size,
        "instances": index.num_instances,
        "tokens": index.num_tokens,
        **extra,
        "file_tokens": sum(index.sizes) // np.dtype(index.dtype).itemsize,
        "steps_per_epoch": steps,
        "tokens_per_epoch": steps * global_batch_size * index.seq_len,
        "dropped_instances": index.num_instances - steps * global_batch_size,
        "sources": {k: {"tokens": v, "share": v / total} for k, v in by_label.items()},
        "fingerprint": index.fingerprint,
    }


def run_plan(args: argparse.Namespace) -> int:

    stream = _stream(args)
    result = plan(_index(args, stream), stream.global_batch_size)
    if args.out:
        from olmax.jsonio import write_json

        write_json(args.out, result, indent=1)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return 0
    print(f"files            {result['files']:,}")
    print(
        f"instances        {result['instances']:,} x {result['seq_len']:,} tokens "
        + (
            f"(whole documents packed, {100 * result['padding_fraction']:.2f}% padding; file tokens "
            f"{result['file_tokens']:,})"
            if result["packed"]
            else f"(file tokens {result['file_tokens']:,}, tails dropped)"
        )
    )
    print(f"tokens           {result['tokens']:,}")
    print(
        f"steps per epoch  {result['steps_per_epoch']:,} x {result['global_batch_size']:,} sequences "
        f"= {result['tokens_per_epoch']:,} tokens ({result['dropped_instances']:,} instances dropped)"
    )
    print("source shares (of instance tokens):")
    width = max(len(k) for k in result["sources"])
    for name, s in sorted(result["sources"].items(), key=lambda kv: -kv[1]["tokens"]):
        print(f"  {name:<{width}}  {s['tokens']:>16,}  {100 * s['share']:6.2f}%")
    print(f"fingerprint      {result['fingerprint']}")
    return 0
