"""`olmax --help` and every `olmax X [Y] --help` import no JAX (nor torch): help stays instant and works on a
machine whose accelerator stack is broken. Checked in a fresh interpreter through sys.modules."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = r"""
import argparse, contextlib, io, json, sys
from olmax.cli import build_parser

def commands(parser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from commands(sub, (*prefix, name))

parser = build_parser()
seen = [()]
for argv in [(), *commands(parser)]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    seen.append(argv)
heavy = sorted(m for m in ("jax", "jaxlib", "flax", "torch", "transformers", "grain") if m in sys.modules)
print(json.dumps({"commands": [" ".join(a) for a in seen], "heavy": heavy}))
"""


def test_help_of_every_command_imports_no_jax():
    got = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    out = json.loads(got.stdout.strip().splitlines()[-1])
    assert {"train", "audit loader", "eval watch", "data prepare", "model convert", "demo"} <= set(
        out["commands"]
    )
    assert out["heavy"] == [], out["heavy"]
