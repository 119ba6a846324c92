"""`olmax data ...`: prepare shards, inspect them, and (from loader_cli) plan and dump batches."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="prepare token shards, inspect them, plan and dump loader batches")
    data_sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    try:
        from olmax.data import prepare_cli
    except ModuleNotFoundError:
        prepare_cli = None
    if prepare_cli is not None:
        prepare_cli.add_commands(data_sub)
    try:
        from olmax.data import loader_cli
    except ModuleNotFoundError:
        loader_cli = None
    if loader_cli is not None:
        loader_cli.add_commands(data_sub)
