"""MinHash LSH settings (Dolma 3's by default), shared by `olmax data prepare --dedup` and
`olmax audit dedup/loader --near`; plain data without numba, so a command's `--help` builds its options
from these fields (olmax/cli_fields.py) without loading the kernels of olmax/dedup/minhash.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from olmax.cli_fields import named, setting
from olmax.errors import OlmaxError

MAX_HASHES = 1024  # bands x rows: 4 KB of signature per document at most


@dataclass(frozen=True)
class MinHashParams:
    """Shingle size, LSH bands x rows and the verified Jaccard of a near-duplicate (options --minhash-*)."""

    CONFIG_KEY: ClassVar[str] = "minhash"

    ngram: int = setting(
        5, "n-gram shingle size in normalized words (default 5; the audits decode the tokens first)"
    )
    bands: int = setting(26, "LSH bands (default 26)")
    rows: int = setting(11, "hashes per band (default 11)")
    threshold: float = setting(
        0.8, "true Jaccard a candidate pair must reach to be a near-duplicate (default 0.8)"
    )

    @property
    def hashes(self) -> int:
        return self.bands * self.rows

    def check(self) -> None:
        """Bad settings as one `olmax: error:` line naming the flag, the key and what fits."""

        def name(field: str) -> str:
            return named(MinHashParams, field, prefix="minhash_")

        if self.ngram < 1:
            raise OlmaxError(f"{name('ngram')} must be at least 1; got {self.ngram}")
        if self.bands < 1 or self.rows < 1 or self.hashes > MAX_HASHES:
            raise OlmaxError(
                f"{name('bands')} = {self.bands} x {name('rows')} = {self.rows}: {self.hashes} hashes do "
                f"not fit: both must be at least 1 and bands x rows at most {MAX_HASHES} "
                "(Dolma 3: 26 x 11 = 286)"
            )
        if not (0.0 < self.threshold <= 1.0):
            raise OlmaxError(
                f"{name('threshold')} must be in (0, 1] (a Jaccard similarity); got {self.threshold}"
            )


@dataclass(frozen=True)
class NearSettings:
    """`audit dedup/loader --near`: prepare's MinHash settings and the tokenizer.json the shards were
    prepared with (their tokens are decoded to text and shingled as prepare shingles its input)."""

    minhash: MinHashParams
    tokenizer: str
