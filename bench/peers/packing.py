"""Packing speed: olmax's `obfd` vs OLMo-core's `InstancePacker` (OBFD) on a stage-3-like length mix.

Lengths: `--docs` documents (default 2,000,000) drawn from a long-tailed lognormal (median ~1,100 tokens,
~3% over 8,192, a few over 65,536), capped at L as `truncate` does; packed at L = 65,536 and 8,192.
OLMo-core's packer builds a tree of 2L node objects and walks it per document (~30-60 us/doc here), so
it runs on the first `--oc-docs` documents only (default 100,000; stated in the output); olmax runs on
the same subsample (results asserted identical) and on the full set. Docs/s, the ratio on the same
subsample and the padding fraction (1 - tokens / (instances x L)) are printed. Single process.

    .venv/bin/python -m bench.peers.packing [--docs 2000000] [--oc-docs 100000] [--seed 0]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

import numpy as np

from bench.harness import WARM_WALL, interleaved
from bench.record import Record, add_arguments, format_figure, package_version, pairwise_ratio, shrink
from olmax.data.packing import obfd


def stage3_lengths(n: int, seed: int) -> np.ndarray:
    """Long-tailed document lengths (tokens, >= 1): lognormal(mu=7, sigma=1.5)."""
    rng = np.random.default_rng(seed)
    return np.maximum(np.ceil(rng.lognormal(7.0, 1.5, n)), 1).astype(np.int64)


def olmo_core_pack(lengths: np.ndarray, max_len: int) -> tuple[float, list[list[int]], np.ndarray]:
    from olmo_core.data.utils import InstancePacker

    idx = np.stack([np.zeros(lengths.size, np.uint64), lengths.astype(np.uint64)], axis=1)
    t0 = time.perf_counter()
    instances, sorted_idx, _ = InstancePacker(max_len).pack_documents(idx)
    return time.perf_counter() - t0, instances, sorted_idx


def olmax_pack(lengths: np.ndarray, max_len: int) -> tuple[float, tuple[np.ndarray, ...]]:
    gc.collect()  # OLMo-core's cyclic tree of node objects is garbage now; do not time its collection
    t0 = time.perf_counter()
    out = obfd(lengths, max_len)
    return time.perf_counter() - t0, out


def padding(lengths: np.ndarray, n_instances: int, max_len: int) -> float:
    return 1.0 - lengths.sum() / (n_instances * max_len)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=2_000_000)
    ap.add_argument("--oc-docs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=3, help="interleaved rounds (default 3; 1 with --smoke)")
    add_arguments(ap)
    args = shrink(ap.parse_args(), docs=20_000, oc_docs=2_000, reps=1)
    rec = Record("packing", argv=sys.argv, smoke=args.smoke, results=args.results)
    rec.side("olmax", version="this tree", setting="olmax.data.packing.obfd, one process")
    rec.side(
        "olmo-core",
        version=package_version("ai2-olmo-core"),
        setting="olmo_core.data.utils.InstancePacker(max_len).pack_documents, one process",
    )
    raw = stage3_lengths(args.docs, args.seed)
    rec.note("input", {"docs": args.docs, "olmo_core_docs": args.oc_docs, "seed": args.seed})
    print(
        f"{args.docs:,} docs, lognormal(7, 1.5): median {int(np.median(raw)):,}, "
        f"mean {raw.mean():,.0f}, >8192: {(raw > 8192).mean():.1%}, >65536: {(raw > 65536).mean():.2%}"
    )
    print(f"both sides: {WARM_WALL}, {args.reps} interleaved rounds")
    for max_len in (65536, 8192):
        lengths = np.minimum(raw, max_len)
        sub = lengths[: args.oc_docs]
        # untimed warm-up of both sides, and the check that they agree
        _, instances, sorted_idx = olmo_core_pack(sub, max_len)
        _, (order, offsets, docs) = olmax_pack(sub, max_len)
        assert np.array_equal(sub[order], (sorted_idx[:, 1] - sorted_idx[:, 0]).astype(np.int64))
        assert docs.tolist() == [d for b in instances for d in b]
        assert offsets.size - 1 == len(instances)
        del instances, sorted_idx
        runs = interleaved(
            {
                "olmo-core": lambda sub=sub, max_len=max_len: olmo_core_pack(sub, max_len)[0],
                "olmax": lambda sub=sub, max_len=max_len: olmax_pack(sub, max_len)[0],
                "olmax-full": lambda lengths=lengths, max_len=max_len: olmax_pack(lengths, max_len)[0],
            },
            reps=args.reps,
        )
        k = max_len // 1024
        rec.timings(f"pack_{k}k_subsample", "olmo-core", runs["olmo-core"], "s", WARM_WALL)
        rec.timings(f"pack_{k}k_subsample", "olmax", runs["olmax"], "s", WARM_WALL)
        rec.timings(f"pack_{k}k_full", "olmax", runs["olmax-full"], "s", WARM_WALL)
        oc = rec.figure(
            f"olmo_core_{k}k_docs_per_s", [sub.size / t / 1e3 for t in runs["olmo-core"]], "k documents/s"
        )
        ox = rec.figure(
            f"olmax_{k}k_docs_per_s", [sub.size / t / 1e3 for t in runs["olmax"]], "k documents/s"
        )
        full = rec.figure(
            f"olmax_{k}k_full_docs_per_s",
            [lengths.size / t / 1e6 for t in runs["olmax-full"]],
            "M documents/s",
        )
        ratio = rec.figure(
            f"ratio_{k}k",
            pairwise_ratio(runs["olmo-core"], runs["olmax"]),
            "x",
            about="OLMo-core seconds / olmax seconds, same documents",
        )
        _, (_, full_offsets, _) = olmax_pack(lengths, max_len)
        pad = padding(lengths, full_offsets.size - 1, max_len)
        rec.note(
            f"pack_{k}k",
            {"instances": int(full_offsets.size - 1), "padding": pad, "identical_on_subsample": True},
        )
        print(
            f"L={max_len}: on {sub.size:,} docs (identical result) olmo-core {format_figure(oc)}, "
            f"olmax {format_figure(ox)}: {format_figure(ratio)}; olmax on all {lengths.size:,} docs "
            f"{format_figure(full, 2)}, {full_offsets.size - 1:,} instances, padding {pad:.4%}"
        )
    print(f"record: {rec.write()}")


if __name__ == "__main__":
    main()
