"""Shared builders for the loader tests: token files whose tokens are their own global positions."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

# Uneven sizes: tails of every length, one file barely above L=16, one with exactly 4 windows.
SIZES = (1000, 37, 513, 2048, 77, 700, 64, 391)
LABELS = ("web", "code", "web", "books", "code", "web", "math", "books")


def write_position_files(folder: str, sizes: Sequence[int] = SIZES, labels: Sequence[str] = LABELS) -> str:
    """Write raw uint32 files whose token at global position p is p, and a mix.txt; return its path."""
    os.makedirs(folder, exist_ok=True)
    lines, base = ["# positions mix", ""], 0
    for i, (n, label) in enumerate(zip(sizes, labels)):
        np.arange(base, base + n, dtype=np.uint32).tofile(os.path.join(folder, f"part-{i:03d}.npy"))
        lines.append(f"{label},part-{i:03d}.npy")
        base += n
    path = os.path.join(folder, "mix.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def file_starts(sizes: Sequence[int] = SIZES) -> np.ndarray:
    """Global position of each file's first token."""
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


def expected_rows(instance_ids: np.ndarray, seq_len: int, sizes: Sequence[int] = SIZES) -> np.ndarray:
    """The tokens instance i must hold, computed by brute force from the file sizes (no olmax code)."""
    windows = []
    for f, n in enumerate(sizes):
        for w in range(n // seq_len):
            windows.append(file_starts(sizes)[f] + w * seq_len)
    starts = np.asarray(windows, dtype=np.int64)[np.asarray(instance_ids, dtype=np.int64)]
    return (starts[:, None] + np.arange(seq_len)[None, :]).astype(np.int32)


def olmo_core_loader(
    paths: Sequence[str],
    seq_len: int,
    global_batch_size: int,
    seed: int,
    work_dir: str,
    *,
    dp_world_size: int = 1,
    dp_rank: int = 0,
):
    """OLMo-core's NumpyFSLDataLoader over `paths` (G in sequences), with dolma2 special tokens."""
    from olmo_core.data import DataCollator, NumpyDataLoaderBase, NumpyFSLDataset

    dataset = NumpyFSLDataset(
        *paths,
        sequence_length=seq_len,
        pad_token_id=100277,
        eos_token_id=100257,
        vocab_size=100278,
        dtype=np.uint32,
    )
    dataset.work_dir = work_dir
    return NumpyDataLoaderBase.wrap_numpy_dataset(
        dataset,
        global_batch_size=global_batch_size * seq_len,
        collator=DataCollator(pad_token_id=100277),
        work_dir=work_dir,
        seed=seed,
        dp_world_size=dp_world_size,
        dp_rank=dp_rank,
    )


def olmo_core_epoch(loader, epoch: int) -> list[np.ndarray]:
    """All of one epoch's local batches from an OLMo-core loader, as (input_ids, index) pairs."""
    loader.reshuffle(epoch=epoch)
    out = [(b["input_ids"].numpy().astype(np.int32), b["index"].numpy()) for b in loader]
    loader.reset()
    return out
