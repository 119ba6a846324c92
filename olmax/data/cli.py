"""`olmax data ...`: prepare shards and inspect them (prepare_cli), plan and dump loader batches (loader_cli)."""

from __future__ import annotations

import argparse

from olmax.cli import import_optional


def register(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="prepare token shards, inspect them, plan and dump loader batches")
    data_sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    for name in ("olmax.data.prepare_cli", "olmax.data.loader_cli"):
        module = import_optional(name)
        if module is not None:
            module.add_commands(data_sub)
