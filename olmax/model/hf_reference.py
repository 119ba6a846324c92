"""Random HF `Olmo3ForCausalLM` checkpoints built in code (no hub): the reference side of parity tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Small OLMo-3-shaped defaults. Every OLMo 3 value is explicit: HF's class defaults (vocab 50304,
# eps 1e-5, eos 50279) are not OLMo 3's.
SMALL = dict(
    vocab_size=1000,
    hidden_size=64,
    intermediate_size=160,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    sliding_window=16,
    rms_norm_eps=1e-6,
    max_position_embeddings=512,
    eos_token_id=999,
    pad_token_id=998,
    bos_token_id=None,
    rope_theta=500_000.0,
)


def random_hf_model(seed: int = 0, dtype: str = "float32", **config: Any):
    """An `Olmo3ForCausalLM` with random weights; norm scales are randomised too (1 + N(0, 0.2))."""
    import torch
    from transformers import Olmo3Config, Olmo3ForCausalLM

    torch.manual_seed(seed)
    cfg = Olmo3Config(**{**SMALL, **config})
    model = Olmo3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
    model.config._attn_implementation = "eager"
    return model.to({"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype])


def save_random_checkpoint(
    path: str | os.PathLike, seed: int = 0, dtype: str = "float32", **config: Any
) -> Path:
    """Save a random checkpoint (config.json + safetensors) to `path` and return it."""
    model = random_hf_model(seed, dtype, **config)
    model.save_pretrained(str(path))
    return Path(path)
