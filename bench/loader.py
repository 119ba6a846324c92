"""Loader throughput: OLMo-core's NumpyFSLDataLoader vs a bare numpy gather loop vs olmax, same shards.

Shards: 4 raw uint32 files of 26.2 M random tokens each (~420 MB), L = 8192, 64 sequences per batch,
page cache warmed first. Each loader runs in several settings:
- equal parallelism: both synchronous, no prefetch (olmax `num_threads=0`; OLMo-core `num_workers=0,
  num_threads=0` -- OLMo-core's `num_workers=0` alone is not synchronous: with `num_threads=None` it reads
  instances on 4 threads into queues holding 2 batches), and both on 2 read threads (olmax
  `num_threads=2`, prefetch 4 batches; OLMo-core `num_workers=0, num_threads=2`);
- each one's best on this 2-core machine: OLMo-core `num_workers` 0 (threads 0, 2 or its default) and
  2 (torch DataLoader processes, `prefetch_factor` 2); olmax `num_threads` 0 and `--threads`.
Rounds are interleaved across the settings so all see the same background load. Every setting keeps
one iterator, and before each timed round it first consumes `DRAIN` batches untimed, so whatever a
prefetch buffer filled while the other settings ran is gone when the clock starts (a full buffer at t0
is never counted); an iterator that would reach the end of epoch 1 inside a round is reopened first.
A round is by default the whole of epoch 1 after the first batch and the drain (191 of its 200
batches, 100 M tokens), so even the fastest setting is timed over a few tenths of a second. Best round
per setting (the median is printed beside it). The dtype of each one's `input_ids` is printed (OLMo-core int64 tensors, olmax
int32 arrays: OLMo-core writes twice the bytes per token).

Then the time to the first batch when resuming at step 1,000,000 of an index sized like the 5.93T-token
stage-1 mix (sparse files of the real shape, G = 512), in a fresh process, with the order file prebuilt
and cached on disk (its one-time build is not in the figure), and the order's resident memory.

The last line is `loader tokens/s olmax/olmo-core = N.Nx`, best vs best.

    .venv/bin/python bench/loader.py [--batches 40] [--rounds 3] [--threads 2] [--skip-resume] [--out bench/out/loader]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import numpy as np

from olmax.data.loader import open_loader

L, G = 8192, 64
FILES, TOKENS_PER_FILE = 4, 26_214_400  # 4 x 100 MiB
BATCHES_PER_EPOCH = FILES * TOKENS_PER_FILE // L // G
SEED = 34521
# Untimed batches read before each timed round: more than any setting holds ready or in flight (olmax
# 4 buffered + 2 threads; OLMo-core threads 2 batches of queue + 4 rows on the go, workers 2 x 2).
DRAIN = 8
# Stage 1 (docs/olmo3.md): 5.93T tokens, 512 x 8192-token batches, ~950 files in OLMo-mix-0925-official.
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


class Setting:
    """One loader in one configuration: `open()` returns a fresh iterator over epoch 1's batches."""

    def __init__(self, side: str, label: str, open_fn: Callable[[], Iterator]):
        self.side, self.label, self.open = side, label, open_fn
        self.it: Iterator | None = None
        self.pos = 0  # batches taken from the current iterator
        self.rates: list[float] = []  # tokens/s, one per round
        self.dtype = "?"

    def round(self, batches: int) -> None:
        """Drain, then time `batches` batches."""
        if self.it is None or self.pos + DRAIN + batches > BATCHES_PER_EPOCH:
            self.close()
            self.it, self.pos = self.open(), 0
            self.dtype = describe_dtype(next(self.it)["input_ids"])
            self.pos += 1
        for _ in range(DRAIN):
            next(self.it)
        start = time.perf_counter()
        for _ in range(batches):
            next(self.it)
        self.rates.append(batches * G * L / (time.perf_counter() - start))
        self.pos += DRAIN + batches

    @property
    def best(self) -> float:
        return max(self.rates)

    def close(self) -> None:
        close = getattr(self.it, "close", None)
        if close is not None:
            close()
        self.it = None


def describe_dtype(x) -> str:
    """`torch.int64` for a torch tensor, `numpy.int32` for a numpy array."""
    return f"{type(x).__module__.split('.')[0]}.{str(x.dtype).split('.')[-1]}"


def olmo_core_opener(paths: list[str], work_dir: str, num_workers: int, num_threads: int | None):
    from olmo_core.data import DataCollator, NumpyDataLoaderBase, NumpyFSLDataset

    ds = NumpyFSLDataset(
        *paths,
        sequence_length=L,
        pad_token_id=100277,
        eos_token_id=100257,
        vocab_size=100278,
        dtype=np.uint32,
    )
    ds.work_dir = work_dir
    loader = NumpyDataLoaderBase.wrap_numpy_dataset(
        ds,
        global_batch_size=G * L,
        collator=DataCollator(pad_token_id=100277),
        work_dir=work_dir,
        seed=SEED,
        num_workers=num_workers,
        num_threads=num_threads,
    )

    def open_epoch() -> Iterator:
        loader.reset()
        loader.reshuffle(epoch=1)
        return iter(loader)

    return open_epoch


def bare_opener(paths: list[str]):
    """The practical limit: memmaps, an in-memory permutation, one row copy per sequence."""
    maps = [np.memmap(p, dtype=np.uint32, mode="r").reshape(-1, L) for p in paths]
    counts = np.array([m.shape[0] for m in maps])
    offsets = np.concatenate([[0], np.cumsum(counts)])
    perm = np.random.default_rng(SEED).permutation(offsets[-1])

    def batches() -> Iterator:
        for b in range(len(perm) // G):
            ids = perm[b * G : (b + 1) * G]
            files = np.searchsorted(offsets, ids, side="right") - 1
            out = np.empty((G, L), dtype=np.int32)
            for r, (f, i) in enumerate(zip(files, ids - offsets[files])):
                out[r] = maps[f][i]
            yield {"input_ids": out}

    return batches


def olmax_opener(mix: str, work_dir: str, threads: int):
    from olmax.data.stream import StreamSpec

    spec = StreamSpec(
        mix=mix,
        seq_len=L,
        global_batch_size=G,
        seed=SEED,
        work_dir=work_dir,
        num_threads=threads,
        prefetch_buffer_size=4,
    )
    return open_loader(spec, process_index=0, process_count=1).iterate


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
from olmax.data.order import order_file_path
from olmax.data.stream import StreamSpec
t1 = time.perf_counter()
mix, work, step, G = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
spec = StreamSpec(mix=mix, seq_len=8192, global_batch_size=G, seed=34521, work_dir=work)
index = stream_index(spec)
loader = open_loader(spec, index, process_index=0, process_count=1)
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
    if os.path.exists(path):
        built = "prebuilt by an earlier run and cached on disk"
    else:
        t = time.perf_counter()
        CachedOrder(work, index.num_instances, SEED, 1)
        built = (
            f"prebuilt and cached on disk by this run before timing (build: {time.perf_counter() - t:.1f} s)"
        )
    print(
        f"stage-1 order file: {index.num_instances:,} instances, {os.path.getsize(path) / 2**30:.2f} GiB, {built}"
    )
    with open(path, "rb") as f:  # a warm page cache, as on a host that made the file
        while f.read(1 << 26):
            pass
    child = subprocess.run(
        [sys.executable, "-c", RESUME_CHILD, mix, work, str(RESUME_STEP), str(STAGE1_G)],
        capture_output=True,
        text=True,
        check=True,
    )
    line = [x for x in child.stdout.splitlines() if x.startswith("RESULT")][0].split()
    print(
        f"resume at step {RESUME_STEP:,} of a {index.num_instances:,}-instance stage-1 index "
        f"({STAGE1_FILES} files, G={STAGE1_G}), order file prebuilt and cached (its build not counted): "
        f"first batch {float(line[1]):.2f} s after imports ({float(line[2]):.2f} s with imports); "
        f"order resident {int(line[3]) / 1024:.2f} MiB; process RSS {int(line[4]) / 1024:.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--batches",
        type=int,
        default=BATCHES_PER_EPOCH - DRAIN - 1,
        help="batches per timed round (default: the rest of epoch 1 after the drain)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=2, help="olmax Grain read threads (its prefetched setting)"
    )
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out", "loader"))
    parser.add_argument("--skip-resume", action="store_true")
    args = parser.parse_args()
    if args.batches + DRAIN + 1 > BATCHES_PER_EPOCH:
        parser.error(
            f"--batches must be at most {BATCHES_PER_EPOCH - DRAIN - 1} (one epoch is "
            f"{BATCHES_PER_EPOCH} batches)"
        )

    paths = make_shards(os.path.join(args.out, "shards"))
    work = os.path.join(args.out, "work")
    mix = os.path.join(args.out, "shards", "mix.txt")
    oc, ox = "olmo-core NumpyFSLDataLoader", "olmax Loader"
    settings = {
        "oc-sync": Setting(
            oc, "num_workers=0, num_threads=0 (synchronous)", olmo_core_opener(paths, work, 0, 0)
        ),
        "oc-t2": Setting(oc, "num_workers=0, num_threads=2", olmo_core_opener(paths, work, 0, 2)),
        "oc-default": Setting(
            oc, "num_workers=0, num_threads=None (default: 4 threads)", olmo_core_opener(paths, work, 0, None)
        ),
        "oc-w2": Setting(
            oc, "num_workers=2 (processes, prefetch_factor 2)", olmo_core_opener(paths, work, 2, None)
        ),
        "bare": Setting("bare numpy gather loop", "synchronous", bare_opener(paths)),
        "ox-sync": Setting(ox, "num_threads=0 (synchronous, no prefetch)", olmax_opener(mix, work, 0)),
        "ox-threads": Setting(
            ox, f"num_threads={args.threads}, prefetch_buffer_size=4", olmax_opener(mix, work, args.threads)
        ),
    }
    print(
        f"{FILES} shards, {FILES * TOKENS_PER_FILE * 4 / 1e6:.0f} MB uint32, L={L}, G={G}; per setting "
        f"{args.rounds} rounds x {args.batches} batches, rounds interleaved across settings, each timed after "
        f"draining {DRAIN} batches untimed; best round (median)"
    )
    try:
        for _ in range(args.rounds):
            for setting in settings.values():
                setting.round(args.batches)
    finally:
        for setting in settings.values():
            setting.close()
    for setting in settings.values():
        print(
            f"{setting.side:28s} {setting.label:52s} {setting.best / 1e6:7.1f} M tokens/s (median "
            f"{float(np.median(setting.rates)) / 1e6:6.1f})  input_ids {setting.dtype}"
        )

    def best_of(keys: list[str]) -> tuple[float, str]:
        key = max(keys, key=lambda k: settings[k].best)
        return settings[key].best, settings[key].label

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.1f}x"

    sync_ox, sync_oc = settings["ox-sync"].best, settings["oc-sync"].best
    print(
        f"equal parallelism, synchronous (olmax num_threads=0 vs olmo-core num_workers=0, num_threads=0): "
        f"olmax/olmo-core = {ratio(sync_ox, sync_oc)}"
    )
    if args.threads == 2:
        print(
            f"equal parallelism, 2 read threads (olmax num_threads=2 vs olmo-core num_workers=0, "
            f"num_threads=2): olmax/olmo-core = {ratio(settings['ox-threads'].best, settings['oc-t2'].best)}"
        )
    print(
        f"olmax synchronous vs olmo-core default (num_workers=0, 4 threads): olmax/olmo-core = "
        f"{ratio(sync_ox, settings['oc-default'].best)}"
    )
    best_ox, label_ox = best_of(["ox-sync", "ox-threads"])
    best_oc, label_oc = best_of(["oc-sync", "oc-t2", "oc-default", "oc-w2"])
    print(
        f"best vs best on {os.cpu_count()} cores: olmax {best_ox / 1e6:.1f} M tokens/s ({label_ox}) vs olmo-core "
        f"{best_oc / 1e6:.1f} M tokens/s ({label_oc}): olmax/olmo-core = {ratio(best_ox, best_oc)}"
    )
    if not args.skip_resume:
        resume_bench(args.out)
    print(f"loader tokens/s olmax/olmo-core = {best_ox / best_oc:.1f}x")


if __name__ == "__main__":
    main()
