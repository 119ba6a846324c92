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
batches, 100 M tokens), so even the fastest setting is timed over a few tenths of a second. Each round's
rate is in the record; a setting's figure is its median round with the min-max. The dtype of each one's
`input_ids` is printed (OLMo-core int64 tensors, olmax int32 arrays: OLMo-core writes twice the bytes
per token).

Then the time to the first batch when resuming at step 1,000,000 of an index sized like the 5.93T-token
stage-1 mix (sparse files of the real shape, G = 512), in a fresh process, with the order file prebuilt
and cached on disk (its one-time build is not in the figure), and the order's resident memory.

Ratios are per round (the settings ran interleaved, so round i of each saw the same load): the best
olmax setting's rate over the best OLMo-core setting's in that round, and the equal-parallelism pairs.
The record is bench/results/loader.json; the last line is `loader tokens/s olmax/olmo-core = N.Nx`, the
median best-vs-best round.

    .venv/bin/python -m bench.peers.loader [--batches 40] [--rounds 3] [--threads 2] [--skip-resume] [--out DIR]
    .venv/bin/python -m bench.peers.loader --smoke     # 2 small shards and a 1,000x smaller stage-1 index
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator

import numpy as np

from bench.harness import BENCH, RESULT, WARM_WALL, run_child
from bench.record import Record, add_arguments, format_figure, package_version, pairwise_ratio
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
from olmax.data.loader import open_loader, stream_index
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
result = dict(first=round(t2 - t1, 3), with_imports=round(t2 - t0, 3), order_kib=rss_order, rss_kib=int(rss))
"""
RESUME_CHILD += (
    f"print({RESULT!r} + __import__('json').dumps(result))\n"  # its result line (bench/harness.py)
)


def resume_bench(out: str, rec: Record) -> None:
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
        build_s = time.perf_counter() - t
        built = f"prebuilt and cached on disk by this run before timing (build: {build_s:.1f} s)"
        rec.note("stage1_order_build_s", round(build_s, 3))
        rec.figure("stage1_order_build_s", [build_s], "s", instances=index.num_instances)
    print(
        f"stage-1 order file: {index.num_instances:,} instances, {os.path.getsize(path) / 2**30:.2f} GiB, {built}"
    )
    with open(path, "rb") as f:  # a warm page cache, as on a host that made the file
        while f.read(1 << 26):
            pass
    child = run_child(
        [sys.executable, "-c", RESUME_CHILD, mix, work, str(RESUME_STEP), str(STAGE1_G)], echo=None
    )
    if child.rc != 0:
        raise SystemExit(f"bench/peers/loader.py: the resume child failed:\n{child.text[-3000:]}")
    first, with_imports = child.result["first"], child.result["with_imports"]
    order_mib, rss_mib = child.result["order_kib"] / 1024, child.result["rss_kib"] / 1024
    print(
        f"resume at step {RESUME_STEP:,} of a {index.num_instances:,}-instance stage-1 index "
        f"({STAGE1_FILES} files, G={STAGE1_G}), order file prebuilt and cached (its build not counted): "
        f"first batch {first:.2f} s after imports ({with_imports:.2f} s with imports); "
        f"order resident {order_mib:.2f} MiB; process RSS {rss_mib:.0f} MiB"
    )
    rec.note("stage1_resume", {"instances": index.num_instances, "files": STAGE1_FILES, "G": STAGE1_G})
    rec.figure("resume_first_batch_s", [first], "s", step=RESUME_STEP, what="first batch after imports")
    rec.figure("resume_first_batch_with_imports_s", [with_imports], "s", step=RESUME_STEP)
    rec.figure("resume_order_resident_mib", [order_mib], "MiB")
    rec.figure("resume_rss_mib", [rss_mib], "MiB")


def shrink_for_smoke() -> None:
    """A smoke run: 2 shards of 12 batches' tokens and a stage-1-shaped index 1,000x smaller (seconds)."""
    global FILES, TOKENS_PER_FILE, BATCHES_PER_EPOCH, STAGE1_TOKENS, STAGE1_FILES, RESUME_STEP
    FILES, TOKENS_PER_FILE = 2, 6 * G * L
    BATCHES_PER_EPOCH = FILES * TOKENS_PER_FILE // L // G
    STAGE1_TOKENS, STAGE1_FILES, RESUME_STEP = STAGE1_TOKENS // 1000, 95, 1_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--batches",
        type=int,
        default=None,
        help="batches per timed round (default: the rest of epoch 1 after the drain)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=2, help="olmax Grain read threads (its prefetched setting)"
    )
    parser.add_argument("--out", default=None, help="shards and order files (default bench/out/loader)")
    parser.add_argument("--skip-resume", action="store_true")
    add_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        shrink_for_smoke()
    out = args.out or str(BENCH / "out" / ("loader-smoke" if args.smoke else "loader"))
    batches = BATCHES_PER_EPOCH - DRAIN - 1 if args.batches is None else args.batches
    if batches + DRAIN + 1 > BATCHES_PER_EPOCH:
        parser.error(
            f"--batches must be at most {BATCHES_PER_EPOCH - DRAIN - 1} (one epoch is "
            f"{BATCHES_PER_EPOCH} batches)"
        )
    rec = Record("loader", argv=sys.argv, smoke=args.smoke, results=args.results)

    paths = make_shards(os.path.join(out, "shards"))
    work = os.path.join(out, "work")
    mix = os.path.join(out, "shards", "mix.txt")
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
    versions = {
        oc: package_version("ai2-olmo-core"),
        ox: package_version("olmax"),
        "bare numpy gather loop": "",
    }
    for key, setting in settings.items():
        rec.side(
            key,
            version=versions[setting.side] or f"numpy {np.__version__}",
            setting=f"{setting.side}: {setting.label}",
        )
    tokens = FILES * TOKENS_PER_FILE
    rec.note(
        "input",
        f"{FILES} shards of {TOKENS_PER_FILE:,} random uint32 tokens ({tokens * 4 / 1e6:.0f} MB), page cache warm",
    )
    rec.note("shape", {"L": L, "G": G, "batches_per_round": batches, "rounds": args.rounds, "drain": DRAIN})
    print(
        f"{FILES} shards, {tokens * 4 / 1e6:.0f} MB uint32, L={L}, G={G}; per setting "
        f"{args.rounds} rounds x {batches} batches, rounds interleaved across settings, each timed after "
        f"draining {DRAIN} batches untimed; median round (min-max)"
    )
    try:
        for _ in range(args.rounds):
            for setting in settings.values():
                setting.round(batches)
    finally:
        for setting in settings.values():
            setting.close()
    for key, setting in settings.items():
        rec.timings("round", key, [batches * G * L / r for r in setting.rates], "s", WARM_WALL)
        fig = rec.figure(
            f"{key}_tokens_per_s", [r / 1e6 for r in setting.rates], "M tokens/s", dtype=setting.dtype
        )
        print(f"{setting.side:28s} {setting.label:52s} {format_figure(fig):>30s}  input_ids {setting.dtype}")

    def ratio(name: str, ox_keys: list[str], oc_keys: list[str], about: str) -> None:
        """Per round: the best of `ox_keys` over the best of `oc_keys` (the rounds ran interleaved)."""
        num = [max(settings[k].rates[i] for k in ox_keys) for i in range(args.rounds)]
        den = [max(settings[k].rates[i] for k in oc_keys) for i in range(args.rounds)]
        fig = rec.figure(name, pairwise_ratio(num, den), "x", about=about)
        print(f"{about}: olmax/olmo-core = {format_figure(fig)}")

    ratio(
        "ratio_sync",
        ["ox-sync"],
        ["oc-sync"],
        "equal parallelism, synchronous (olmax num_threads=0 vs olmo-core num_workers=0, num_threads=0)",
    )
    if args.threads == 2:
        ratio(
            "ratio_two_threads",
            ["ox-threads"],
            ["oc-t2"],
            "equal parallelism, 2 read threads (olmax num_threads=2 vs olmo-core num_workers=0, num_threads=2)",
        )
    ratio(
        "ratio_sync_vs_default",
        ["ox-sync"],
        ["oc-default"],
        "olmax synchronous vs olmo-core default (num_workers=0, 4 threads)",
    )
    ratio(
        "ratio_best",
        ["ox-sync", "ox-threads"],
        ["oc-sync", "oc-t2", "oc-default", "oc-w2"],
        f"best vs best on {os.cpu_count()} cores, per round",
    )
    if not args.skip_resume:
        resume_bench(out, rec)
    print(f"wrote {rec.write()}")
    best = rec.data["figures"]["ratio_best"]
    print(f"loader tokens/s olmax/olmo-core = {best['median']:.1f}x")


if __name__ == "__main__":
    main()
