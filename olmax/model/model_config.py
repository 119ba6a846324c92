"""Typed OLMo 3 model configs, the published presets, and the mapping to and from HF `config.json`."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from olmax.errors import OlmaxError
from olmax.model import remat

FULL = "full_attention"
SLIDING = "sliding_attention"
AttentionImpl = Literal["auto", "xla", "splash", "jax", "cudnn"]


@dataclass(frozen=True)
class YarnConfig:
    """YaRN RoPE scaling, applied to the full-attention layers only (OLMo 3 stage 3)."""

    factor: float = 8.0  # stage 3: 65,536 / 8,192 (OLMo 3 long-context recipe)
    original_max_position_embeddings: int = 8192  # the stage 1-2 sequence length
    beta_fast: float = 32.0  # YaRN paper defaults, as HF `_compute_yarn_parameters`
    beta_slow: float = 1.0
    attention_factor: float | None = None  # None: 0.1 * ln(factor) + 1 (YaRN paper)
    truncate: bool = True  # round the correction range to whole dims (HF default)

    @property
    def mscale(self) -> float:
        if self.attention_factor is not None:
            return float(self.attention_factor)
        return 1.0 if self.factor <= 1 else 0.1 * math.log(self.factor) + 1.0


@dataclass(frozen=True)
class ModelConfig:
    """The shape and numerics of one OLMo 3 network; `layer_types[i]` is FULL or SLIDING."""

    vocab_size: int = 100_278  # dolma2 tokenizer (docs/olmo3.md)
    d_model: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 32
    head_dim: int = 128
    mlp_hidden: int = 11_008  # OLMo-core llama_like: int(8 * 4096 / 3) = 10,922 rounded up to x256
    vocab_multiple: int = 128  # embedding rows padded to 100,352 = 784 x 128
    # the padding rows/columns of the embedding and head: "olmo-core" initialises them like the others and
    # keeps their logits in the training softmax and z-loss (as OLMo-core does); "zero" zeroes them and
    # masks their logits. Model outputs (evals, HF export) cover the real vocabulary either way.
    vocab_padding: str = "olmo-core"
    rms_eps: float = 1e-6  # OLMo-core olmo2_7B layer_norm_eps
    rope_theta: float = 500_000.0  # OLMo-core olmo2_7B rope_theta
    sliding_rope_theta: float | None = None  # None: rope_theta (HF configs may set one per layer type)
    rope_scaling: YarnConfig | None = None  # stage 3 only, full-attention layers only
    sliding_window: int | None = 4096  # OLMo-core olmo3_7B pattern [4096, 4096, 4096, -1]
    layer_types: tuple[str, ...] = ()  # () means the OLMo 3 pattern: full iff i % 4 == 3
    max_position_embeddings: int = 8192  # stage 1-2 sequence length
    bos_token_id: int | None = None  # dolma2 has no BOS
    eos_token_id: int | None = 100_257  # <|endoftext|>
    pad_token_id: int | None = 100_277  # <|pad|>
    init_std: float = 0.02  # truncated normal (docs/olmo3.md)
    dtype: str = "float32"  # compute dtype; params stay fp32
    attention_impl: AttentionImpl = "auto"
    attention_chunk: int = 256  # xla path: scan over query chunks past this length (0: never)
    splash_block: int = 0  # splash kernel's tile edge (0: the measured best for the shape, attention_splash)
    remat: str = "none"  # none, full, dots, a preset or save:NAME,... (olmax.model.remat)
    scan_group: int = 4  # layers per scanned group: one period of the attention pattern
    hf_dtype: str = "float32"  # dtype the HF checkpoint stored; `to_hf` writes it back
    extra_hf: tuple[tuple[str, Any], ...] = field(default=(), compare=False)  # passthrough keys

    def __post_init__(self) -> None:
        if not self.layer_types:
            kinds = tuple(FULL if i % 4 == 3 else SLIDING for i in range(self.n_layers))
            object.__setattr__(self, "layer_types", kinds)
        else:
            object.__setattr__(self, "layer_types", tuple(self.layer_types))
        if len(self.layer_types) != self.n_layers:
            raise OlmaxError(
                f"layer_types has {len(self.layer_types)} entries for {self.n_layers} layers; "
                "give one per layer"
            )
        bad = set(self.layer_types) - {FULL, SLIDING}
        if bad:
            raise OlmaxError(f"unknown layer types {sorted(bad)}; use {FULL!r} or {SLIDING!r}")
        if self.n_heads % self.n_kv_heads:
            raise OlmaxError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise OlmaxError(f"head_dim {self.head_dim} must be even for RoPE")
        if self.attention_impl not in typing.get_args(AttentionImpl):
            raise OlmaxError(
                f"model.attention_impl {self.attention_impl!r}: choose one of {', '.join(typing.get_args(AttentionImpl))}"
            )
        remat.check(self.remat)
        if self.vocab_padding not in ("olmo-core", "zero"):
            raise OlmaxError(f"vocab_padding {self.vocab_padding!r}: choose 'olmo-core' or 'zero'")

    @property
    def loss_vocab(self) -> int:
        """Logit columns in the training softmax and z-loss: the padded vocabulary under OLMo-core's rule."""
        return self.padded_vocab if self.vocab_padding == "olmo-core" else self.vocab_size

    @property
    def padded_vocab(self) -> int:
        m = self.vocab_multiple
        return -(-self.vocab_size // m) * m

    def theta(self, layer_type: str) -> float:
        """RoPE base of a layer type."""
        if layer_type == SLIDING and self.sliding_rope_theta is not None:
            return self.sliding_rope_theta
        return self.rope_theta

    def window(self, layer: int) -> int | None:
        """Keys a query sees in `layer` (itself included), None for full causal attention."""
        return self.sliding_window if self.layer_types[layer] == SLIDING else None

    def replace(self, **changes: Any) -> ModelConfig:
        if "n_layers" in changes and "layer_types" not in changes:
            changes["layer_types"] = ()
        return dataclasses.replace(self, **changes)


def olmo3_7b(**overrides: Any) -> ModelConfig:
    """OLMo 3 7B (OLMo-core `TransformerConfig.olmo3_7B`): MHA, 32 x 4096, SwiGLU 11,008."""
    return ModelConfig(**overrides)


def olmo3_32b(**overrides: Any) -> ModelConfig:
    """OLMo 3 32B (OLMo-core `olmo2_32B` shape): 64 layers, d 5120, 40 heads, GQA with 8 KV heads."""
    base: dict[str, Any] = dict(
        d_model=5120, n_layers=64, n_heads=40, n_kv_heads=8, head_dim=128, mlp_hidden=27_648
    )  # OLMo-core hidden_size_multiplier 27648 / (8 * 5120 / 3)
    return ModelConfig(**{**base, **overrides})


def olmo3_7b_hd256(**overrides: Any) -> ModelConfig:
    """The 7B co-design variant: 16 heads x head_dim 256 (same 4096-wide q/k/v, so same params and FLOPs)."""
    return ModelConfig(**{**dict(n_heads=16, n_kv_heads=16, head_dim=256), **overrides})


def tiny(**overrides: Any) -> ModelConfig:
    """A few-MB OLMo-3-shaped model for tests: 4 layers (one full), window 16, GQA 4/2, vocab 1,000.

    The demo recipe (configs/tiny.yaml) overrides the vocabulary with dolma2's 100,278 to read real shards.
    """
    base: dict[str, Any] = dict(
        vocab_size=1000,
        d_model=64,
        n_layers=4,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        mlp_hidden=160,
        sliding_window=16,
        max_position_embeddings=256,
        eos_token_id=999,
        pad_token_id=998,
    )
    return ModelConfig(**{**base, **overrides})


PRESETS = {"olmo3_7b": olmo3_7b, "olmo3_32b": olmo3_32b, "olmo3_7b_hd256": olmo3_7b_hd256, "tiny": tiny}

# HF keys this module interprets; anything else in config.json is carried through `extra_hf`.
_KNOWN_HF_KEYS = {
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "sliding_window",
    "layer_types",
    "max_position_embeddings",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "initializer_range",
    "torch_dtype",
    "dtype",
    "tie_word_embeddings",
    "attention_bias",
    "hidden_act",
    "architectures",
    "model_type",
    "transformers_version",
    "attention_dropout",
    "use_cache",
}


def _rope_from_hf(hf: Mapping[str, Any], where: str) -> tuple[float, float | None, YarnConfig | None]:
    """Thetas (full, sliding or None if equal) and the full-attention YaRN, from either HF rope layout.

    Nested `rope_parameters` (what transformers 5 writes) are read per layer type. A legacy top-level
    `rope_theta` applies to every layer, as OLMo-core means it; note that transformers 5.x itself reads
    a legacy `rope_theta` into the full-attention layers only and gives sliding ones its 500,000 default,
    which is the same thing for every OLMo 3 checkpoint (theta 500,000).
    """
    sliding_theta = None
    params = hf.get("rope_parameters")
    if params and isinstance(params.get(FULL), Mapping):
        full, sliding = dict(params[FULL]), dict(params.get(SLIDING) or {})
        if sliding.get("rope_type", "default") != "default":
            raise OlmaxError(
                f"{where}: rope_parameters.{SLIDING} uses {sliding['rope_type']!r}; OLMo 3 "
                'scales RoPE on full-attention layers only. Set it to {"rope_type": "default"}'
            )
        if sliding.get("rope_theta", full.get("rope_theta")) != full.get("rope_theta"):
            sliding_theta = float(sliding["rope_theta"])
        scaling: Mapping[str, Any] | None = full
    elif params:
        scaling = params
    else:
        scaling = hf.get("rope_scaling") or {}
    theta = float(scaling.get("rope_theta", hf.get("rope_theta", 500_000.0)))
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return theta, sliding_theta, None
    if kind != "yarn":
        raise OlmaxError(f"{where}: rope type {kind!r} is not supported; OLMo 3 uses default or yarn")
    if scaling.get("mscale") or scaling.get("mscale_all_dim"):
        raise OlmaxError(f"{where}: YaRN mscale/mscale_all_dim are not used by OLMo 3; remove them")
    yarn = YarnConfig(
        factor=float(scaling["factor"]),
        original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
        beta_fast=float(scaling.get("beta_fast") or 32.0),
        beta_slow=float(scaling.get("beta_slow") or 1.0),
        attention_factor=scaling.get("attention_factor"),
        # transformers reads `truncate` from the top level of its (always nested) Olmo3 rope dict, so
        # it is True for every Olmo3 checkpoint whatever the file says
        truncate=True,
    )
    return theta, sliding_theta, yarn


def from_hf_config(hf: Mapping[str, Any], where: str = "config.json", **overrides: Any) -> ModelConfig:
    """Build a ModelConfig from an HF Olmo3 `config.json` dict; `where` names the file in errors."""
    if hf.get("model_type", "olmo3") != "olmo3":
        raise OlmaxError(
            f"{where}: model_type is {hf.get('model_type')!r}; expected 'olmo3' (Olmo3ForCausalLM)"
        )
    if hf.get("tie_word_embeddings", False):
        raise OlmaxError(f"{where}: tie_word_embeddings is true; OLMo 3 has an untied LM head")
    if hf.get("attention_bias", False):
        raise OlmaxError(f"{where}: attention_bias is true; OLMo 3 has no biases")
    if hf.get("hidden_act", "silu") != "silu":
        raise OlmaxError(f"{where}: hidden_act {hf['hidden_act']!r}; OLMo 3's SwiGLU uses 'silu'")
    missing = [
        k
        for k in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
        )
        if k not in hf
    ]
    if missing:
        # HF class defaults (vocab 50304, eps 1e-5, ...) are not OLMo 3's, so never fill them in silently
        raise OlmaxError(
            f"{where}: missing {missing}; write them into the config (HF class defaults are not OLMo 3's)"
        )
    n_heads = int(hf["num_attention_heads"])
    theta, sliding_theta, yarn = _rope_from_hf(hf, where)
    eos = hf.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    dtype = hf.get("torch_dtype") or hf.get("dtype") or "float32"
    cfg = dict(
        vocab_size=int(hf["vocab_size"]),
        d_model=int(hf["hidden_size"]),
        n_layers=int(hf["num_hidden_layers"]),
        n_heads=n_heads,
        n_kv_heads=int(hf.get("num_key_value_heads") or n_heads),
        head_dim=int(hf.get("head_dim") or int(hf["hidden_size"]) // n_heads),
        mlp_hidden=int(hf["intermediate_size"]),
        rms_eps=float(hf.get("rms_norm_eps", 1e-5)),  # HF's class default when absent, as transformers does
        rope_theta=theta,
        sliding_rope_theta=sliding_theta,
        rope_scaling=yarn,
        sliding_window=hf.get("sliding_window", 4096),
        layer_types=tuple(hf.get("layer_types") or ()),
        max_position_embeddings=int(hf.get("max_position_embeddings", 2048)),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=eos,
        pad_token_id=hf.get("pad_token_id"),
        init_std=float(hf.get("initializer_range", 0.02)),
        hf_dtype=str(dtype).replace("torch.", ""),
        extra_hf=tuple(sorted((k, v) for k, v in hf.items() if k not in _KNOWN_HF_KEYS)),
    )
    cfg.update(overrides)
    try:
        return ModelConfig(**cfg)
    except OlmaxError as e:
        raise OlmaxError(f"{where}: {e}") from e


def to_hf_config(cfg: ModelConfig) -> dict[str, Any]:
    """The HF `config.json` dict for `cfg`.

    RoPE is written twice: nested `rope_parameters` per layer type (read by transformers 5, which would
    otherwise give sliding layers its default theta) and the legacy `rope_theta` / `rope_scaling` pair
    that earlier Olmo3 releases read.
    """
    out: dict[str, Any] = dict(cfg.extra_hf)
    out.update(
        architectures=["Olmo3ForCausalLM"],
        model_type="olmo3",
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.mlp_hidden,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        hidden_act="silu",
        max_position_embeddings=cfg.max_position_embeddings,
        initializer_range=cfg.init_std,
        rms_norm_eps=cfg.rms_eps,
        rope_theta=cfg.rope_theta,
        rope_scaling=None,
        sliding_window=cfg.sliding_window,
        layer_types=list(cfg.layer_types),
        attention_bias=False,
        attention_dropout=0.0,
        tie_word_embeddings=False,
        bos_token_id=cfg.bos_token_id,
        eos_token_id=cfg.eos_token_id,
        pad_token_id=cfg.pad_token_id,
        torch_dtype=cfg.hf_dtype,
        use_cache=True,
    )
    if cfg.head_dim * cfg.n_heads != cfg.d_model:
        out["head_dim"] = cfg.head_dim
    if cfg.rope_scaling is not None:
        y = cfg.rope_scaling
        out["rope_scaling"] = dict(
            rope_type="yarn",
            factor=y.factor,
            beta_fast=y.beta_fast,
            beta_slow=y.beta_slow,
            original_max_position_embeddings=y.original_max_position_embeddings,
        )
        if y.attention_factor is not None:
            out["rope_scaling"]["attention_factor"] = y.attention_factor
    out["rope_parameters"] = {
        FULL: {"rope_type": "default", "rope_theta": cfg.theta(FULL), **(out["rope_scaling"] or {})},
        SLIDING: {"rope_type": "default", "rope_theta": cfg.theta(SLIDING)},
    }
    return out
