"""Loader throughput: OLMo-core's NumpyFSLDataLoader vs a bare numpy gather loop vs olmax, same shards.

Shards: 4 raw uint32 files of 26.2 M random tokens each (~420 MB), L = 8192, 64 sequences per batch,
page cache warmed first. Then time to the first batch when resuming at step 1,000,000 of an index
sized like the 5.93T-token stage-1 mix (sparse files of the real shape, G = 512), measured in a fresh
process once the order file exists, with the order's resident memory. The last line is
`loader tokens/s olmax/olmo-core = N.Nx`.

    .venv/bin/python bench/loader.py [--batches 40] [--rounds 3] [--skip-resume] [--out bench/out/loader]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

L, G = 8192, 64
FILES, TOKENS_PER_FILE = 4, 26_214_400  # 4 x 100 MiB
SEED = 34521
# Stage 1 (OLMO3.md): 5.93T tokens, 512 x 8192-token batches, ~950 files in OLMo-mix-0925-official.
STAGE1_TOKENS, STAGE1_FILES, STAGE1_G, RESUME_STEP = 5_930_000_000_000, 950, 512, 1_000_000


def make_shards(folder: str) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    paths, rng = [], np.random.default_rng(0)
    for i in range(FILES):
        path = os.path.join(folder, f"shard-{i}.npy")
        if not (os.path.exists(path) and os.path.getsize(path) == 4 * TOKENS_PER_FILE):
            tokens = rng.integers(0, 100_278, size=TOKENS_PER_FILE, dtype=np.uint32)
            tmp = path + ".tmp"
            tokens.tofile(tmp)
            os.replace(tmp, path)
        paths.append(path)
    with open(os.path.join(folder, "mix.txt"), "w") as f:
        f.write("".join(f"bench,{os.path.basename(p)}\n" for p in paths))
    for p in paths:  # warm the page cache
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass
    return paths


def rate(fn, batches: int, rounds: int) -> float:
    """Best tokens/s over `rounds` runs of `batches` batches (fn(n) reads n batches)."""
    best = 0.0
    for _ in range(rounds):
        t = time.perf_counter()
        fn(batches)
        best = max(best, batches * G * L / (time.perf_counter() - t))
    return best


def olmo_core_reader(paths: list[str], work_dir: str):
    from olmo_core.data import DataCollator, NumpyDataLoaderBase, NumpyFSLDataset

    ds = NumpyFSLDataset(*paths, sequence_length=L, pad_token_id=100277, eos_token_id=100257,
                         vocab_size=100278, dtype=np.uint32)
    ds.work_dir = work_dir
    loader = NumpyDataLoaderBase.wrap_numpy_dataset(
        ds, global_batch_size=G * L, collator=DataCollator(pad_token_id=100277), work_dir=work_dir,
        seed=SEED, num_workers=0)
    loader.reshuffle(epoch=1)
    state = {"it": iter(loader)}

    def read(n: int) -> None:
        for _ in range(n):
            batch = next(state["it"], None)
            if batch is None:
                loader.reset()
                loader.reshuffle(epoch=1)
                state["it"] = iter(loader)
                batch = next(state["it"])
    return read


def bare_reader(paths: list[str]):
    """The practical limit: memmaps, an in-memory permutation, one row copy per sequence."""
    maps = [np.memmap(p, dtype=np.uint32, mode="r").reshape(-1, L) for p in paths]
    counts = np.array([m.shape[0] for m in maps])
    offsets = np.concatenate([[0], np.cumsum(counts)])
    perm = np.random.default_rng(SEED).permutation(offsets[-1])
    state = {"b": 0}

    def read(n: int) -> None:
        for _ in range(n):
            b = state["b"] % (len(perm) // G)
            state["b"] += 1
            ids = perm[b * G:(b + 1) * G]
            files = np.searchsorted(offsets, ids, side="right") - 1
            out = np.empty((G, L), dtype=np.int32)
            for r, (f, i) in enumerate(zip(files, ids - offsets[files])):
                out[r] = maps[f][i]
    return read


def olmax_reader(mix: str, work_dir: str, threads: int):
    from olmax.data.index import build_index
    from olmax.data.loader import Loader, LoaderConfig
    from olmax.data.mixfile import read_mix

    loader = Loader(build_index(read_mix(mix), L),
                    LoaderConfig(seq_len=L, global_batch_size=G, seed=SEED, work_dir=work_dir,
                                 num_threads=threads, prefetch_buffer_size=4),
                    process_index=0, process_count=1)
    it = loader.iterate()
    next(it)  # start the prefetch threads outside the timed region

    def read(n: int) -> None:
        for _ in range(n):
            next(it)
    return read


def make_stage1_index(folder: str) -> str:
    """Sparse files shaped like the stage-1 mix (no disk blocks); returns the mix path."""
    os.makedirs(folder, exist_ok=True)
    per_file = STAGE1_TOKENS // STAGE1_FILES
    lines = []
    for i in range(STAGE1_FILES):
        path = os.path.join(folder, f"{i:06d}.npy")
        size = 4 * (per_file + 7919 * i)  # uneven, like real shards
        if not os.path.exists(path) or os.path.getsize(path) != size:
            with open(path, "wb") as f:
                f.truncate(size)
        lines.append(f"source{i % 7},{os.path.basename(path)}\n")
    with open(os.path.join(folder, "mix.txt"), "w") as f:
        f.writelines(lines)
    return os.path.join(folder, "mix.txt")


RESUME_CHILD = r"""
import os, sys, time
t0 = time.perf_counter()
import grain  # noqa: F401  (imported lazily by the loader; counted with the imports)
from olmax.data.index import build_index
from olmax.data.loader import Loader, LoaderConfig
from olmax.data.mixfile import read_mix
from olmax.data.order import order_file_path
t1 = time.perf_counter()
mix, work, step, G = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
index = build_index(read_mix(mix), 8192)
loader = Loader(index, LoaderConfig(seq_len=8192, global_batch_size=G, seed=34521, work_dir=work),
                process_index=0, process_count=1)
it = loader.iterate(loader.state_at(1, step))
batch = next(it)
t2 = time.perf_counter()
order = order_file_path(work, index.num_instances, 34521, 1)
rss_order = 0
with open("/proc/self/smaps") as f:
    inside = False
    for line in f:
        if line[0] in "0123456789abcdef" and " " in line and "-" in line.split()[0]:
            inside = line.rstrip().endswith(order)
        elif inside and line.startswith("Rss:"):
            rss_order += int(line.split()[1])
with open("/proc/self/status") as f:
    rss = [l for l in f if l.startswith("VmRSS")][0].split()[1]
print(f"RESULT {t2 - t1:.3f} {t2 - t0:.3f} {rss_order} {rss} {index.num_instances} {batch['input_ids'].shape}")
"""


def resume_bench(out: str) -> None:
    from olmax.data.index import build_index
    from olmax.data.mixfile import read_mix
    from olmax.data.order import CachedOrder, order_file_path

    mix = make_stage1_index(os.path.join(out, "stage1"))
    work = os.path.join(out, "work")
    index = build_index(read_mix(mix), L)
    path = order_file_path(work, index.num_instances, SEED, 1)
    if not os.path.exists(path):
        t = time.perf_counter()
        CachedOrder(work, index.num_instances, SEED, 1)
        print(f"built the stage-1 order once: {index.num_instances:,} instances, "
              f"{os.path.getsize(path) / 2**30:.2f} GiB, {time.perf_counter() - t:.1f} s")
    with open(path, "rb") as f:  # a warm page cache, as on a host that made the file
        while f.read(1 << 26):
            pass
    child = subprocess.run([sys.executable, "-c", RESUME_CHILD, mix, work, str(RESUME_STEP), str(STAGE1_G)],
                           capture_output=True, text=True, check=True)
    line = [x for x in child.stdout.splitlines() if x.startswith("RESULT")][0].split()
    print(f"resume at step {RESUME_STEP:,} of a {index.num_instances:,}-instance stage-1 index "
          f"({STAGE1_FILES} files, G={STAGE1_G}): first batch {float(line[1]):.2f} s after imports "
          f"({float(line[2]):.2f} s with imports); order resident {int(line[3]) / 1024:.2f} MiB; "
          f"process RSS {int(line[4]) / 1024:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=40, help="batches per timed round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="olmax Grain read threads")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out", "loader"))
    parser.add_argument("--skip-resume", action="store_true")
    args = parser.parse_args()

    paths = make_shards(os.path.join(args.out, "shards"))
    print(f"{FILES} shards, {FILES * TOKENS_PER_FILE * 4 / 1e6:.0f} MB uint32, L={L}, G={G}, "
          f"{args.rounds} x {args.batches} batches, best round")
    work = os.path.join(args.out, "work")
    oc = rate(olmo_core_reader(paths, work), args.batches, args.rounds)
    print(f"olmo-core NumpyFSLDataLoader: {oc / 1e6:8.1f} M tokens/s")
    bare = rate(bare_reader(paths), args.batches, args.rounds)
    print(f"bare numpy gather loop:       {bare / 1e6:8.1f} M tokens/s")
    mix = os.path.join(args.out, "shards", "mix.txt")
    sync = rate(olmax_reader(mix, work, 0), args.batches, args.rounds)
    print(f"olmax, no prefetch:           {sync / 1e6:8.1f} M tokens/s")
    ours = rate(olmax_reader(mix, work, args.threads), args.batches, args.rounds)
    print(f"olmax, Grain {args.threads} threads:       {ours / 1e6:8.1f} M tokens/s")
    if not args.skip_resume:
        resume_bench(args.out)
    print(f"loader tokens/s olmax/olmo-core = {ours / oc:.1f}x")


if __name__ == "__main__":
    main()
