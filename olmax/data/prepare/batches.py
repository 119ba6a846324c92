"""Prepare's documents in batches: read from the inputs in order (`read_batches`, what every pass of prepare
reads: the dedup stages, the local and the Beam runner), read ahead on a thread (`prefetch`) and tokenized
(`encode_docs`)."""

from __future__ import annotations

import bisect
import ctypes
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from olmax.data import readers
from olmax.data.prepare.config import PrepareConfig
from olmax.data.tokenize import Tokenizer
from olmax.errors import OlmaxError

# ~4 MB of text per tokenizer task: gigatoken's per-call cost is a tenth of a 1 MB call and near nothing
# of a 4 MB one; small enough that reading, the workers and writing still overlap
BATCH_TEXT_BYTES = 4 << 20


BatchDoc = tuple[int, readers.Doc, int]  # (file index, document, bad lines read before it)


def return_freed_arrays() -> None:
    """glibc only (elsewhere nothing): allocations of 1 MiB and more (the batches' arrays) are mapped on
    their own and unmapped when freed. glibc otherwise raises its mmap threshold after the first such free,
    and the batches' arrays, made in the worker threads' own arenas, stay with the allocator once freed:
    the resident memory then grew by about a byte per byte of text (11 GiB for a 10 GB pool with the
    tables on disk, bench/dedup_pool.py)."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD: fixed, so never raised
    except (OSError, AttributeError):
        pass


def read_batches(
    files: list[str],
    cfg: PrepareConfig,
    text_field: str,
    start: tuple[int, int],
    stats: readers.ReadStats,
    first_file: int = 0,
) -> Iterator[list[BatchDoc]]:
    """Documents from input position `start` = (file index, last loc done), in batches of ~1 MB of text,
    each with the number of bad lines `stats` had counted when it was read (so a count can be tied to a
    position in the input, whichever thread reads ahead). `first_file` numbers `files[0]`."""
    batch: list[BatchDoc] = []
    size = 0
    for fi in range(start[0], len(files)):
        after = start[1] if fi == start[0] else 0
        for doc in readers.read_documents(
            files[fi], text_field, cfg.id_field, cfg.skip_bad_lines, after, stats
        ):
            batch.append((fi + first_file, doc, stats.bad_lines))
            size += len(doc.text)
            if size >= BATCH_TEXT_BYTES:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def prefetch(it: Iterator, depth: int) -> Iterator:
    """Run `it` in a background thread (JSON parsing overlaps tokenization); re-raise its errors here."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def work() -> None:
        try:
            for item in it:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(done)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            q.put(e)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


@dataclass
class Encoded:
    """A tokenized batch: the kept documents' tokens (each followed by EOS) and lengths, the kept
    `BatchDoc`s and their UTF-8 bytes, and where in the batch the kept and the skipped (empty) ones were."""

    tokens: np.ndarray
    lengths: list[int]
    kept: list[BatchDoc]
    nbytes: list[int]
    kept_at: list[int]
    empty_at: list[int]

    def empties_before(self, j: int) -> int:
        """Empty documents of this batch read before its j-th kept document."""

        return bisect.bisect_left(self.empty_at, self.kept_at[j])


def encode_docs(tok: Tokenizer, batch: list[BatchDoc], dolma_compat: bool = False) -> Encoded:
    """Tokenize a batch (`Encoded`) in one engine call on this thread.

    `dolma_compat` reproduces `dolma tokens` (1.2.1): it tokenizes `text.strip()`, skips documents empty
    after stripping, and appends EOS only when the last token is not already EOS."""
    kept, texts, nbytes, kept_at, empty_at = [], [], [], [], []
    for at, (fi, doc, bad) in enumerate(batch):
        text = doc.text.strip() if dolma_compat else doc.text
        if not text:
            empty_at.append(at)
            continue
        nbytes.append(utf8_length(text, doc))
        kept.append((fi, doc, bad))
        kept_at.append(at)
        texts.append(text)
    ids, offsets = tok.encode_flat(texts, utf8_checked=True)
    ends = offsets[1:]
    add_eos = np.ones(len(texts), dtype=bool)
    if dolma_compat and ids.size:
        # a text whose last token is EOS already (written as `<|endoftext|>`) gets no second one
        add_eos = ~((ends > offsets[:-1]) & (ids[np.maximum(ends - 1, 0)] == tok.eos_token_id))
    tokens = with_eos(ids, offsets, add_eos, tok.eos_token_id)
    lengths = (np.diff(offsets) + add_eos).tolist()
    return Encoded(tokens, lengths, kept, nbytes, kept_at, empty_at)


def with_eos(ids: np.ndarray, offsets: np.ndarray, add_eos: np.ndarray, eos: int) -> np.ndarray:
    """`ids` (documents at `offsets`) with `eos` after each document where `add_eos`. Documents of 256
    tokens and more on average are copied a slice each (half of `np.insert`'s cost, which builds a boolean
    mask over the whole output); shorter ones by `np.insert` (a Python step per document would cost more)."""
    n = len(add_eos)
    if ids.size < 256 * n:
        return np.insert(ids, offsets[1:][add_eos], np.uint32(eos))
    out = np.empty(ids.size + int(np.count_nonzero(add_eos)), dtype=np.uint32)
    bounds, flags, shift = offsets.tolist(), add_eos.tolist(), 0
    for i in range(n):
        start, end = bounds[i], bounds[i + 1]
        out[start + shift : end + shift] = ids[start:end]
        if flags[i]:
            out[end + shift] = eos
            shift += 1
    return out


# CPython's own UTF-8 form of a str, made once and kept with the str: the engine reads the same one
_as_utf8 = ctypes.pythonapi.PyUnicode_AsUTF8AndSize
_as_utf8.restype = ctypes.c_void_p
_as_utf8.argtypes = [ctypes.py_object, ctypes.POINTER(ctypes.c_ssize_t)]


def utf8_length(text: str, doc: readers.Doc) -> int:
    """The UTF-8 size of a document's text; a lone surrogate (not valid Unicode) is an error naming it.
    A non-ASCII text's size comes from the UTF-8 copy CPython keeps with the str, which the engine then
    reads instead of encoding the text a second time."""
    if text.isascii():
        return len(text)
    size = ctypes.c_ssize_t()
    try:
        _as_utf8(text, ctypes.byref(size))
    except UnicodeEncodeError as e:
        raise lone_surrogate(doc, e) from None
    return size.value


def lone_surrogate(doc: readers.Doc, e: UnicodeEncodeError) -> OlmaxError:
    """The error for a document whose text holds a lone surrogate (`e`: its UTF-8 encoding's failure)."""
    return OlmaxError(
        f"{doc.src}:{doc.loc}: document {doc.id!r} holds a lone surrogate escape at "
        f"character {e.start} (not valid Unicode); fix the escape in the JSON"
    )
