"""The `olmax` command: parse arguments and hand off to the library; no logic lives here.

Each area registers its own subcommands from `olmax/<area>/cli.py` through `register(subparsers)`.
Those modules import only argparse at module level, so `olmax --help` stays fast; heavy imports
(jax, tokenizers, ...) happen inside the command functions.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from olmax.errors import OlmaxError

# Areas whose `cli.register` adds subcommands; a missing module is skipped so areas can land one by one.
_AREAS = ("olmax.assets_cli", "olmax.data.cli", "olmax.audit.cli", "olmax.model.cli",
          "olmax.train.cli", "olmax.evals.cli", "olmax.demo")


def import_optional(name: str):
    """Import module `name`, or return None when that module itself does not exist (an area not landed)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name == name:
            return None
        raise


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="olmax",
        description="OLMo 3 pretraining in JAX, built around its data: prepare shards, load them in "
        "OLMo-core's order, audit the loader before launch, train, and evaluate held-out loss.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _AREAS:
        module = import_optional(name)
        if module is not None:
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except OlmaxError as e:
        print(f"olmax: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("olmax: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
