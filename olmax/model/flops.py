"""Exact forward matmul FLOPs of an OLMo 3 model, counting the keys each query actually attends to.

A multiply-add is 2 FLOPs. Counted: q/k/v/o projections, QK^T and PV (per query, over the keys its
causal or sliding window lets it see), the SwiGLU matmuls and the LM head (over the real vocabulary,
which is what the forward pass multiplies by; `padded_vocab=True` counts the padded width instead). Not counted: norms, RoPE, softmax, SiLU and
the embedding gather, which are elementwise or free and together well under 1% at 7B.
A training step costs 3x the forward (backward = 2x forward), which the trainer applies for MFU.

Also what a remat policy (olmax.model.remat) costs a model: the forward FLOPs its backward runs again
(`recompute_flops`) and the bytes a layer keeps per token (`kept_bytes_per_token`).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp

from olmax.model import remat
from olmax.model.model_config import ModelConfig


def keys_attended(seq_len: int, window: int | None) -> int:
    """Sum over query positions 0..L-1 of the keys visible to it: i + 1, capped at the window."""
    if window is None or window >= seq_len:
        return seq_len * (seq_len + 1) // 2
    # the first W queries see 1..W keys, every later one sees exactly W
    return window * (window + 1) // 2 + (seq_len - window) * window


@dataclass(frozen=True)
class FlopCount:
    """Forward FLOPs of one sequence of `seq_len` tokens, by component."""

    seq_len: int
    projections: int  # q, k, v, o, all layers
    attention: int  # QK^T + PV over attended keys, all layers
    mlp: int  # gate, up, down, all layers
    lm_head: int

    @property
    def total(self) -> int:
        return self.projections + self.attention + self.mlp + self.lm_head

    @property
    def per_token(self) -> float:
        return self.total / self.seq_len


def forward_flops(cfg: ModelConfig, seq_len: int, padded_vocab: bool = False) -> FlopCount:
    """Forward FLOPs for one sequence of `seq_len` tokens of `cfg` (no intra-document masking)."""
    d, qd, kvd = cfg.d_model, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    per_token_proj = 2 * d * (2 * qd + 2 * kvd)
    per_token_mlp = 2 * 3 * d * cfg.mlp_hidden
    # per (query, key) pair: QK^T and PV each cost 2 * head_dim per query head
    per_pair = 2 * 2 * qd
    pairs = sum(keys_attended(seq_len, cfg.window(i)) for i in range(cfg.n_layers))
    vocab = cfg.padded_vocab if padded_vocab else cfg.vocab_size
    return FlopCount(
        seq_len=seq_len,
        projections=cfg.n_layers * seq_len * per_token_proj,
        attention=per_pair * pairs,
        mlp=cfg.n_layers * seq_len * per_token_mlp,
        lm_head=seq_len * 2 * d * vocab,
    )


def flops_per_token(cfg: ModelConfig, seq_len: int, padded_vocab: bool = False) -> float:
    """Average forward FLOPs per token over a sequence of `seq_len` tokens."""
    return forward_flops(cfg, seq_len, padded_vocab).per_token


def recompute_flops(cfg: ModelConfig, spec: str, seq_len: int) -> float:
    """Forward FLOPs per token (all layers) the backward pass runs again under remat policy `spec`: every
    matmul whose output is not kept (each feeds something the backward needs) and the attention forward
    unless `context` is kept."""
    kept = remat.kept_names(spec)
    d, f = cfg.d_model, cfg.mlp_hidden
    qd, kvd = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    width = {"q": d * qd, "k": d * kvd, "v": d * kvd, "o": qd * d, "gate": d * f, "up": d * f, "down": f * d}
    per_token = sum(2 * w for n, w in width.items() if n not in kept) * cfg.n_layers
    if "context" not in kept:
        per_token += forward_flops(cfg, seq_len).attention / seq_len
    return float(per_token)


def kept_bytes_per_token(cfg: ModelConfig, spec: str) -> int:
    """Bytes one layer keeps for the backward pass per token under `spec`, its input included (`none`:
    the named outputs only, a lower bound: it keeps every intermediate)."""
    d, f = cfg.d_model, cfg.mlp_hidden
    qd, kvd = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    item = jnp.dtype(cfg.dtype).itemsize
    size = {"q": qd, "k": kvd, "v": kvd, "o": d, "down": d, "gate": f, "up": f, "context": qd}
    total = sum(size[n] * item for n in remat.kept_names(spec))
    if "context" in remat.kept_names(spec):
        total += 4 * cfg.n_heads  # the log-sum-exp, fp32 per head
    return total + (0 if spec == "none" else d * item)
