"""OLMo-core's perplexity sets: a raw token file (.npy) read and cut into instances as OLMo-core's LM evaluator does.

The file is raw token ids (uint32 for dolma2, no header); a document ends at each EOS, the EOS included
(OLMo-core's `iter_document_indices` over the array; tokens after the last EOS belong to no document and
are not scored, as there). Instance = one document cut to L tokens, right-padded (OLMo-core's
`NumpyPaddedFSLDataset`); its label mask is 1 on its n real tokens. OLMo-core's loss takes the
next-token target of position j < n - 1 (the last real position's target is padding or outside the
row: ignored, loss 0) and its LM evaluator averages the per-token losses selected by the label mask, so

    CE(label) = sum of the CE of the n - 1 real next-token targets of every instance / sum of n

An instance of n real tokens has n - 1 scored targets and weighs n; olmax reproduces that (a record's
`tokens` is the sum of n, `targets` the sum of n - 1). Every document is scored: OLMo-core's loader drops
the N mod B instances that do not fill a global batch, which changes nothing when B divides N.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from olmax.data.tokenfile import decode
from olmax.errors import OlmaxError
from olmax.evals.instances import Instances

DTYPE = np.uint32  # dolma2 ids do not fit uint16
WEIGHTING = (
    "olmo-core: CE summed over real next-token targets / label-mask count; an instance of n real "
    "tokens has n - 1 scored targets and weighs n"
)


def token_documents(path: str, eos_id: int, limit: int | None = None) -> tuple[list[np.ndarray], str]:
    """(documents, sha256 of the file) of raw token file `path`: split after each EOS, the first `limit`."""
    if not os.path.isfile(path):
        raise OlmaxError(f"eval token file {path}: no such file")
    size = os.path.getsize(path)
    item = np.dtype(DTYPE).itemsize
    if size == 0 or size % item:
        raise OlmaxError(
            f"eval token file {path}: {size} bytes is not a whole number of {np.dtype(DTYPE).name} "
            "tokens (expected OLMo-core's raw token array, no header)"
        )
    with open(path, "rb") as f:
        data = f.read()
    digest = hashlib.sha256(data).hexdigest()
    tokens = decode(data, DTYPE)
    ends = np.flatnonzero(tokens == eos_id) + 1
    if ends.size == 0:
        raise OlmaxError(
            f"eval token file {path}: no EOS ({eos_id}) in {tokens.size} tokens, so no document; is it "
            "tokenized with the eval tokenizer?"
        )
    if limit is not None:
        ends = ends[:limit]
    starts = np.concatenate([[0], ends[:-1]])
    return [tokens[s:e] for s, e in zip(starts.tolist(), ends.tolist())], digest


def build_padded_instances(docs: list[np.ndarray], seq_len: int, pad_id: int) -> Instances:
    """OLMo-core's padded instances of `docs` and the weights its LM evaluator divides by (module docstring)."""
    if seq_len < 2:
        raise OlmaxError(f"eval seq_len must be at least 2, got {seq_len}")
    n = len(docs)
    inputs = np.full((n, seq_len), pad_id, np.int32)
    mask = np.zeros((n, seq_len), np.float32)
    weights = np.zeros(n, np.int64)
    truncated = np.zeros(n, bool)
    for i, doc in enumerate(docs):
        row = doc[:seq_len]
        inputs[i, : row.size] = row
        mask[i, : row.size - 1] = 1.0  # target j = row[j + 1] for j < n - 1
        weights[i] = row.size
        truncated[i] = doc.size > seq_len
    targets = np.full_like(inputs, pad_id)
    targets[:, :-1] = inputs[:, 1:]
    return Instances(inputs, targets, mask, np.zeros(n, np.int64), truncated, weights)


def fingerprint(digest: str, n_docs: int) -> str:
    """A token set's content hash: the file's sha256 and how many of its documents were read."""
    return hashlib.sha256(f"olmax-tokenset/1\0{digest}\0{n_docs}".encode()).hexdigest()
