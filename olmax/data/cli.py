"""`olmax data ...`: prepare shards and inspect them (prepare_cli), plan and dump loader batches (loader_cli)."""

from __future__ import annotations

import argparse
import importlib


def register(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="prepare token shards, inspect them, plan and dump loader batches")
    data_sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    for name in ("olmax.data.prepare_cli", "olmax.data.loader_cli"):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue
            raise
        module.add_commands(data_sub)
