"""`olmax data prepare`'s settings, as plain data: the run (`PrepareConfig`), its sources (`SourceSpec`) and its
dedup stages (`DedupSettings`). Nothing here reads or writes a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from olmax.dedup.params import MinHashParams
from olmax.errors import OlmaxError

STAGES = ("exact", "minhash", "substring")


@dataclass(frozen=True)
class SourceSpec:
    """One labelled source: its inputs and (from a mix spec) how many tokens of it the mix plans."""

    label: str
    inputs: tuple[str, ...]
    target_tokens: float | None = None
    ratio: float | None = None
    max_repetition: float = 1.0
    text_field: str | None = None


@dataclass(frozen=True)
class PrepareConfig:
    tokenizer: str
    out: str
    sources: tuple[SourceSpec, ...]
    workers: int = 1
    shard_bytes: int = 1_000_000_000  # as `dolma tokens` writes: ~1 GB of uint32 tokens per shard
    text_field: str = "text"
    id_field: str = "id"
    skip_bad_lines: bool = False
    overwrite: bool = False
    arrayrecord: bool = False
    total_tokens: float | None = None
    engine: str = "auto"
    progress: bool = True
    dolma_compat: bool = (
        False  # tokenize text.strip() and skip EOS after a trailing EOS, as `dolma tokens` does
    )
    dedup: DedupSettings | None = None  # --dedup stages (dedup_stages.py); None: none
    # --max-memory (bytes): with --dedup, the MinHash tables move to scratch disk before the run would
    # pass `spill_threshold(max_memory)`, the same decisions in bounded memory (None: they stay in memory)
    max_memory: int | None = None


@dataclass(frozen=True)
class DedupSettings:
    stages: tuple[str, ...]
    minhash: MinHashParams = field(default_factory=MinHashParams)
    substring_min_bytes: int = 500
    substring_partition_bytes: int = 128 << 20

    def check(self) -> None:
        if "minhash" in self.stages:
            self.minhash.check()
        if self.substring_min_bytes < 1:
            raise OlmaxError(f"--substring-min-bytes must be at least 1; got {self.substring_min_bytes}")
        if self.substring_partition_bytes < 1:
            raise OlmaxError(
                f"--substring-partition-bytes must be at least 1 byte; got {self.substring_partition_bytes}"
            )


def parse_stages(text: str) -> tuple[str, ...]:
    """'minhash,exact' → ('exact', 'minhash'): the stages named, in Dolma 3's order."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in names if s not in STAGES]
    if bad or not names:
        raise OlmaxError(
            f"--dedup {text!r}: unknown stage {bad[0] if bad else '(none)'!r}; give a comma list of "
            f"{', '.join(STAGES)} (applied in that order)"
        )
    return tuple(s for s in STAGES if s in names)
