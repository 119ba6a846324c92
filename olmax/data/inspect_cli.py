"""`olmax data inspect`: argument parsing only; the work is in olmax.data.inspect."""

from __future__ import annotations

import argparse


def add_commands(data_sub: argparse._SubParsersAction) -> None:
    i = data_sub.add_parser(
        "inspect",
        help="token/doc counts of a shard, a folder or a mix; decode a document",
        description="Print token and document counts of a shard (.npy), a prepare output "
        "folder or a mix file; with --doc ID, decode that document.",
    )
    i.add_argument("path", help="a .npy shard, a prepare output folder, or a mix .txt file")
    i.add_argument("--doc", help="decode the document with this id (searched in the sidecars)")
    i.add_argument("--tokenizer", default="dolma2", help="tokenizer for --doc (default dolma2)")
    i.add_argument(
        "--max-chars", type=int, default=2000, help="print at most this many characters of the document"
    )
    i.add_argument(
        "--verify",
        action="store_true",
        help="first check every shard of a prepare output folder against manifest.json (tokens, xxh64)",
    )
    i.set_defaults(func=_inspect)


def _inspect(args: argparse.Namespace) -> int:
    from olmax.data.inspect import inspect_path

    return inspect_path(
        args.path, doc_id=args.doc, tokenizer=args.tokenizer, max_chars=args.max_chars, verify=args.verify
    )
