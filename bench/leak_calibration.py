"""Leak-rule calibration over several seeds: recall and precision of `olmax audit leaks` per kind of plant.

Each seed builds a fresh training mix from the Python standard library (code) and pydoc topics
(prose), plants bundled held-out items into it (as documents of their own, pasted inside longer
documents, items shorter than n words, lightly edited copies), adds hard negatives (a boilerplate
sentence carried by many training documents, followed by an item that was never planted) and
unplanted items, and runs the real `olmax audit leaks` command over it (`olmax.audit.calibrate`, the
one implementation; this script only repeats it and sums the counts). Items whose text overlaps a
planted item's (BoolQ asks several questions about one passage) are kept out of the negatives.

    .venv/bin/python bench/leak_calibration.py [--seeds 0-3] [--per-kind 60] [--ngram 13]

The last line is `leak calibration: recall R, precision P over K seeds`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile


def parse_seeds(text: str) -> list[int]:
    """'0-3' -> [0, 1, 2, 3]; '1,5,7' -> [1, 5, 7]."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return seeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-3", help="e.g. 0-3 or 1,5,7")
    ap.add_argument("--per-kind", type=int, default=60)
    ap.add_argument("--ngram", type=int, default=13)
    ap.add_argument("--boiler-docs", type=int, default=12)
    args = ap.parse_args()

    from olmax.audit.calibrate import run

    totals: dict[str, list[int]] = {}
    seeds = parse_seeds(args.seeds)
    for seed in seeds:
        with tempfile.TemporaryDirectory(prefix="olmax-leak-cal-") as work, \
                contextlib.redirect_stdout(io.StringIO()):  # the audit's own summary, once per seed
            res = run(args.per_kind, seed, args.ngram, args.boiler_docs, work)
        o = res.pop("overall")
        print(f"seed {seed}: recall {o['recall']:.3f}, precision {o['precision']:.3f}", flush=True)
        for kind, r in res.items():
            t = totals.setdefault(kind, [0, 0])
            t[0] += r["items"]
            t[1] += r["flagged"]
    print(f"{'kind':<14} {'items':>6} {'flagged':>8}  metric")
    negative = ("hard_negative", "unplanted")
    for kind, (items, flagged) in totals.items():
        metric = "false-positive rate" if kind in negative else "recall"
        print(f"{kind:<14} {items:>6} {flagged:>8}  {metric} {flagged / max(1, items):.3f}")
    tp = sum(f for k, (_, f) in totals.items() if k not in negative)
    fp = sum(f for k, (_, f) in totals.items() if k in negative)
    positives = sum(i for k, (i, _) in totals.items() if k not in negative)
    print(f"leak calibration: recall {tp / max(1, positives):.3f}, precision {tp / max(1, tp + fp):.3f} "
          f"over {len(seeds)} seeds")


if __name__ == "__main__":
    main()
