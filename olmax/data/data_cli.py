"""`olmax data ...` (the data area's front end): prepare shards (olmax.data.prepare.prepare_cli), inspect them (inspect_cli), plan and dump loader
batches (loader_cli), the documents of a step and the steps of a document (trace_cli)."""

from __future__ import annotations

import argparse

from olmax.data import inspect_cli, loader_cli, trace_cli
from olmax.data.prepare import prepare_cli


def register(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="prepare token shards, inspect them, plan and dump loader batches")
    data_sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    for module in (prepare_cli, inspect_cli, loader_cli, trace_cli):
        module.add_commands(data_sub)
