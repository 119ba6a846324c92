"""What each step saw, and when a document was seen: `olmax data which` and `olmax data where`.

Steps are the trainer's: global step N (1-based, counted across epochs, as in `metrics.jsonl`) consumed
global batch N - 1 of the stream, i.e. batch b = (N - 1) mod B of epoch e = (N - 1) div B + 1, where B
is the number of global batches per epoch (N // G, OLMo-core's). A global batch is the same for any
process count (process I of P holds its rows I::P), so both answers are per global batch and row.

`which`: the rows of one batch, each instance (a window, or a packed row's documents) cut into the document segments it holds (source, file,
document id, token offsets within the document) through the document cache (olmax.data.documents).

`where`: the inverse question. The instances holding any token of a (file, token range) are found from
the index (`instances_covering`: instance j of a file is its tokens [jL, (j+1)L), a tail shorter than L
never served; or, for a packed stream, the packed instances of the documents overlapping the range); their positions in an epoch come from the inverse of that epoch's order, built once and kept
beside the order file (`order-...u32.inverse`, 4 bytes per instance, the order file's size), so a query
is a few lookups, never a replay of the stream.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

import numpy as np

from olmax.atomic import temp_path
from olmax.data.documents import DocumentCache
from olmax.data.loader import Loader
from olmax.data.order import CachedOrder
from olmax.errors import OlmaxError


def step_position(step: int, batches_per_epoch: int) -> tuple[int, int]:
    """(epoch, batch within the epoch) of global step `step` (1-based)."""
    if step < 1:
        raise OlmaxError(f"--step must be >= 1 (step N consumed global batch N - 1), got {step}")
    return 1 + (step - 1) // batches_per_epoch, (step - 1) % batches_per_epoch


def which(loader: Loader, step: int, docs: DocumentCache) -> dict:
    """The documents of global step `step` (1-based), row by row."""
    index = loader.index
    bpe = loader.batches_per_epoch
    epoch, batch = step_position(step, bpe)
    g, seq = loader.spec.global_batch_size, loader.spec.seq_len
    ids = loader.epoch_order(epoch).take(batch * g, (batch + 1) * g).astype(np.int64)
    labels = index.labels
    rows = []
    for r, inst in enumerate(ids.tolist()):
        spans = index.instance_documents(inst)  # one window, or a packed row's documents in row order
        segments = []
        for f, a, b in spans:
            d = docs.get(index.paths[f])
            first = max(0, int(d.doc_at(np.asarray([a]))[0]))
            for k in range(first, len(d.starts)):
                s, e = int(d.starts[k]), int(d.ends[k])
                if s >= b:
                    break
                if e <= a:
                    continue
                segments.append(
                    {
                        "source": labels[f],
                        "file": index.paths[f],
                        "doc_id": d.id_of(k),
                        "start": max(a, s) - s,
                        "end": min(b, e) - s,
                    }
                )
        rows.append({"row": r, "instance": inst, "file_offset": spans[0][1], "segments": segments})
    return {
        "step": step,
        "epoch": epoch,
        "batch_in_epoch": batch,
        "seq_len": seq,
        "global_batch_size": g,
        "rows": rows,
    }


class InverseOrder:
    """position[instance] of one epoch's order: memory-mapped beside a cached order file (built once),
    else computed in memory (small indexes, the stateless Feistel order)."""

    def __init__(self, loader: Loader, epoch: int, *, progress: bool = False):
        n = loader.index.num_instances
        order = loader.epoch_order(epoch)
        if isinstance(order, CachedOrder):
            path = order.path + ".inverse"
            if not (os.path.isfile(path) and os.path.getsize(path) == 4 * n):
                build_inverse_file(order.path, path, n, progress=progress)
            self.position = np.memmap(path, dtype=np.uint32, mode="r", shape=(n,))
        else:
            perm = order.take(0, n).astype(np.int64)
            self.position = np.empty(n, dtype=np.int64)
            self.position[perm] = np.arange(n, dtype=np.int64)


def build_inverse_file(order_path: str, path: str, n: int, *, progress: bool = False) -> None:
    """Write the inverse of the order file `order_path` (N uint32) to `path`, atomically.

    The inverse is scattered into one in-memory uint32 array (4N bytes: 2.9 GB at stage 1; the order file
    is read through its mapping, page cache) and written out sequentially: scattered writes into a file's
    mapping re-dirty pages the kernel keeps writing back, far slower at stage 1 (docs/scale.md)."""
    from tqdm import tqdm

    perm = np.memmap(order_path, dtype=np.uint32, mode="r", shape=(n,))
    step = 1 << 22
    bar = tqdm(
        total=n, desc="inverse order", unit="inst", unit_scale=True, disable=None if progress else True
    )
    inv = np.empty(n, dtype=np.uint32)
    for a in range(0, n, step):
        b = min(n, a + step)
        inv[perm[a:b]] = np.arange(a, b, dtype=np.uint32)
        bar.update(b - a)
    bar.close()
    with temp_path(path) as tmp, open(tmp, "wb") as f:
        for a in range(0, n, step):
            f.write(memoryview(inv[a : a + step]))
    del inv


@dataclass(frozen=True)
class Span:
    """Tokens [start, end) of one file of the mix (a path listed twice in the mix is both entries)."""

    file: str
    start: int
    end: int


def instances_of(loader: Loader, span: Span) -> np.ndarray:
    """int64: global ids of the instances holding any token of `span` (every mix entry of the file)."""
    index = loader.index
    target = file_key(span.file)
    out, found = [], False
    for f, p in enumerate(index.paths):
        if file_key(p) != target:
            continue
        found = True
        out.append(index.instances_covering(f, span.start, span.end))
    if not found:
        raise OlmaxError(f"{span.file}: not a file of the mix")
    return np.concatenate(out) if out else np.zeros(0, np.int64)


@cache  # asked for every mix entry of every span: one realpath each per command
def file_key(path: str) -> str:
    """A path as compared with the mix's: the real path of a local file, a URL as given."""
    return path if "://" in path else os.path.realpath(path)


def where(
    loader: Loader,
    spans: list[Span],
    *,
    epochs: int | None = None,
    until_step: int | None = None,
    inverses: dict[int, InverseOrder] | None = None,
) -> list[dict]:
    """Every (global step, row, instance) whose instance holds a token of any of `spans`, by step, up to
    `until_step` (inclusive) or through `epochs` epochs (default 1). `inverses` caches the epochs'
    inverse orders across calls."""
    bpe, g = loader.batches_per_epoch, loader.spec.global_batch_size
    if until_step is not None:
        if until_step < 0:
            raise OlmaxError(f"--until-step must be >= 0, got {until_step}")
        epochs = max(1, -(-until_step // bpe))
    epochs = epochs or 1
    ids = (
        np.unique(np.concatenate([instances_of(loader, s) for s in spans]))
        if spans
        else np.zeros(0, np.int64)
    )
    inverses = {} if inverses is None else inverses
    hits = []
    for e in range(1, epochs + 1):
        if not ids.size:
            break
        if e not in inverses:
            inverses[e] = InverseOrder(loader, e)
        pos = np.asarray(inverses[e].position[ids], dtype=np.int64)
        served = pos < bpe * g
        for inst, p in zip(ids[served].tolist(), pos[served].tolist()):
            step = (e - 1) * bpe + p // g + 1
            if until_step is None or step <= until_step:
                hits.append({"step": step, "epoch": e, "row": p % g, "instance": inst})
    hits.sort(key=lambda h: (h["step"], h["row"]))
    return hits
