"""`jax.nn.dot_product_attention` as an attention kernel: XLA's own fused attention, cuDNN's on a GPU."""

from __future__ import annotations

import jax


def attend_jax(
    q_BxLxNxH: jax.Array,
    k_BxSxKxH: jax.Array,
    v_BxSxKxH: jax.Array,
    window: int | None,
    segment_ids_BxS: jax.Array | None = None,
    implementation: str | None = None,
) -> jax.Array:
    """`jax.nn.dot_product_attention`: causal, window (W - 1 keys left, 0 right), documents as a mask."""
    mask = None
    if segment_ids_BxS is not None:
        mask = (segment_ids_BxS[:, :, None] == segment_ids_BxS[:, None, :])[:, None]
    return jax.nn.dot_product_attention(
        q_BxLxNxH,
        k_BxSxKxH,
        v_BxSxKxH,
        mask=mask,
        is_causal=True,
        local_window_size=None if window is None else (window - 1, 0),
        implementation=implementation,
    )
