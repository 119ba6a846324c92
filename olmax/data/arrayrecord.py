"""Per-document ArrayRecord files (`prepare --format arrayrecord`): one record per document.

Each record is a serialized `tf.train.Example` with features `input_ids` (int64 list: the document's
tokens, EOS included), `id` and `source` (bytes), so MaxText's Grain ArrayRecord pipeline, `tf.io`, or
`decode_record` here can read it. The protobuf is encoded by hand (vectorized varints), so no TensorFlow
is needed; the layout is the standard Example wire format. Files are written under a temporary name and
renamed when complete, like the shards they sit beside (`code-00000.arrayrecord` next to `code-00000.npy`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _varints(values: np.ndarray) -> bytes:
    """Protobuf varints of non-negative integers < 2**35, vectorized."""
    v = values.astype(np.uint64)
    nbytes = np.ones(v.shape, dtype=np.int64)
    for k in range(1, 5):
        nbytes += v >= (1 << (7 * k))
    cols = np.stack([(v >> np.uint64(7 * k)) & np.uint64(0x7F) for k in range(5)], axis=1).astype(np.uint8)
    cont = np.arange(5)[None, :] < (nbytes[:, None] - 1)
    cols |= cont.astype(np.uint8) << 7
    keep = np.arange(5)[None, :] < nbytes[:, None]
    return cols[keep].tobytes()


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_example(tokens: np.ndarray, doc_id: str, source: str) -> bytes:
    """tf.train.Example{features{input_ids: Int64List, id: BytesList, source: BytesList}}."""

    def entry(key: str, feature: bytes) -> bytes:  # map<string, Feature> entry
        return _field(1, _field(1, key.encode()) + _field(2, feature))

    ids = _field(3, _field(1, _varints(tokens)))  # Feature.int64_list = 3; Int64List.value = 1 (packed)
    fid = _field(1, _field(1, doc_id.encode("utf-8")))  # Feature.bytes_list = 1; BytesList.value = 1
    fsrc = _field(1, _field(1, source.encode("utf-8")))
    features = entry("id", fid) + entry("input_ids", ids) + entry("source", fsrc)
    return _field(1, features)  # Example.features = 1


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        result |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, bytes]]:
    out, i = [], 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        if key & 7 != 2:
            raise ValueError(f"unexpected protobuf wire type {key & 7}")
        n, i = _read_varint(buf, i)
        out.append((key >> 3, buf[i : i + n]))
        i += n
    return out


def decode_record(record: bytes) -> dict:
    """Inverse of `encode_example` → {"input_ids": np.ndarray[uint32], "id": str, "source": str}."""
    ((_, features),) = _fields(record)
    out: dict = {}
    for _, entry in _fields(features):
        parts = dict(_fields(entry))
        key = parts[1].decode()
        ((kind, inner),) = _fields(parts[2])
        if kind == 3:
            ((_, packed),) = _fields(inner)
            vals, i = [], 0
            while i < len(packed):
                v, i = _read_varint(packed, i)
                vals.append(v)
            out[key] = np.array(vals, dtype=np.uint32)
        else:
            ((_, raw),) = _fields(inner)
            out[key] = raw.decode("utf-8")
    return out


class DocRecordWriter:
    """Writes one Example per document into `path` (via a temporary name)."""

    def __init__(self, path: Path):
        from array_record.python.array_record_module import ArrayRecordWriter

        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        self._w = ArrayRecordWriter(str(self.tmp), "group_size:1")

    def add_docs(self, tokens: np.ndarray, lengths: list[int], docs: list) -> None:
        start = 0
        for n, doc in zip(lengths, docs):
            self._w.write(encode_example(tokens[start : start + n], doc.id, doc.src))
            start += n

    def close(self) -> None:
        self._w.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self._w.close()
        self.tmp.unlink(missing_ok=True)


def read_records(path: str | Path) -> list[bytes]:
    from array_record.python.array_record_module import ArrayRecordReader

    r = ArrayRecordReader(str(path))
    try:
        return r.read_all()
    finally:
        r.close()


def split_records(path: Path, n_first: int, first: Path, second: Path) -> None:
    """Split an ArrayRecord file after its first `n_first` records (used when a mix splits a shard)."""
    from array_record.python.array_record_module import ArrayRecordWriter

    records = read_records(path)
    for dest, part in ((first, records[:n_first]), (second, records[n_first:])):
        tmp = dest.with_name(dest.name + ".tmp")
        w = ArrayRecordWriter(str(tmp), "group_size:1")
        for rec in part:
            w.write(rec)
        w.close()
        os.replace(tmp, dest)
