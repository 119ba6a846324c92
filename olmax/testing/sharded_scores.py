"""A checkpoint scored on several meshes: fixed random rows in fp32, one result per mesh, so a sharded
eval can be held to the one-device eval (tests/evals/test_sharded_eval.py, bench/chip/tpu_eval.py)."""

from __future__ import annotations

from typing import Any


def scores_on_meshes(checkpoint: str, meshes: list[str], rows: int = 12, length: int = 33) -> dict[str, Any]:
    """Per mesh spec: the per-row CE of `rows` fixed rows of `length` tokens (ids below 998, 90% of the
    positions scored, seed 0), the greedy tokens, the mesh, and how the LM head was sharded on it."""
    import numpy as np

    from olmax.evals.eval_mesh import describe
    from olmax.evals.scoring import load_model, score

    rng = np.random.default_rng(0)
    ids = rng.integers(0, 998, (rows, length)).astype(np.int32)
    mask = (rng.random((rows, length - 1)) < 0.9).astype(np.float32)
    out = {}
    for spec in meshes:
        model = load_model(checkpoint, "float32", spec)
        nll, count, greedy = score(model, ids[:, :-1], ids[:, 1:], mask, batch_size=4)
        head = model.params["lm_head"]
        out[spec] = {
            "ce": (nll / count).tolist(),
            "greedy": greedy.tolist(),
            "mesh": describe(model.mesh),
            "devices": model.mesh.size,
            "head_shard": list(head.addressable_shards[0].data.shape),
            "head_devices": len(head.sharding.device_set),
        }
    return out
