"""Eval instances: one document per row, truncated to L, right-padded with PAD, label mask on padding.

Row layout (default `prefix_eos=True`): `[EOS] + doc + [EOS]`, truncated to L tokens, then PAD. The
leading EOS is what precedes every document in the training stream (documents on disk are EOS-
terminated), so every token of the document is predicted, and so is its closing EOS, as in training.
Targets are the row shifted left by one (the last position is ignored) and a target is scored iff it is
not padding. `prefix_eos=False` gives OLMo-core's eval instance exactly (`doc + [EOS]`, first token
unscored).

Bytes: bits-per-byte = -loglik / (ln 2 x UTF-8 bytes), the bytes being those of the text the scored
targets spell: the whole document when nothing was cut (prefix_eos=True), else the UTF-8 length of the
decoded scored tokens (special tokens decode to nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from olmax.errors import OlmaxError


@dataclass(frozen=True)
class Instances:
    """N rows of length L: model inputs, next-token targets, and which targets count."""

    inputs: np.ndarray  # int32 (N, L): the row, right-padded with PAD
    targets: np.ndarray  # int32 (N, L): inputs shifted left; the last column is PAD
    mask: np.ndarray  # float32 (N, L): 1 where the target is a real token, 0 on padding and the last column
    n_bytes: np.ndarray  # int64 (N,): UTF-8 bytes of the text the scored targets spell
    truncated: np.ndarray  # bool (N,): the document did not fit in L
    weights: np.ndarray | None = None  # int64 (N,): what a row's CE is divided by; None: its scored targets

    @property
    def n_tokens(self) -> np.ndarray:
        """Scored targets per row."""
        return self.mask.sum(axis=1).astype(np.int64)

    @property
    def denominators(self) -> np.ndarray:
        """Per row, what its summed CE counts for in the token-weighted mean (olmax.evals.olmo_core_ppl)."""
        return self.n_tokens if self.weights is None else self.weights


def build_instances(
    docs_tokens: Sequence[Sequence[int]],
    texts: Sequence[str],
    seq_len: int,
    eos_id: int,
    pad_id: int,
    decode: Callable[[Sequence[int]], str] | None = None,
    prefix_eos: bool = True,
) -> Instances:
    """Rows for `docs_tokens` (ids without EOS) whose texts are `texts`; `decode` counts bytes of cut rows."""
    if seq_len < 2:
        raise OlmaxError(f"eval seq_len must be at least 2, got {seq_len}")
    n = len(docs_tokens)
    if len(texts) != n:
        raise OlmaxError(f"{n} token lists but {len(texts)} texts")
    inputs = np.full((n, seq_len), pad_id, np.int32)
    mask = np.zeros((n, seq_len), np.float32)
    n_bytes = np.zeros(n, np.int64)
    truncated = np.zeros(n, bool)
    for i, (doc, text) in enumerate(zip(docs_tokens, texts)):
        row = ([eos_id] if prefix_eos else []) + list(doc) + [eos_id]
        truncated[i] = len(row) > seq_len
        row = row[:seq_len]
        inputs[i, : len(row)] = row
        mask[i, : len(row) - 1] = 1.0  # target j = row[j + 1]
        if prefix_eos and not truncated[i]:
            n_bytes[i] = len(text.encode("utf-8"))
        else:
            if decode is None:
                raise OlmaxError(
                    "a truncated (or prefix_eos=False) instance needs `decode` to count its bytes"
                )
            scored = [t for t in row[1:] if t != eos_id]
            n_bytes[i] = len(decode(scored).encode("utf-8"))
    targets = np.full_like(inputs, pad_id)
    targets[:, :-1] = inputs[:, 1:]
    return Instances(inputs, targets, mask, n_bytes, truncated)
