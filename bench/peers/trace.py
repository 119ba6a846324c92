"""`olmax data which` and `olmax data where`: answer times, each query the real command in a fresh process,
timed from after its imports (the time the command reports).

- `where` on the stage-1-sized index of bench/peers/loader.py (sparse files of the real shape: 724 M instances
  of 8192 tokens, 950 files, G = 512), at a token of step --step's first row: the first query builds the
  epoch's inverse order (4 bytes per instance, beside the order file; timed and said), later ones read it.
- `which` on bench/peers/loader.py's real-size shards (4 x 100 M tokens, L = 8192, G = 64) at their last step:
  the first query builds the touched files' document index (sidecar or EOS scan, kept in the work dir).
- `which` at step --step of the stage-1-sized index: its sparse 25 GB files hold no documents, so the files
  that step touches get synthetic `.csv.gz` sidecars (documents of lognormal length, mean ~1 M tokens: ~1,000x
  fewer rows than a real 25 GB shard's). The first query builds those files' document index from the
  sidecars (that build scales with a sidecar's rows); later queries binary-search the cached index.

    .venv/bin/python -m bench.peers.trace [--out bench/out/loader] [--step 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.peers import loader
from bench.peers.loader import SEED, STAGE1_G, L, make_stage1_index
from bench.record import add_arguments, shrink


def olmax(*args: str) -> tuple[dict, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        t = time.perf_counter()
        subprocess.run(
            [str(Path(sys.executable).parent / "olmax"), *args, "--out", out], check=True, capture_output=True
        )
        wall = time.perf_counter() - t
        return json.loads(Path(out).read_text()), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/out/loader")
    ap.add_argument("--step", type=int, default=1_000_000)
    add_arguments(ap)
    args = shrink(ap.parse_args(), out="bench/out/loader-smoke", step=1_000)
    if args.smoke:
        loader.shrink_for_smoke()

    from olmax.data.index import build_index
    from olmax.data.mixfile import read_mix
    from olmax.data.order import CachedOrder, order_file_path

    mix = make_stage1_index(os.path.join(args.out, "stage1"))
    work = os.path.join(args.out, "work")
    index = build_index(read_mix(mix), L)
    path = order_file_path(work, index.num_instances, SEED, 1)
    if not os.path.exists(path):
        t = time.perf_counter()
        CachedOrder(work, index.num_instances, SEED, 1)
        print(f"order file built: {time.perf_counter() - t:.1f} s")
    print(
        f"stage-1 index: {index.num_instances:,} instances, {len(index.paths)} files, G={STAGE1_G}; order file "
        f"{os.path.getsize(path) / 2**30:.2f} GiB"
    )
    common = [
        "--mix",
        mix,
        "--seq-len",
        str(L),
        "--global-batch-size",
        str(STAGE1_G),
        "--seed",
        str(SEED),
        "--work-dir",
        work,
    ]
    from olmax.data.trace import step_position

    bpe = index.num_instances // STAGE1_G
    epoch, b = step_position(args.step, bpe)
    inst = int(CachedOrder(work, index.num_instances, SEED, 1).take(b * STAGE1_G, b * STAGE1_G + 1)[0])
    f, offset = (int(x[0]) for x in index.locate([inst]))
    query = ["--file", index.paths[f], "--tokens", f"{offset}:{offset + 1}"]
    inverse = path + ".inverse"
    first = "first (builds the inverse order)" if not os.path.exists(inverse) else "first"
    for attempt in (first, "again"):
        w, wall = olmax("data", "where", *common, *query)
        print(
            f"where (a token of step {args.step:,}'s row 0) {attempt}: {w['seconds']:.2f} s after imports "
            f"({wall:.2f} s with them); steps {w['steps']}"
        )
        assert args.step in w["steps"]
    print(f"inverse order: {os.path.getsize(inverse) / 2**30:.2f} GiB beside the order file")

    from bench.peers.loader import G, make_shards

    shards = make_shards(os.path.join(args.out, "shards"))
    smix = os.path.join(os.path.dirname(shards[0]), "mix.txt")
    sindex = build_index(read_mix(smix), L)
    last = sindex.num_instances // G
    scommon = [
        "--mix",
        smix,
        "--seq-len",
        str(L),
        "--global-batch-size",
        str(G),
        "--seed",
        str(SEED),
        "--work-dir",
        work,
    ]
    for attempt in ("first (builds the document index)", "again"):
        r, wall = olmax("data", "which", *scommon, "--step", str(last))
        segs = sum(len(row["segments"]) for row in r["rows"])
        print(
            f"which --step {last:,} ({sindex.num_tokens / 1e6:.0f} M tokens, {len(shards)} files) {attempt}: "
            f"{r['seconds']:.2f} s after imports ({wall:.2f} s with them); {len(r['rows'])} rows, {segs} segments"
        )
    ids = CachedOrder(work, index.num_instances, SEED, 1).take(b * STAGE1_G, (b + 1) * STAGE1_G)
    touched = sorted(set(index.locate(ids.astype("int64"))[0].tolist()))
    t = time.perf_counter()
    for f in touched:
        synthetic_sidecar(index.paths[f], index.sizes[f] // 4, seed=f)
    print(
        f"synthetic sidecars for the {len(touched)} files step {args.step:,} touches: {time.perf_counter() - t:.1f} s"
    )
    for attempt in ("first (builds the document index)", "again"):
        s1, wall = olmax("data", "which", *common, "--step", str(args.step))
        segs = sum(len(row["segments"]) for row in s1["rows"])
        print(
            f"which --step {args.step:,} (stage-1 index) {attempt}: {s1['seconds']:.2f} s after imports "
            f"({wall:.2f} s with them); {len(s1['rows'])} rows, {segs} segments"
        )
    print(
        f"trace: where {w['seconds']:.2f} s and which {s1['seconds']:.2f} s at stage 1 (which {r['seconds']:.2f} s on "
        f"the real shards), after imports (target < 1 s)"
    )


def synthetic_sidecar(path: str, tokens: int, *, seed: int, mean_doc: float = 1e6) -> None:
    """A `.csv.gz` sidecar for a sparse token file: documents of lognormal length (mean ~`mean_doc`) tiling
    all `tokens`; kept once written."""
    import gzip

    import numpy as np

    from olmax.data.shards import sidecar_path

    out = sidecar_path(path)
    if out.exists():
        return
    rng = np.random.default_rng(seed)
    lengths = rng.lognormal(np.log(mean_doc) - 0.5, 1.0, int(2 * tokens / mean_doc) + 16).astype(np.int64) + 1
    ends = np.cumsum(lengths)
    ends = np.append(ends[ends < tokens], tokens)
    starts = np.concatenate([[0], ends[:-1]])
    tmp = out.with_name(out.name + ".tmp")
    with gzip.open(tmp, "wt") as fh:
        fh.writelines(
            f"{a},{e},doc-{seed}-{i},bench,\n" for i, (a, e) in enumerate(zip(starts.tolist(), ends.tolist()))
        )
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
