"""`olmax model ...` (the model area's front end): convert checkpoints HF <-> olmax, check logit parity, print a
preset's size and FLOPs.

A training run is read by the train area, above this one: the `olmax` command hands its reader in
(`register(sub, convert_run=...)`), so this front end imports nothing above the model.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

# converts a training run (or one of its checkpoint steps) `args.src` into `out`; False when it is not one
ConvertRun = Callable[[argparse.Namespace, str], bool]


def register(sub: argparse._SubParsersAction, convert_run: ConvertRun | None = None) -> None:
    """Add `olmax model`; `convert_run` reads a training run for `model convert`."""
    model = sub.add_parser("model", help="OLMo 3 model: convert HF <-> olmax, logit parity, preset info")
    model_sub = model.add_subparsers(dest="model_command", metavar="SUBCOMMAND", required=True)

    convert = model_sub.add_parser(
        "convert",
        help="convert a checkpoint: a training run or HF -> HF, HF or a run -> olmax",
        description="--to hf SRC OUT: SRC is a training run folder (its newest complete checkpoint), one of "
        "its RUN/checkpoints/STEP folders, an olmax folder or an HF directory (a re-export, e.g. to change "
        "--dtype). OUT is an HF Olmo3ForCausalLM directory that transformers loads offline (config.json, "
        "safetensors, generation_config.json and tokenizer files); from a run it also holds olmax_export.json "
        "(source run, step, data fingerprint, seed, tokens seen), repeated in the safetensors metadata. The "
        "tokenizer is the run's (the manifest.json beside its prepared mix, else dolma2 for a dolma2-sized "
        "vocabulary) unless --tokenizer is given. --to olmax SRC OUT: model_config.json + an Orbax checkpoint "
        "of the params, from an HF directory or a run; `olmax train` starts a new run from it with "
        "train.init_from=OUT (params only; the optimizer starts fresh). OUT must not exist (or be empty); it "
        "appears only when complete.",
    )
    convert.add_argument(
        "src", help="source: run folder, RUN/checkpoints/STEP, HF or olmax checkpoint directory"
    )
    convert.add_argument(
        "out", help="output directory (must not exist yet) or an s3:// / gs:// URL (must be empty)"
    )
    convert.add_argument("--to", choices=("hf", "olmax"), required=True, help="output format")
    convert.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default=None,
        help="HF output weight dtype (default: the dtype the weights came from; float32 from a run)",
    )
    convert.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer.json (or dolma2) to ship with an HF "
        "export (default: a run's own; an HF source's tokenizer files)",
    )
    convert.set_defaults(func=functools.partial(_convert, convert_run=convert_run))

    parity = model_sub.add_parser(
        "parity",
        help="compare logits of transformers and olmax on the same real text",
        description="Loads the HF checkpoint in transformers (torch) and in olmax, runs both on one "
        "sequence and prints mean/max KL(HF||olmax), top-1 agreement and max |dlogit|. Exits 1 past the "
        "thresholds (float32: mean KL <= 1e-10, max |dlogit| <= 1e-4 and 100% top-1; bfloat16, when either "
        "side runs in it: mean KL <= 1.5e-3 and top-1 >= 98.75%, or no worse than transformers' own bf16 on "
        "both, which it also prints). Text defaults to Python standard library source; tokens come from the checkpoint's "
        "tokenizer.json, else from the text's UTF-8 bytes.",
    )
    parity.add_argument("--hf", required=True, metavar="DIR", help="HF Olmo3ForCausalLM checkpoint directory")
    parity.add_argument("--seq-len", type=int, default=None, help="tokens (default 3 x sliding_window)")
    parity.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="olmax compute dtype (params stay fp32)",
    )
    parity.add_argument(
        "--hf-dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="dtype transformers runs the reference in (default float32)",
    )
    parity.add_argument("--text", default=None, help="UTF-8 text file to tokenize (default: stdlib source)")
    parity.add_argument("--out", default=None, help="also write the report as JSON here")
    parity.set_defaults(func=_parity)

    info = model_sub.add_parser(
        "info",
        help="parameters and forward FLOPs/token of a preset",
        description="Print a preset's shape, parameter count and exact forward "
        "FLOPs per token (sliding windows counted as the keys attended).",
    )
    info.add_argument("preset", help="olmo3_7b, olmo3_32b, olmo3_7b_hd256 or tiny")
    info.add_argument("--seq-len", type=int, default=8192, help="sequence length for FLOPs (default 8192)")
    info.set_defaults(func=_info)


def _convert(args: argparse.Namespace, convert_run: ConvertRun | None = None) -> int:
    from olmax import storage

    # OUT may be an object-store URL: built in a local staging folder, uploaded when complete with
    # config.json (what loaders open first) last; a non-empty destination is refused before any work
    with storage.staged_output(args.out, last=("config.json", "model_config.json")) as out:
        if convert_run is not None and convert_run(args, out):
            return 0
        return _convert_into(args, out)


def _convert_into(args: argparse.Namespace, out: str) -> int:
    from olmax.errors import OlmaxError
    from olmax.model.convert import from_hf, load_olmax, save_olmax, to_hf

    src = Path(args.src)
    if (src / "model_config.json").is_file():
        model, tokenizer_from = load_olmax(src), None
    elif (src / "config.json").is_file():
        model, tokenizer_from = from_hf(src), src
    else:
        raise OlmaxError(
            f"{src}: not a training run folder (config.yaml + checkpoints/), a RUN/checkpoints/STEP "
            "folder, an HF checkpoint (config.json) or an olmax one (model_config.json)"
        )
    if args.to == "hf":
        from olmax.assets import tokenizer_path

        to_hf(
            model,
            out,
            dtype=args.dtype,
            tokenizer_from=tokenizer_from,
            tokenizer_json=tokenizer_path(args.tokenizer) if args.tokenizer else None,
        )
    else:
        save_olmax(model, out)
    print(f"wrote {args.to} checkpoint {args.out}")
    return 0


def _parity(args: argparse.Namespace) -> int:
    from olmax.model.parity import print_report, run_parity, write_report

    report = run_parity(args.hf, args.seq_len, args.dtype, args.text, args.hf_dtype)
    print_report(report)
    if args.out:
        write_report(report, args.out)
    return 0 if report["passed"] else 1


def _info(args: argparse.Namespace) -> int:
    from olmax.errors import OlmaxError
    from olmax.model.flops import forward_flops
    from olmax.model.model_config import PRESETS
    from olmax.model.transformer import count_params

    if args.preset not in PRESETS:
        raise OlmaxError(f"unknown preset {args.preset!r}; choose one of {', '.join(PRESETS)}")
    cfg = PRESETS[args.preset]()
    fl = forward_flops(cfg, args.seq_len)
    n_full = sum(t == "full_attention" for t in cfg.layer_types)
    print(
        f"{args.preset}: d_model {cfg.d_model}, {cfg.n_layers} layers ({n_full} full, "
        f"{cfg.n_layers - n_full} sliding window {cfg.sliding_window}), {cfg.n_heads} heads x {cfg.head_dim}, "
        f"{cfg.n_kv_heads} KV heads, MLP {cfg.mlp_hidden}, vocab {cfg.vocab_size} (padded {cfg.padded_vocab})"
    )
    print(f"params: {count_params(cfg):,} ({count_params(cfg, padded=True):,} with vocab padding)")
    print(
        f"forward FLOPs/token at seq {args.seq_len}: {fl.per_token:,.0f} ({fl.per_token / 1e9:.2f} GFLOP; "
        f"attention {fl.attention / fl.total:.1%}, LM head {fl.lm_head / fl.total:.1%}); "
        f"training ~3x = {3 * fl.per_token / 1e9:.2f} GFLOP/token"
    )
    sys.stdout.flush()
    return 0
