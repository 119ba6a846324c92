"""`olmax audit ...` (the audit area's front end): loader plan audit, train↔eval leak audit, emitted-stream audit;
parsing only."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from olmax.atomic import locked_out
from olmax.audit.audit_config import DedupConfig, LeakConfig, LoaderAuditConfig, StreamConfig
from olmax.audit.checks import EXIT
from olmax.beam_cli import add_runner_options, beam_options
from olmax.cli_fields import add_fields, values_from_args
from olmax.data.stream_cli import add_stream_options, stream_from_args
from olmax.data.trace_cli import add_horizon_options
from olmax.dedup.gates_cli import add_gate_options
from olmax.dedup.params import MinHashParams, NearSettings
from olmax.evalsets.evalsets_cli import add_eval_option


def _out(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="report JSON (written atomically; a path or an fsspec URL)")


def register(sub: argparse._SubParsersAction) -> None:
    audit = sub.add_parser("audit", help="audit data before launch: loader plan, repeats, train↔eval leaks")
    asub = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND", required=True)

    lo = asub.add_parser(
        "loader",
        help="replay a run's data plan and check repeats, rank overlap, shares, duplicates",
        description="Replays the exact batches olmax's loader would emit (no training) and checks that "
        "every instance is seen as often as planned, no two ranks share a row, source shares match the "
        "mix, and no content repeats from another file/position beyond the mix's planned repetition. "
        "Exits 1 when a gated check fails, 3 (inconclusive) when none fails but one could not run "
        "(instances_missing needs a whole epoch replayed).",
    )
    add_stream_options(lo)
    add_fields(lo, LoaderAuditConfig, groups={"near": add_near_options(lo)})
    _out(lo)
    add_runner_options(lo)
    lo.set_defaults(func=locked_out(_loader, "olmax audit loader"))

    lk = asub.add_parser(
        "leaks",
        help="find held-out eval items inside the training data",
        description="Retrieve, then verify: every n-word window of the training text that equals an eval "
        "item's window (exact hashed lookup) makes the (item, document) pair a candidate; each candidate is "
        "verified by aligning the item's words against the document's words around the matches (inserted, "
        "dropped and substituted words tolerated). An item is contaminated when one document aligns at least "
        "--threshold of its words; the report lists every such document (source, file, doc id, token span, "
        "score). Exits 1 when any item of a gated set is contaminated, 3 (inconclusive) when none is but "
        "a gated set has no item long enough to decide.",
    )
    add_stream_options(lk, seq_len=False, batch=False, order=False, work_dir=False)
    add_eval_option(lk, "an eval set")
    add_fields(lk, LeakConfig)
    add_runner_options(lk)
    _out(lk)
    lk.set_defaults(func=locked_out(_leaks, "olmax audit leaks"))

    ex = asub.add_parser(
        "exposure",
        help="each contaminated eval item joined with the training steps that served it",
        description="For every contaminated item of an `olmax audit leaks` report, every document that "
        "carries it and every global step (1-based, the trainer's) whose batch holds a token of the matched "
        "span: before launch from the plan, or for a run (--run DIR: its config's stream, up to its last "
        "logged step). Each epoch's inverse order is built once beside its order file.",
    )
    add_stream_options(ex)
    ex.add_argument("--leaks", required=True, help="the `olmax audit leaks` report (JSON)")
    add_horizon_options(ex).add_argument(
        "--run", help="a run folder of `olmax train`: its stream (flags override) and last step"
    )
    _out(ex)
    ex.set_defaults(func=locked_out(_exposure, "olmax audit exposure"))

    dd = asub.add_parser(
        "dedup",
        help="exact duplicate documents and repeated spans (>= 50 tokens) in a mix",
        description="Hashes every document and every span-token window inside a document of the "
        "mix's distinct files; reports duplicates within and across sources. Exits 1 above the limits, 3 "
        "(inconclusive) when no document is long enough to compare (--min-doc-tokens).",
    )
    add_stream_options(dd, seq_len=False, batch=False, order=False)
    near = add_near_options(dd)
    add_gate_options(near, "tokens (with --near)")
    add_fields(dd, DedupConfig, groups={"near": near})
    add_runner_options(dd)
    _out(dd)
    dd.set_defaults(func=locked_out(_dedup, "olmax audit dedup"))

    st = asub.add_parser(
        "stream",
        help="audit the token rows a loader actually emitted (any loader)",
        description="Matches every emitted row (.npy (steps, rows, L) per host) to the mix's instances "
        "by content hash and reports repeats, never-seen instances, foreign rows, cross-host overlap "
        "and source shares. Exits 1 on an unplanned repeat, a foreign row or a cross-host overlap "
        "beyond the copies the mix plans.",
    )
    add_stream_options(st, batch=False, order=False)
    add_fields(st, StreamConfig)
    _out(st)
    st.set_defaults(func=locked_out(_stream, "olmax audit stream"))


def add_near_options(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """`--near` and the MinHash settings (`MinHashParams`); returns the group, where the command's own
    near-duplicate gate goes too."""
    g = p.add_argument_group(
        "near-duplicates (prepare's MinHash over word n-grams of the decoded text; see docs/dedup.md)"
    )
    g.add_argument("--near", action="store_true", help="also find near-duplicate documents")
    g.add_argument(
        "--tokenizer",
        help="tokenizer.json (or dolma2) the shards were prepared with, to decode them for --near "
        "(default: the one manifest.json beside the mix names)",
    )
    add_fields(g, MinHashParams, prefix="minhash_")
    return g


def near_params(args: argparse.Namespace, mix: str | None) -> NearSettings | None:
    """--near's settings (checked; the tokenizer resolved to a file), or None without --near."""
    if not args.near:
        return None
    params = MinHashParams(**values_from_args(args, MinHashParams, prefix="minhash_"))
    params.check()
    from olmax.audit.near import near_tokenizer

    return NearSettings(params, near_tokenizer(mix, args.tokenizer))


def _check_out(out: str) -> None:
    """A report URL's bucket must exist before the audit runs (not found out when it is written)."""
    from olmax import storage

    storage.require_bucket(out)


def _finish(report: dict, out: str) -> int:
    from olmax import storage
    from olmax.jsonio import dumps, write_json

    if storage.local_path(out) is None:
        storage.write_bytes(out, (dumps(report, 2) + "\n").encode("utf-8"))
    else:
        write_json(storage.local_path(out), report)
    print("\n".join(report["summary"]))
    print(f"report: {out}")
    return EXIT[report.get("verdict") or ("pass" if report["ok"] else "fail")]


def _loader(args: argparse.Namespace) -> int:
    from olmax.audit.loader_audit import audit_loader

    _check_out(args.out)
    stream = stream_from_args(args, required=("mix", "seq_len", "global_batch_size"))
    cfg = LoaderAuditConfig(
        stream=stream, near=near_params(args, stream.mix), **values_from_args(args, LoaderAuditConfig)
    )
    return _finish(audit_loader(cfg, progress=True, beam_options=beam_options(args)), args.out)


def _leaks(args: argparse.Namespace) -> int:
    from olmax.audit.leaks.run import audit_leaks

    _check_out(args.out)
    cfg = LeakConfig(
        stream=stream_from_args(args), evals=tuple(args.eval), **values_from_args(args, LeakConfig)
    )
    report = audit_leaks(cfg, beam_options=beam_options(args))
    rc = _finish(report, args.out)
    lines = leak_lines(report)
    if lines:
        print("\n".join(lines))
    return rc


# the fields of a contaminated item printed on its own lines; any other field (which part of the item
# leaked and how, when the report says it) is printed as it is
ITEM_FIELDS = {"eval", "id", "kind", "item_words", "opening", "score", "n_documents", "documents", "same_as"}


def short_value(v: object, most: int = 160) -> str:
    text = v if isinstance(v, str) else json.dumps(v, default=str)
    return text if len(text) <= most else text[: most - 3] + "..."


def leak_lines(report: dict, most: int = 20) -> list[str]:
    """The contaminated items of a leak report for a person: set, id, the item's opening words, kind,
    documents and where the first one holds it, and the leaked part when the report says it; then the
    paraphrase candidates (reported apart, not counted); the first `most` of each, the rest in the JSON."""
    items = report.get("contaminated") or []
    paras = report.get("paraphrase_candidates") or []
    if not items and not paras:
        return []
    out = []
    if items:
        out.append(f"contaminated items ({len(items)}):")
    for c in items[:most]:
        out += _entry_lines(c, f"{c.get('kind', '?')} match")
        for key in sorted(set(c) - ITEM_FIELDS):
            if c[key] not in (None, "", [], {}):
                out.append(f"    {key.replace('_', ' ')}: {short_value(c[key])}")
    if len(items) > most:
        out.append(f"  ... and {len(items) - most} more in the report")
    if paras:
        out.append(f"paraphrase candidates ({len(paras)}; reported apart, not counted as contaminated):")
    for c in paras[:most]:
        out += _entry_lines(c, "paraphrase candidate")
        out.append(f"    signature: {short_value(c.get('signature', {}))}")
    if len(paras) > most:
        out.append(f"  ... and {len(paras) - most} more in the report")
    return out


def _entry_lines(c: dict, what: str) -> list[str]:
    """An item's two lines: set, id and first words; what matched, its score and the first document."""
    first = (c.get("documents") or [{}])[0]
    where = (
        f"{first.get('source', '?')} {Path(str(first.get('file', '?'))).name} doc {first.get('doc', '?')}, file "
        f"tokens {first.get('token_start', '?')}-{first.get('token_end', '?')}"
    )
    text = c.get("opening")
    return [
        f"  {c['eval']} {c['id']}: {text + ' ...' if text else '(text not found)'}"
        + (f"  [same as {c['same_as']['eval']} {c['same_as']['id']}]" if c.get("same_as") else ""),
        f"    {what}, score {c.get('score', 0):.2f}, in {c.get('n_documents', 0)} document(s); first: {where}",
    ]


def _exposure(args: argparse.Namespace) -> int:
    from olmax.audit.item_exposure import audit_exposure
    from olmax.data.loader import open_loader, resolve_mix
    from olmax.jsonio import read_json, write_json

    until = args.until_step
    if args.run:  # the run's own recipe (RUN/config.yaml) and the last step it trained
        from olmax.metrics import train_records
        from olmax.recipe import run_config_path

        args = argparse.Namespace(**{**vars(args), "config": run_config_path(args.run)})
        steps = train_records(args.run)
        until = max(steps) if steps else 0
    stream = stream_from_args(args, required=("mix", "seq_len", "global_batch_size"))
    stream = stream.replace(mix=resolve_mix(stream))
    loader = open_loader(stream, process_index=0, process_count=1)
    report = audit_exposure(
        read_json(args.leaks, "an `olmax audit leaks` report"), loader, epochs=args.epochs, until_step=until
    )
    write_json(args.out, report, indent=1)
    for name, s in report["sets"].items():
        print(
            f"{name}: {s['contaminated']} contaminated item(s), {s['exposed']} served by step "
            f"{report['until_step']} ({s['exposures']} servings)"
        )
    print(f"report: {args.out}")
    return 0


def _dedup(args: argparse.Namespace) -> int:
    from olmax.audit.dedup import audit_dedup

    _check_out(args.out)
    stream = stream_from_args(args)
    cfg = DedupConfig(
        stream=stream,
        near=near_params(args, stream.mix),
        max_removed_frac=tuple(args.max_removed_frac) if args.max_removed_frac else None,
        max_cluster_size=args.max_cluster_size,
        **values_from_args(args, DedupConfig),
    )
    return _finish(audit_dedup(cfg, beam_options=beam_options(args)), args.out)


def _stream(args: argparse.Namespace) -> int:
    from olmax.audit.emitted import audit_stream

    _check_out(args.out)
    stream = stream_from_args(args, required=("mix", "seq_len"))
    return _finish(
        audit_stream(StreamConfig(stream=stream, **values_from_args(args, StreamConfig))), args.out
    )
