"""Packing speed: olmax's `obfd` vs OLMo-core's `InstancePacker` (OBFD) on a stage-3-like length mix.

Lengths: `--docs` documents (default 2,000,000) drawn from a long-tailed lognormal (median ~1,100 tokens,
~3% over 8,192, a few over 65,536), capped at L as `truncate` does; packed at L = 65,536 and 8,192.
OLMo-core's packer builds a tree of 2L node objects and walks it per document (~30-60 us/doc here), so
it runs on the first `--oc-docs` documents only (default 100,000; stated in the output); olmax runs on
the same subsample (results asserted identical) and on the full set. Docs/s, the ratio on the same
subsample and the padding fraction (1 - tokens / (instances x L)) are printed. Single process.

    .venv/bin/python bench/packing.py [--docs 2000000] [--oc-docs 100000] [--seed 0]
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np
from record import add_arguments, shrink

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
    add_arguments(ap)
    args = shrink(ap.parse_args(), docs=20_000, oc_docs=2_000)
    raw = stage3_lengths(args.docs, args.seed)
    print(
        f"{args.docs:,} docs, lognormal(7, 1.5): median {int(np.median(raw)):,}, "
        f"mean {raw.mean():,.0f}, >8192: {(raw > 8192).mean():.1%}, >65536: {(raw > 65536).mean():.2%}"
    )
    for max_len in (65536, 8192):
        lengths = np.minimum(raw, max_len)
        sub = lengths[: args.oc_docs]
        t_oc, instances, sorted_idx = olmo_core_pack(sub, max_len)
        t_sub, (order, offsets, docs) = olmax_pack(sub, max_len)
        assert np.array_equal(sub[order], (sorted_idx[:, 1] - sorted_idx[:, 0]).astype(np.int64))
        assert docs.tolist() == [d for b in instances for d in b]
        assert offsets.size - 1 == len(instances)
        t_full, (_, full_offsets, _) = olmax_pack(lengths, max_len)
        print(
            f"L={max_len}: olmo-core InstancePacker on {sub.size:,} docs (subsample): {t_oc:.2f} s, "
            f"{sub.size / t_oc:,.0f} docs/s; olmax obfd same docs: {t_sub:.3f} s, {sub.size / t_sub:,.0f} "
            f"docs/s (identical result); ratio {t_oc / t_sub:.1f}x"
        )
        print(
            f"L={max_len}: olmax obfd on all {lengths.size:,} docs: {t_full:.2f} s, "
            f"{lengths.size / t_full:,.0f} docs/s, {full_offsets.size - 1:,} instances, padding "
            f"{padding(lengths, full_offsets.size - 1, max_len):.4%} (subsample: "
            f"{padding(sub, offsets.size - 1, max_len):.4%})"
        )


if __name__ == "__main__":
    main()
