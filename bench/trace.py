"""`olmax data which` and `olmax data where`: answer times, each query the real command in a fresh process,
timed from after its imports (the time the command reports).

- `where` on the stage-1-sized index of bench/loader.py (sparse files of the real shape: 724 M instances
  of 8192 tokens, 950 files, G = 512), at a token of step --step's first row: the first query builds the
  epoch's inverse order (4 bytes per instance, beside the order file; timed and said), later ones read it.
- `which` on bench/loader.py's real-size shards (4 x 100 M tokens, L = 8192, G = 64) at their last step:
  the first query builds the touched files' document index (sidecar or EOS scan, kept in the work dir).
  Not on the stage-1 index: its sparse 25 GB files have no documents (no sidecar, no EOS) to name.

    .venv/bin/python bench/trace.py [--out bench/out/loader] [--step 1000000]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loader import SEED, STAGE1_G, L, make_stage1_index  # noqa: E402


def olmax(*args: str) -> tuple[dict, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        t = time.perf_counter()
        subprocess.run([str(Path(sys.executable).parent / "olmax"), *args, "--out", out], check=True, capture_output=True)
        wall = time.perf_counter() - t
        return json.loads(Path(out).read_text()), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/out/loader")
    ap.add_argument("--step", type=int, default=1_000_000)
    args = ap.parse_args()

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
    print(f"stage-1 index: {index.num_instances:,} instances, {len(index.paths)} files, G={STAGE1_G}; order file "
          f"{os.path.getsize(path) / 2**30:.2f} GiB")
    common = ["--mix", mix, "--seq-len", str(L), "--global-batch-size", str(STAGE1_G), "--seed", str(SEED),
              "--work-dir", work]
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
        print(f"where (a token of step {args.step:,}'s row 0) {attempt}: {w['seconds']:.2f} s after imports "
              f"({wall:.2f} s with them); steps {w['steps']}")
        assert args.step in w["steps"]
    print(f"inverse order: {os.path.getsize(inverse) / 2**30:.2f} GiB beside the order file")

    from loader import G, make_shards

    shards = make_shards(os.path.join(args.out, "shards"))
    smix = os.path.join(os.path.dirname(shards[0]), "mix.txt")
    sindex = build_index(read_mix(smix), L)
    last = sindex.num_instances // G
    scommon = ["--mix", smix, "--seq-len", str(L), "--global-batch-size", str(G), "--seed", str(SEED),
               "--work-dir", work]
    for attempt in ("first (builds the document index)", "again"):
        r, wall = olmax("data", "which", *scommon, "--step", str(last))
        segs = sum(len(row["segments"]) for row in r["rows"])
        print(f"which --step {last:,} ({sindex.num_tokens / 1e6:.0f} M tokens, {len(shards)} files) {attempt}: "
              f"{r['seconds']:.2f} s after imports ({wall:.2f} s with them); {len(r['rows'])} rows, {segs} segments")
    print(f"trace: where {w['seconds']:.2f} s at stage 1, which {r['seconds']:.2f} s, after imports (target < 1 s)")


if __name__ == "__main__":
    main()
