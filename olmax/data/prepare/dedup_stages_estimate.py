"""`olmax data prepare --dedup ... --dry-run`: the memory, scratch disk and time each stage will take,
from the inputs' sizes (no tokenizing, no parsing) and per-byte rates measured by bench/peers/dedup_rates.py
(`RATES`, copied from its record bench/results/dedup_rates.json; tests/data/prepare/test_dedup_estimate.py
checks the copy against the record and the estimate against a measured run). A run whose estimate
exceeds `--max-memory` (default: this machine's memory) is refused before anything is written.

Model (the local runner; input bytes B are the inputs' decompressed sizes, JSON included):
- the decision pass's first read (documents, exact hashes) and, with minhash, its shingle sets and
  signatures: peak RSS base + rss_minhash * B, or, when that passes `spill_threshold(--max-memory)`
  (the tables then move to scratch disk), the larger of the resident memory at the switch, about
  (threshold + base) / 2, and base + SPILLED_RSS_SHARE of the tables; the substring stage then holds one partition,
  base + rss_substring * min(B, partition bytes); the peak is the larger, the shard pass's own
  (`plain_rss`, bounded batches) if that is larger still;
- CPU: a fixed start, read * B for the first pass, minhash * B (its wall time spread over --workers
  threads), substring * B (its own re-read included), then the shard pass (tokenize and write)
  shard_cpu * B spread over --workers;
- disk: the shards (shard_disk * B) and the decisions file (decisions_disk * B) in the output folder;
  the local runner spills nothing else.
The rates hold for text like the calibration corpus (stdlib sources and pydoc topics); per-document
costs (a 1.1 KB signature per document) make corpora of much shorter documents cost more per byte.
"""

from __future__ import annotations

import gzip
import math
import os
from dataclasses import dataclass

from olmax.data import readers
from olmax.data.prepare.dedup_stages import spill_threshold
from olmax.data.prepare.prepare_config import PrepareConfig
from olmax.errors import OlmaxError

RECORD = "bench/results/dedup_rates.json"


@dataclass(frozen=True)
class Rates:
    """Per-byte costs of `prepare --dedup` (each the median figure of RECORD named in the comment)."""

    base_rss: float  # base_rss_bytes: peak RSS on a one-document input (interpreter, numba, tokenizer)
    plain_rss: float  # plain_rss_bytes: peak RSS of a prepare without dedup on the calibration corpus
    rss_minhash: float  # rss_minhash_per_byte: peak RSS growth of --dedup exact,minhash per input byte
    rss_substring: float  # rss_substring_per_byte: peak RSS growth of --dedup substring per byte
    cpu_fixed: float  # cpu_fixed_s: decision-pass CPU seconds on a one-document input
    cpu_read: float  # cpu_read_s_per_byte: --dedup exact (the first read and its hashes)
    cpu_minhash: float  # cpu_minhash_s_per_byte: --dedup exact,minhash less --dedup exact
    cpu_substring: float  # cpu_substring_s_per_byte: --dedup substring less --dedup exact
    shard_cpu: float  # shard_cpu_s_per_byte: a prepare without dedup, process CPU less its start
    shard_disk: float  # shard_disk_per_byte: that prepare's output folder per input byte
    decisions_disk: float  # decisions_disk_per_byte: .olmax-dedup.json per byte (all three stages)


RATES = Rates(  # RECORD's medians (3 interleaved runs each, on a 6.15 MB corpus)
    base_rss=3.12926e08,
    plain_rss=2.79253e08,
    rss_minhash=3.53913,
    rss_substring=33.5921,
    cpu_fixed=0.42,
    cpu_read=3.25135e-09,
    cpu_minhash=2.60108e-08,
    cpu_substring=7.80324e-08,
    shard_cpu=1.62922e-08,
    shard_disk=0.890965,
    decisions_disk=0.00311154,
)


# The share of the in-memory MinHash tables' growth that stays in memory once they are on scratch disk:
# per document its id, position and exact hash, 8 bytes of shingle offsets and ~40 bytes while a band is
# bucketed (about 650 bytes a document in all, measured on olmax/testing/dedup_pool.py's pool of 4 KB documents),
# against ~3.5 bytes a byte of text (`rss_minhash`) in memory; bench/peers/dedup_pool.py sets the whole
# estimate against a measured run.
SPILLED_RSS_SHARE = 0.05


@dataclass(frozen=True)
class StageEstimate:
    name: str
    memory: float  # peak RSS bytes while it runs
    disk: float  # bytes it leaves in the output folder
    cpu: float  # CPU seconds
    wall: float  # seconds on an idle machine


@dataclass(frozen=True)
class Estimate:
    input_bytes: int
    files: int
    partitions: int
    partition_bytes: int
    stages: tuple[StageEstimate, ...]

    @property
    def memory(self) -> float:
        return max(s.memory for s in self.stages)

    @property
    def disk(self) -> float:
        return sum(s.disk for s in self.stages)

    @property
    def cpu(self) -> float:
        return sum(s.cpu for s in self.stages)

    @property
    def wall(self) -> float:
        return sum(s.wall for s in self.stages)


def input_bytes(path: str) -> int:
    """A local input's decompressed size (a .gz or .zst file is streamed through, not parsed)."""
    if not os.path.exists(path):
        raise OlmaxError(f"{path}: --dry-run sizes local inputs only; no such file")
    if not (path.endswith(".gz") or path.endswith(".zst")):
        return os.path.getsize(path)
    n = 0
    with open(path, "rb") as raw:
        if path.endswith(".gz"):
            f = gzip.GzipFile(fileobj=raw)
        else:
            import zstandard

            f = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        while chunk := f.read(1 << 22):
            n += len(chunk)
    return n


def estimate(cfg: PrepareConfig, rates: Rates = RATES) -> Estimate:
    """The stages' costs for `cfg`'s inputs on this machine (module docstring's model)."""
    st = cfg.dedup
    files = [f for s in cfg.sources for pattern in s.inputs for f in readers.expand_inputs(pattern)]
    b = sum(input_bytes(f) for f in files)
    part = min(b, st.substring_partition_bytes)
    stages = [
        StageEstimate(
            "read + exact" if "exact" in st.stages else "read",
            rates.base_rss,
            0.0,
            rates.cpu_fixed + rates.cpu_read * b,
            rates.cpu_fixed + rates.cpu_read * b,
        )
    ]
    if "minhash" in st.stages:
        cpu = rates.cpu_minhash * b
        wall = cpu / max(1, cfg.workers)  # the shingling and signatures run on --workers threads
        tables = rates.rss_minhash * b
        if cfg.max_memory is not None and rates.base_rss + tables > spill_threshold(cfg.max_memory):
            # the tables move to scratch disk at the threshold (dedup_stages.plan), which is then the peak
            # unless what stays in memory, growing with the documents (their table, one band's keys),
            # passes it by the end
            # the switch comes when the resident memory (base + held tables) plus the held tables reach
            # the threshold: resident then about (threshold + base) / 2
            switch = (spill_threshold(cfg.max_memory) + rates.base_rss) / 2
            peak = max(switch, rates.base_rss + SPILLED_RSS_SHARE * tables)
            stages.append(StageEstimate("minhash (tables on disk)", peak, 0.0, cpu, wall))
        else:
            stages.append(StageEstimate("minhash", rates.base_rss + tables, 0.0, cpu, wall))
    if "substring" in st.stages:
        cpu = rates.cpu_substring * b
        stages.append(StageEstimate("substring", rates.base_rss + rates.rss_substring * part, 0.0, cpu, cpu))
    cpu = rates.shard_cpu * b
    disk = (rates.shard_disk + rates.decisions_disk) * b
    stages.append(
        StageEstimate("shards (tokenize, write)", rates.plain_rss, disk, cpu, cpu / max(1, cfg.workers))
    )
    partitions = max(1, math.ceil(b / st.substring_partition_bytes)) if "substring" in st.stages else 0
    return Estimate(b, len(files), partitions, st.substring_partition_bytes, tuple(stages))


def machine_memory() -> int:
    """This machine's physical memory in bytes (--max-memory's default)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def lines(e: Estimate, max_memory: int) -> list[str]:
    """The dry run's report."""
    mb = 1e6
    out = [
        f"olmax data prepare --dedup --dry-run: {e.files} input file(s), {e.input_bytes / mb:,.1f} MB "
        f"(rates: {RECORD})",
        f"  {'stage':<26} {'memory MB':>10} {'disk MB':>9} {'CPU s':>8} {'wall s':>8}",
    ]
    for s in e.stages:
        out.append(
            f"  {s.name:<26} {s.memory / mb:>10,.0f} {s.disk / mb:>9,.1f} {s.cpu:>8,.1f} {s.wall:>8,.1f}"
        )
    out.append(
        f"  {'peak / total':<26} {e.memory / mb:>10,.0f} {e.disk / mb:>9,.1f} {e.cpu:>8,.1f} {e.wall:>8,.1f}"
    )
    if e.partitions:
        out.append(
            f"  substring partitions: {e.partitions} of about {e.partition_bytes / mb:,.0f} MB of text "
            "(consecutive documents in input order)"
        )
    out.append(f"  --max-memory {max_memory / mb:,.0f} MB: {'fits' if e.memory <= max_memory else 'REFUSED'}")
    return out


def check_memory(e: Estimate, max_memory: int) -> None:
    """Refuse a run whose estimated peak exceeds `max_memory`, naming the stage and the fix."""
    if e.memory <= max_memory:
        return
    worst = max(e.stages, key=lambda s: s.memory)
    raise OlmaxError(
        f"the dedup run's estimated peak memory {e.memory / 1e6:,.0f} MB ({worst.name}, "
        f"{e.input_bytes / 1e6:,.0f} MB of input; rates from {RECORD}) exceeds --max-memory "
        f"{max_memory / 1e6:,.0f} MB; lower --substring-partition-bytes, split the inputs into runs, "
        "or raise --max-memory"
    )
