"""The OLMo 3 decoder: embedding, reordered-norm blocks scanned in groups of 4, final norm, untied head.

Contract: `Transformer(cfg, rngs=...)(input_ids_BxL)` returns fp32 logits (B, L, vocab_size) and is a
pure function of the parameters and inputs (no dropout, no state), so it is deterministic under `jit`.
Parameters are fp32; activations run in `cfg.dtype`. Layer parameters are stacked on a leading axis
(n_layers, ...); the forward pass scans over groups of `cfg.scan_group` layers, one period of the
sliding/full pattern, so each layer's window stays static and compile time does not grow with depth.
`segment_ids_BxL` (optional) masks attention to the query's own document; RoPE positions stay 0..L-1,
which is the same thing for attention since RoPE scores depend only on relative position.
Written in Flax NNX: modules hold their parameters as plain attributes, so HF conversion is a copy into
a dict of arrays and any layer can be pulled out and run on its own (`Transformer.layer(i)`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from olmax.model import attention_splash, remat, sharding
from olmax.model.attention import Attention, linear, resolve_impl, truncated_normal
from olmax.model.model_config import FULL, SLIDING, ModelConfig
from olmax.model.norm import RMSNorm
from olmax.model.remat import tag
from olmax.model.rope import rope_tables


class MLP(nnx.Module):
    """SwiGLU: down(silu(x @ gate) * (x @ up)), no biases."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        d, f = cfg.d_model, cfg.mlp_hidden
        self.gate_proj = nnx.Param(truncated_normal(rngs, (d, f), cfg.init_std))
        self.up_proj = nnx.Param(truncated_normal(rngs, (d, f), cfg.init_std))
        self.down_proj = nnx.Param(truncated_normal(rngs, (f, d), cfg.init_std))

    def __call__(self, x_BxLxD: jax.Array) -> jax.Array:
        gate_BxLxF = jax.nn.silu(tag(linear(x_BxLxD, self.gate_proj[...]), "gate"))
        up_BxLxF = tag(linear(x_BxLxD, self.up_proj[...]), "up")
        return tag(linear(gate_BxLxF * up_BxLxF, self.down_proj[...]), "down")


class Block(nnx.Module):
    """Reordered norm: h = x + RMSNorm(Attn(x)); out = h + RMSNorm(MLP(h))."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.attn = Attention(cfg, rngs=rngs)
        self.attn_norm = RMSNorm(cfg.d_model, cfg.rms_eps)
        self.mlp = MLP(cfg, rngs=rngs)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.rms_eps)

    def __call__(
        self,
        x_BxLxD: jax.Array,
        cos_LxH: jax.Array,
        sin_LxH: jax.Array,
        window: int | None,
        segment_ids_BxL: jax.Array | None = None,
    ) -> jax.Array:
        h_BxLxD = x_BxLxD + self.attn_norm(self.attn(x_BxLxD, cos_LxH, sin_LxH, window, segment_ids_BxL))
        return h_BxLxD + self.mlp_norm(self.mlp(h_BxLxD))


def scan_plan(cfg: ModelConfig) -> tuple[int, int]:
    """(groups scanned, layers per group); layers after groups * size run unrolled one by one."""
    g = cfg.scan_group
    n_groups = cfg.n_layers // g if g > 0 else 0
    periodic = all(cfg.layer_types[i] == cfg.layer_types[i % g] for i in range(n_groups * g))
    return (n_groups, g) if periodic and n_groups > 0 else (0, max(g, 1))


class Transformer(nnx.Module):
    """OLMo 3 causal LM; call as `model(input_ids_BxL, segment_ids_BxL=None)` -> fp32 logits BxLxV."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        v, vp, d = cfg.vocab_size, cfg.padded_vocab, cfg.d_model
        # padding rows/columns never change a real token's logit and are dropped on export; OLMo-core draws
        # them like the others (they then enter the training softmax), "zero" zeroes them
        pad_rows = (jnp.arange(vp) < (v if cfg.vocab_padding == "zero" else vp))[:, None]
        self.embed = nnx.Param(truncated_normal(rngs, (vp, d), cfg.init_std) * pad_rows)
        make_blocks = nnx.split_rngs(splits=cfg.n_layers)(
            nnx.vmap(lambda r: Block(cfg, rngs=r), in_axes=0, out_axes=0)
        )
        self.blocks = make_blocks(rngs)
        self.final_norm = RMSNorm(d, cfg.rms_eps)
        self.lm_head = nnx.Param(truncated_normal(rngs, (d, vp), cfg.init_std) * pad_rows.T)

    def __call__(self, input_ids_BxL: jax.Array, segment_ids_BxL: jax.Array | None = None) -> jax.Array:
        return self.head(self.hidden(input_ids_BxL, segment_ids_BxL))

    def head(self, x_BxLxD: jax.Array, padded: bool = False) -> jax.Array:
        """fp32 logits of final hidden states over the real vocabulary (or the padded one)."""
        cfg = self.cfg
        # slicing the (D, V) weight, not the (B, L, V) logits, keeps the big output a single write
        w_DxV = self.lm_head[...] if padded else self.lm_head[:, : cfg.vocab_size]
        return jnp.einsum(
            "bld,dv->blv", x_BxLxD, w_DxV.astype(x_BxLxD.dtype), preferred_element_type=jnp.float32
        )

    def layer(self, i: int) -> Block:
        """Layer `i` as a standalone Block (a view on slice i of the stacked parameters)."""
        graphdef, state = nnx.split(self.blocks)
        return nnx.merge(graphdef, jax.tree.map(lambda a: a[i], state))

    def hidden(
        self, input_ids_BxL: jax.Array, segment_ids_BxL: jax.Array | None = None, *, repeat: int = 1
    ) -> jax.Array:
        """Final-normed hidden states (B, L, D) in the compute dtype: what the LM head reads.

        `repeat` runs the scanned layer groups that many times over (the gradient of each weight then sums
        its uses): a deep model's work and activations on the weights of a shallow one, which is how a
        benchmark times the 7B's 32 layers on one chip (bench/chip/tpu_slice.py). Training uses 1."""
        cfg = self.cfg
        dtype = jnp.dtype(cfg.dtype)
        x_BxLxD = sharding.lookup(self.embed[...], input_ids_BxL, dtype)
        positions_L = jnp.arange(input_ids_BxL.shape[1])
        # YaRN (stage 3) rescales RoPE on the full-attention layers only
        rope = {
            SLIDING: rope_tables(positions_L, cfg.head_dim, cfg.theta(SLIDING)),
            FULL: rope_tables(positions_L, cfg.head_dim, cfg.theta(FULL), cfg.rope_scaling),
        }
        graphdef, state = nnx.split(self.blocks)

        def run_layer(layer_state: nnx.State, x: jax.Array, layer: int) -> jax.Array:
            block = nnx.merge(graphdef, layer_state)
            cos, sin = rope[cfg.layer_types[layer]]
            return block(x, cos, sin, cfg.window(layer), segment_ids_BxL)

        if cfg.remat != "none":
            run_layer = jax.checkpoint(run_layer, policy=remat.policy(cfg.remat), static_argnums=(2,))

        n_groups, g = scan_plan(cfg)
        if n_groups:
            grouped = jax.tree.map(lambda a: a[: n_groups * g].reshape(n_groups, g, *a.shape[1:]), state)

            def run_group(x: jax.Array, group_state: nnx.State) -> tuple[jax.Array, None]:
                for p in range(g):  # layer p of every group has the same type as layer p of group 0
                    x = run_layer(jax.tree.map(lambda a, p=p: a[p], group_state), x, p)
                return x, None

            def run_groups(x: jax.Array, _: None = None) -> tuple[jax.Array, None]:
                return jax.lax.scan(run_group, x, grouped)[0], None

            if repeat == 1:
                x_BxLxD, _ = run_groups(x_BxLxD)
            else:
                x_BxLxD, _ = jax.lax.scan(run_groups, x_BxLxD, None, length=repeat)
        elif repeat != 1:
            raise ValueError(f"repeat={repeat} needs scanned layer groups (model.scan_group)")
        for layer in range(n_groups * g, cfg.n_layers):
            x_BxLxD = run_layer(jax.tree.map(lambda a, i=layer: a[i], state), x_BxLxD, layer)

        return self.final_norm(x_BxLxD)


def compute_summary(cfg: ModelConfig, seq_len: int, devices: list | None = None) -> dict[str, str]:
    """What a step of `cfg` at `seq_len` runs on `devices` (default: JAX's): the device, the attention kernel
    `auto` resolves to there (with the splash kernel's tiling) and the remat policy, as the trainer prints and
    logs it."""
    devices = jax.devices() if devices is None else devices
    device = devices[0]
    impl = resolve_impl(cfg.attention_impl, jnp.dtype(cfg.dtype), seq_len, cfg.head_dim, device.platform)
    kernel = impl
    if impl == "splash":
        tiles = attention_splash.settings_for(seq_len, cfg.head_dim, cfg.splash_block)
        sizes = tiles.block_sizes(seq_len, seq_len)
        backward = "fused backward" if tiles.fused_bwd else "separate dq and dk/dv kernels"
        kernel = f"splash ({sizes.block_q}x{sizes.block_kv} tiles, {backward})"
    elif impl == "xla" and 0 < cfg.attention_chunk < seq_len:
        kernel = f"xla (query chunks of {cfg.attention_chunk})"
    return {
        "device": f"{len(devices)} x {device.device_kind} ({device.platform})",
        "attention": kernel,
        "remat": remat.describe(cfg.remat),
        "dtype": cfg.dtype,
    }


def init_model(cfg: ModelConfig, seed: int = 0) -> Transformer:
    """A randomly initialised model (truncated normal std cfg.init_std, norms at one)."""
    return Transformer(cfg, rngs=nnx.Rngs(seed))


def count_params(cfg: ModelConfig, padded: bool = False) -> int:
    """Parameters of `cfg` (real vocabulary unless `padded`), from the shapes alone."""
    v = cfg.padded_vocab if padded else cfg.vocab_size
    qd, kvd = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    attn = cfg.d_model * (2 * qd + 2 * kvd) + qd + kvd
    mlp = 3 * cfg.d_model * cfg.mlp_hidden
    return 2 * v * cfg.d_model + cfg.d_model + cfg.n_layers * (attn + mlp + 2 * cfg.d_model)
