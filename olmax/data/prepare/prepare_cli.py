"""`olmax data prepare` (prepare's front end): argument parsing only; the work is in olmax.data.prepare.entry (the entry point)."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys

from olmax.beam_cli import add_runner_options, beam_options
from olmax.cli_fields import add_fields, values_from_args
from olmax.dedup.gates_cli import add_gate_options
from olmax.dedup.params import MinHashParams

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_size(text: str) -> int:
    """'1GB', '256MiB', '4e8' → bytes."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 1GB, 256MiB, 4e8)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def add_commands(data_sub: argparse._SubParsersAction) -> None:
    p = data_sub.add_parser(
        "prepare",
        help="tokenize raw documents into OLMo-format token shards + mix.txt",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Tokenize Dolma-format documents (.jsonl, .jsonl.gz, .jsonl.zst with id/text fields) or HF "
        "datasets (arrow/parquet) into raw uint32 shards, each document followed by EOS, with a\n"
        "start,end,id,src,loc .csv.gz sidecar per shard, DIR/manifest.json and DIR/mix.txt (OLMo-core's\n"
        "label,path format). Deterministic whatever --workers is; rerun the same command to resume.\n"
        "The summary (totals, then one line per source) goes to stderr; stdout gets only DIR/mix.txt.",
        epilog="examples:\n"
        "  olmax data prepare --tokenizer dolma2 --out shards/ code='raw/code/*.jsonl.gz' web=raw/web/\n"
        "  olmax data prepare --tokenizer dolma2 --out shards/ --mix-spec mix.yaml --workers 2\n"
        "  olmax data prepare --tokenizer dolma2 --out gs://B/shards --mix-spec gs://B/mix.yaml --runner beam \\\n"
        '      --pipeline-options="--runner=DataflowRunner --project=P --region=us-central1 '
        '--temp_location=gs://B/tmp"',
    )
    p.add_argument(
        "sources",
        nargs="*",
        metavar="LABEL=PATH_OR_GLOB",
        help="a labelled source: a file, a glob (quote it) or a folder, local or an fsspec URL "
        "(file://, gs://, s3://); repeat for several sources",
    )
    p.add_argument(
        "--tokenizer",
        required=True,
        help="a tokenizer.json path, a folder holding one, or `dolma2` (resolved offline; see "
        "`olmax assets fetch`)",
    )
    p.add_argument(
        "--out",
        required=True,
        help="output folder or fsspec URL (must be empty, or a previous run of this command)",
    )
    p.add_argument("--workers", type=int, default=1, help="tokenizer threads (output does not depend on it)")
    p.add_argument(
        "--mix-spec",
        help="YAML mix spec: sources with paths and ratio/target_tokens/max_repetition "
        "(see olmax/data/prepare/mixspec.py); replaces or adds to LABEL=PATH arguments",
    )
    p.add_argument(
        "--shard-size",
        type=parse_size,
        default=parse_size("1GB"),
        help="target bytes of tokens per shard (default 1GB, as dolma tokens writes)",
    )
    p.add_argument("--text-field", default="text", help="JSON field / table column holding the text")
    p.add_argument("--id-field", default="id", help="JSON field / table column holding the document id")
    p.add_argument(
        "--format",
        choices=["npy", "arrayrecord"],
        default="npy",
        help="`arrayrecord` also writes one ArrayRecord record per document beside each shard",
    )
    p.add_argument(
        "--engine",
        choices=["auto", "gigatoken", "tiktoken", "tokenizers"],
        default="auto",
        help="tokenizer engine: auto takes the fastest one whose ids equal `tokenizers`' on a probe set "
        "for this tokenizer.json (gigatoken, then tiktoken, then tokenizers); naming one forces it",
    )
    p.add_argument(
        "--dolma-compat",
        action="store_true",
        help="reproduce `dolma tokens` exactly: tokenize text.strip(), skip documents empty after "
        "stripping, no second EOS after a text ending in EOS (default: tokens(text) + EOS)",
    )
    p.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip malformed JSON lines (counted in the manifest) instead of failing",
    )
    p.add_argument("--overwrite", action="store_true", help="replace the output folder's contents")
    d = p.add_argument_group("deduplication (Dolma 3's stages; see docs/dedup.md)")
    d.add_argument(
        "--dedup",
        metavar="STAGES",
        help="comma list of exact, minhash, substring (applied in that order); removed documents are "
        "listed in OUT/removed.jsonl (default: no dedup)",
    )
    add_fields(d, MinHashParams, prefix="minhash_")
    d.add_argument(
        "--substring-min-bytes",
        type=int,
        default=500,
        help="shortest repeated byte span the substring stage removes (default 500)",
    )
    d.add_argument(
        "--substring-partition-bytes",
        type=parse_size,
        default=parse_size("128MiB"),
        help="the substring stage finds repeats within partitions of consecutive documents of this much "
        "text (memory ~33 bytes per byte; default 128MiB)",
    )
    add_gate_options(d, "text bytes")
    d.add_argument(
        "--dry-run",
        action="store_true",
        help="with --dedup: print each stage's memory, disk and time, estimated from the inputs' sizes "
        "and measured per-byte rates, and the partitioning; write nothing",
    )
    d.add_argument(
        "--max-memory",
        type=parse_size,
        metavar="SIZE",
        help="with --dedup: the memory the run may use (e.g. 64GiB; default: this machine's memory): the "
        "MinHash tables move to scratch disk in the output folder once they pass a third of it (the same "
        "decisions), and a run whose estimated peak still exceeds it is refused before anything is written",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_runner_options(p)
    p.set_defaults(func=_prepare)


def _prepare(args: argparse.Namespace) -> int:
    from olmax.data.prepare.entry import prepare
    from olmax.data.prepare.mixspec import load_mix_spec
    from olmax.data.prepare.prepare_config import PrepareConfig, SourceSpec
    from olmax.errors import OlmaxError

    sources, total = [], None
    if args.mix_spec:
        sources, total = load_mix_spec(args.mix_spec)
    for item in args.sources:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise OlmaxError(f"source {item!r} must be LABEL=PATH_OR_GLOB")
        sources.append(SourceSpec(label, (path,)))
    if args.workers < 1:
        raise OlmaxError(f"--workers must be at least 1; got {args.workers}")
    cfg = PrepareConfig(
        tokenizer=args.tokenizer,
        out=args.out,
        sources=tuple(sources),
        workers=args.workers,
        shard_bytes=args.shard_size,
        text_field=args.text_field,
        id_field=args.id_field,
        skip_bad_lines=args.skip_bad_lines,
        overwrite=args.overwrite,
        arrayrecord=args.format == "arrayrecord",
        total_tokens=total,
        engine=args.engine,
        progress=not args.no_progress,
        dolma_compat=args.dolma_compat,
        dedup=_dedup_settings(args),
    )
    _check_gates(args, [s.label for s in cfg.sources])
    if cfg.dedup is not None:
        from olmax.data.prepare.dedup_stages_estimate import check_memory, estimate, lines, machine_memory

        cfg.dedup.check()
        limit = args.max_memory or machine_memory()
        cfg = dataclasses.replace(cfg, max_memory=limit)  # the MinHash tables go to disk past a third
        est = estimate(cfg)
        if args.dry_run:
            print("\n".join(lines(est, limit)))
            return 0 if est.memory <= limit else 1
        check_memory(est, limit)
    elif args.dry_run or args.max_memory:
        from olmax.errors import OlmaxError

        raise OlmaxError("--dry-run and --max-memory estimate the dedup stages: add --dedup STAGES")
    manifest = prepare(cfg, beam_options=beam_options(args))
    # the human summary follows the headline on stderr, in order; stdout holds only the mix path
    for label, s in manifest["sources"].items():
        plan = manifest["mix"]["plan"][label]
        print(
            f"{label}: {s['docs']:,} docs, {s['tokens']:,} tokens in {len(s['shards'])} shard(s); "
            f"planned {plan['planned_tokens']:,} tokens ({plan['repetition']}×, share {plan['share']:.3f}); "
            f"skipped {s['skipped']['empty_docs']} empty, {s['skipped']['bad_lines']} bad lines",
            file=sys.stderr,
        )
    ok = True
    if "dedup" in manifest:
        ok = _dedup_summary(manifest["dedup"], args)
    print(f"{args.out}/mix.txt")
    return 0 if ok else 1


def _dedup_summary(dd: dict, args: argparse.Namespace) -> bool:
    """Print what each stage did, the biggest clusters and the gates; False when a gate fails."""
    from olmax.dedup.gates import cluster_gate, cluster_lines, parse_removed_frac, removed_frac_gates

    parts = []
    for stage, o in dd["outcomes"].items():
        parts.append(f"{stage} " + ", ".join(f"{what} {n:,}" for what, n in o.items()))
    print(f"dedup (documents): {'; '.join(parts)} (see {args.out}/removed.jsonl)", file=sys.stderr)
    if dd["clusters"]:
        print("dedup: biggest clusters (first lines, the kept document first):", file=sys.stderr)
        print("\n".join(cluster_lines(dd["clusters"][:5])), file=sys.stderr)
    gates = removed_frac_gates(dd["sources"], parse_removed_frac(args.max_removed_frac), "text_bytes")
    gates += cluster_gate(dd["largest_cluster"], args.max_cluster_size)
    for g in gates:
        print(
            f"  {'PASS' if g.ok else 'FAIL'} {g.name}: {g.value} (limit {g.threshold}) — {g.detail}",
            file=sys.stderr,
        )
    bad = [g.name for g in gates if not g.ok]
    if bad:
        print(
            f"dedup: gate failed: {', '.join(bad)} (the output is complete; see {args.out}/removed.jsonl)",
            file=sys.stderr,
        )
    return not bad


def _check_gates(args: argparse.Namespace, labels: list[str]) -> None:
    """Bad gate options fail before anything is read or written."""
    from olmax.dedup.gates import cluster_gate, parse_removed_frac, removed_frac_gates
    from olmax.errors import OlmaxError

    if args.dedup is None and (args.max_removed_frac or args.max_cluster_size is not None):
        raise OlmaxError(
            "--max-removed-frac and --max-cluster-size gate the dedup stages: add --dedup STAGES"
        )
    empty = {x: {"documents": 0, "text_bytes": 0, "stages": {}} for x in labels}
    removed_frac_gates(empty, parse_removed_frac(args.max_removed_frac), "text_bytes")
    cluster_gate(1, args.max_cluster_size)


def _dedup_settings(args: argparse.Namespace):
    from olmax.data.prepare.prepare_config import DedupSettings, parse_stages

    if args.dedup is None:
        return None
    return DedupSettings(
        stages=parse_stages(args.dedup),
        minhash=MinHashParams(**values_from_args(args, MinHashParams, prefix="minhash_")),
        substring_min_bytes=args.substring_min_bytes,
        substring_partition_bytes=args.substring_partition_bytes,
    )
