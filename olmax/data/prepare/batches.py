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

from olmax import storage
from olmax.data import readers
from olmax.data.prepare.prepare_config import PrepareConfig
from olmax.data.tokenize import Tokenizer

# ~4 MB of text per tokenizer task: gigatoken's per-call cost is a tenth of a 1 MB call and near nothing
# of a 4 MB one; small enough that reading, the workers and writing still overlap
BATCH_TEXT_BYTES = 4 << 20


BatchDoc = tuple[int, readers.Doc, int]  # (file index, document, bad lines read before it)


def return_freed_arrays() -> None:
    """glibc only (elsewhere nothing): allocations of 1 MiB and more (the batches' arrays) are mapped on
    their own and unmapped when freed. glibc otherwise raises its mmap threshold after the first such free,
    and the batches' arrays, made in the worker threads' own arenas, stay with the allocator once freed:
    the resident memory then grew by about a byte per byte of text (11 GiB for a 10 GB pool with the
    tables on disk, bench/peers/dedup_pool.py)."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD: fixed, so never raised
    except (OSError, AttributeError):
        pass


@dataclass
class Utf8Batch:
    """A batch whose texts are UTF-8 back to back (the compiled reader's, `readers.read_jsonl_utf8`):
    `docs[i]`'s text is `utf8[offsets[i]:offsets[i + 1]]`, already `strip()`ped for `--dolma-compat`; its
    `Doc.text` is "" and never read."""

    docs: list[BatchDoc]
    utf8: bytes
    offsets: np.ndarray
    eos: np.ndarray  # bool per document: its text is followed by the end-of-text token's text
    eos_bytes: int  # the UTF-8 size of that text (0: no EOS in the texts)


def _utf8_input(path: str) -> bool:
    """Whether `read_batches(utf8=...)` reads this input with the compiled reader: a local jsonl file."""
    return (
        readers.native_jsonl is not None
        and storage.local_path(path) is not None
        and not readers.is_table(path)
    )


def read_batches(
    files: list[str],
    cfg: PrepareConfig,
    text_field: str,
    start: tuple[int, int],
    stats: readers.ReadStats,
    first_file: int = 0,
    utf8: str | None = None,
) -> Iterator[list[BatchDoc] | Utf8Batch]:
    """Documents from input position `start` = (file index, last loc done), in batches of ~4 MB of text,
    each with the number of bad lines `stats` had counted when it was read (so a count can be tied to a
    position in the input, whichever thread reads ahead). `first_file` numbers `files[0]`.

    `utf8` (not None): a local jsonl file comes as `Utf8Batch`es (texts as UTF-8, stripped for
    `cfg.dolma_compat`, no Python string per text) when the compiled reader is built, each text followed by
    `utf8` (the tokenizer's `eos_text`; "" for nothing; see `encode_docs`); any other input as lists of
    `BatchDoc`. The same documents either way, with the same tokens once encoded (`encode_docs`)."""
    form = readers.Utf8Form(
        strip=cfg.dolma_compat, eos=(utf8 or "").encode("utf-8"), eos_once=cfg.dolma_compat
    )
    batch: list[BatchDoc] = []
    size = 0
    small: list[tuple[int, readers.Utf8Docs]] = []  # pieces of less than a batch, joined when they add up
    small_size = 0
    for fi in range(start[0], len(files)):
        after = start[1] if fi == start[0] else 0
        if utf8 is not None and _utf8_input(files[fi]):
            if batch:
                yield batch
                batch, size = [], 0
            parts = readers.read_jsonl_utf8(
                files[fi], text_field, cfg.id_field, cfg.skip_bad_lines, after, stats, form
            )
            for part in parts:
                if len(part.utf8) >= BATCH_TEXT_BYTES // 2 and not small:
                    yield _utf8_batch([(fi + first_file, part)], len(form.eos))
                    continue
                small.append((fi + first_file, part))
                small_size += len(part.utf8)
                if small_size >= BATCH_TEXT_BYTES:
                    yield _utf8_batch(small, len(form.eos))
                    small, small_size = [], 0
            continue
        if small:
            yield _utf8_batch(small, len(form.eos))
            small, small_size = [], 0
        for doc in readers.read_documents(
            files[fi], text_field, cfg.id_field, cfg.skip_bad_lines, after, stats
        ):
            batch.append((fi + first_file, doc, stats.bad_lines))
            size += len(doc.text)
            if size >= BATCH_TEXT_BYTES:
                yield batch
                batch, size = [], 0
    if small:
        yield _utf8_batch(small, len(form.eos))
    if batch:
        yield batch


def _utf8_batch(parts: list[tuple[int, readers.Utf8Docs]], eos_bytes: int) -> Utf8Batch:
    """One batch of the compiled reader's pieces (file index, piece); more than one are joined (a copy)."""
    docs = [(fi, doc, bad) for fi, part in parts for doc, bad in zip(part.docs, part.bad)]
    if len(parts) == 1:
        part = parts[0][1]
        return Utf8Batch(docs, part.utf8, part.offsets, part.eos, eos_bytes)
    shifts = np.cumsum([0] + [len(part.utf8) for _, part in parts])
    offsets = np.concatenate([[0]] + [part.offsets[1:] + shift for (_, part), shift in zip(parts, shifts)])
    eos = np.concatenate([part.eos for _, part in parts])
    return Utf8Batch(docs, b"".join(part.utf8 for _, part in parts), offsets, eos, eos_bytes)


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


def encode_docs(tok: Tokenizer, batch: list[BatchDoc] | Utf8Batch, dolma_compat: bool = False) -> Encoded:
    """Tokenize a batch (`Encoded`) in one engine call on this thread.

    `dolma_compat` reproduces `dolma tokens` (1.2.1): it tokenizes `text.strip()`, skips documents empty
    after stripping, and appends EOS only when the last token is not already EOS."""
    if isinstance(batch, Utf8Batch):
        sizes = np.diff(batch.offsets)
        empty = sizes == 0
        ids, offsets = tok.encode_utf8(batch.utf8, batch.offsets)
        if empty.any():  # an empty text has no token: its document goes, the others' offsets stay
            offsets = np.concatenate([offsets[:1], offsets[1:][~empty]])
            kept = [d for d, e in zip(batch.docs, empty.tolist()) if not e]
        else:
            kept = batch.docs
        kept_at, empty_at = np.flatnonzero(~empty).tolist(), np.flatnonzero(empty).tolist()
        if not batch.eos_bytes:
            tokens, lengths = _eos_after(tok, ids, offsets, dolma_compat)
            return Encoded(tokens, lengths, kept, sizes[~empty].tolist(), kept_at, empty_at)
        # each text came with EOS written after it (`Tokenizer.eos_text`): the engine's ids are the shard's
        nbytes = (sizes - batch.eos * batch.eos_bytes)[~empty].tolist()
        return Encoded(ids, np.diff(offsets).tolist(), kept, nbytes, kept_at, empty_at)
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
    tokens, lengths = _eos_after(tok, ids, offsets, dolma_compat)
    return Encoded(tokens, lengths, kept, nbytes, kept_at, empty_at)


def _eos_after(tok: Tokenizer, ids: np.ndarray, offsets: np.ndarray, dolma_compat: bool):
    """(tokens, lengths): each document's ids (at `offsets`) followed by EOS (see `encode_docs`)."""
    ends = offsets[1:]
    add_eos = np.ones(len(offsets) - 1, dtype=bool)
    if dolma_compat and ids.size:
        # a text whose last token is EOS already (written as `<|endoftext|>`) gets no second one
        add_eos = ~((ends > offsets[:-1]) & (ids[np.maximum(ends - 1, 0)] == tok.eos_token_id))
    tokens = with_eos(ids, offsets, add_eos, tok.eos_token_id)
    return tokens, (np.diff(offsets) + add_eos).tolist()


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
        raise readers.lone_surrogate(doc, e) from None
    return size.value
