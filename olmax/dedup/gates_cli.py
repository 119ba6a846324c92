"""The dedup gates' options (olmax/dedup/gates.py), registered once for `data prepare --dedup` and
`audit dedup`."""

from __future__ import annotations

import argparse


def add_gate_options(g: argparse._ArgumentGroup, unit: str) -> None:
    """`--max-removed-frac [SOURCE=]X` (repeatable) and `--max-cluster-size N` (`unit`: what the text share counts)."""
    g.add_argument(
        "--max-removed-frac",
        action="append",
        metavar="[SOURCE=]X",
        help="gate: the share of a source's documents, and of its " + unit + ", that one stage may remove "
        "(X for every source, SOURCE=X for one; repeatable; default: no gate); a failing gate exits 1 after the report",
    )
    g.add_argument(
        "--max-cluster-size",
        type=int,
        metavar="N",
        help="gate: documents one cluster may hold (the kept one and those removed in its favour; "
        "default: no gate)",
    )
