"""`olmax data which` and `olmax data where`: the documents of a step, and the steps of a document."""

from __future__ import annotations

import argparse
import json
import sys
import time

_STEPS = (
    "Step N is the trainer's global step (1-based, across epochs): it consumed global batch N - 1, "
    "batch (N - 1) mod B of epoch (N - 1) div B + 1, B = instances // G. The answer is the same for any "
    "process count."
)


def add_horizon_options(p: argparse.ArgumentParser) -> argparse._MutuallyExclusiveGroup:
    """`--epochs E | --until-step N`: how far `data where` and `audit exposure` look; returns the group."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epochs", type=int, help="look through this many epochs (default 1)")
    g.add_argument("--until-step", type=int, help="look through global steps 1..N")
    return g


def add_commands(data_sub: argparse._SubParsersAction) -> None:
    from olmax.data.stream_cli import add_stream_options

    w = data_sub.add_parser(
        "which",
        help="the documents of one global step, row by row",
        description="Name every document segment of global step N: per row, its instance, and the "
        "(source, file, doc_id, start, end) segments it holds, offsets in tokens within the "
        "document. " + _STEPS,
    )
    add_stream_options(w)
    w.add_argument("--step", type=int, required=True, help="global step N (1-based)")
    w.add_argument("--out", help="write the JSON here (atomically); default: print it")
    w.set_defaults(func=run_which)

    h = data_sub.add_parser(
        "where",
        help="the global steps and rows that hold a document or a token range",
        description="Every global step (and row) whose instance holds any token of a document (--doc, "
        "optionally narrowed to --file) or of a file's token range (--file F --tokens A:B). "
        "The first query of an epoch builds that epoch's inverse order beside its order file "
        "(4 bytes per instance); later ones read a few entries of it. " + _STEPS,
    )
    add_stream_options(h)
    h.add_argument("--doc", help="document id (the sidecar's id, or #i: the i-th document of --file)")
    h.add_argument("--file", help="a file of the mix (as listed, or any path to the same file)")
    h.add_argument("--tokens", metavar="A:B", help="token range [A, B) of --file")
    add_horizon_options(h)
    h.add_argument("--out", help="write the JSON here (atomically); default: print it")
    h.set_defaults(func=run_where)


def _loader(args: argparse.Namespace):
    from olmax.data.loader import open_loader
    from olmax.data.stream_cli import stream_from_args

    stream = stream_from_args(args, required=("mix", "seq_len", "global_batch_size"))
    return stream, open_loader(stream, process_index=0, process_count=1)


def _emit(result: dict, out: str | None) -> None:
    if out:
        from olmax.jsonio import write_json

        write_json(out, result, indent=1)
        print(f"wrote {out}")
    else:
        json.dump(result, sys.stdout, indent=1)
        print()


def run_which(args: argparse.Namespace) -> int:
    from olmax.data.documents import DocumentCache
    from olmax.data.trace import which

    t = time.perf_counter()
    stream, loader = _loader(args)
    result = which(loader, args.step, DocumentCache(loader.source.work_dir))
    result["seconds"] = round(time.perf_counter() - t, 3)
    _emit(result, args.out)
    return 0


def doc_span(loader, doc: str, file: str | None):
    """The Span of document `doc` (in `file`, else the first mix file that has it)."""
    from olmax.data.documents import DocumentCache
    from olmax.data.trace import Span, file_key
    from olmax.errors import OlmaxError

    cache = DocumentCache(loader.source.work_dir)
    paths = list(dict.fromkeys(loader.index.paths))
    if file:
        paths = [p for p in paths if file_key(p) == file_key(file)]
        if not paths:
            raise OlmaxError(f"{file}: not a file of the mix")
    for p in paths:
        d = cache.get(p)
        if doc.startswith("#") and d.ids is None and doc[1:].isdigit():
            k = int(doc[1:])
            if k >= len(d.starts):
                continue
        elif d.ids is not None:
            try:
                k = d.ids.index(doc)
            except ValueError:
                continue
        else:
            continue
        return Span(p, int(d.starts[k]), int(d.ends[k]))
    raise OlmaxError(f"document {doc!r}: not found in {file or 'the mix'}")


def run_where(args: argparse.Namespace) -> int:
    from olmax.data.trace import Span, where
    from olmax.errors import OlmaxError

    t = time.perf_counter()
    stream, loader = _loader(args)
    if args.doc:
        if args.tokens:
            raise OlmaxError("give --doc or --tokens, not both")
        span = doc_span(loader, args.doc, args.file)
    elif args.file and args.tokens:
        a, sep, b = args.tokens.partition(":")
        if not (sep and a.isdigit() and b.isdigit() and int(a) < int(b)):
            raise OlmaxError(f"--tokens {args.tokens!r}: expected A:B with 0 <= A < B")
        span = Span(args.file, int(a), int(b))
    else:
        raise OlmaxError("give --doc ID, or --file F --tokens A:B")
    hits = where(loader, [span], epochs=args.epochs, until_step=args.until_step)
    _emit(
        {
            "file": span.file,
            "tokens": [span.start, span.end],
            "doc": args.doc,
            "steps": sorted({h["step"] for h in hits}),
            "hits": hits,
            "seconds": round(time.perf_counter() - t, 3),
        },
        args.out,
    )
    return 0
