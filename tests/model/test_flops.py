"""FLOP counts: keys attended match the real masks; matmul FLOPs match the traced forward pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from olmax.model.attention_xla import attention_mask
from olmax.model.flops import forward_flops, keys_attended
from olmax.model.model_config import FULL, olmo3_7b, tiny
from olmax.model.transformer import init_model

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.mark.parametrize("seq, window", [(1, None), (48, None), (48, 16), (16, 16), (10, 16), (100, 7)])
def test_keys_attended_equals_mask_count(seq, window):
    assert keys_attended(seq, window) == int(np.asarray(attention_mask(seq, seq, window)).sum())


def dot_flops(jaxpr) -> int:
    """2 * output size * contracted size for every dot_general, scan bodies times their length."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (lc, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            total += 2 * int(np.prod(eqn.outvars[0].aval.shape)) * int(np.prod([lhs[i] for i in lc]))
        for value in eqn.params.values():
            sub = getattr(value, "jaxpr", value)
            if hasattr(sub, "eqns"):
                total += dot_flops(sub) * (eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1)
    return total


def test_matmul_flops_match_traced_forward():
    # all layers full: the plain XLA kernel then computes every (query, key) pair, masked or not,
    # so the traced count is the formula's with L * L pairs in place of the L (L + 1) / 2 attended
    cfg = tiny(n_layers=5, layer_types=(FULL,) * 5, attention_impl="xla")
    seq = 24
    model = init_model(cfg)
    graphdef, state = nnx.split(model)
    traced = jax.make_jaxpr(lambda s, x: nnx.merge(graphdef, s)(x))(state, jnp.zeros((1, seq), jnp.int32))
    fl = forward_flops(cfg, seq)
    computed_pairs = cfg.n_layers * seq * seq
    attended_pairs = cfg.n_layers * keys_attended(seq, None)
    per_pair = 4 * cfg.n_heads * cfg.head_dim
    assert dot_flops(traced.jaxpr) == fl.total + per_pair * (computed_pairs - attended_pairs)


def test_7b_flops_per_token_by_hand():
    fl = forward_flops(olmo3_7b(), 8192)
    proj = 32 * 2 * 4096 * (4 * 4096)  # q, k, v, o: 4,294,967,296
    mlp = 32 * 2 * 3 * 4096 * 11008  # 8,657,043,456
    head = 2 * 4096 * 100_278  # real vocab: 821,477,376
    # full layers: (8192 + 1) / 2 keys per query; sliding: (4096 * 4097 / 2 + 4096 * 4096) / 8192
    pairs_per_token = 8 * 4096.5 + 24 * 3072.25
    attention = pairs_per_token * 4 * 4096
    assert fl.per_token == proj + mlp + head + attention == 15_518_482_432
    assert forward_flops(olmo3_7b(), 8192, padded_vocab=True).lm_head == 8192 * 2 * 4096 * 100_352
