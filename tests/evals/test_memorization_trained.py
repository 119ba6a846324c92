"""A real tiny OLMo 3 model trained to memorize a few documents: the extraction probe and the
exposure-stratified loss flag it; the same model before training does not."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from olmax.evals.exposure_file import Exposure
from olmax.evals.memorization import Thresholds, check_exposure, check_extraction
from olmax.model import init_model, tiny

L = 64


def exposure(rng) -> Exposure:
    rows = rng.integers(0, 990, (24, L))
    counts = np.repeat([50, 0, 1], 8)  # 8 memorized documents, 8 unseen, 8 seen once (not trained here)
    return Exposure(np.arange(24), counts, np.asarray(["web"] * 24), rows, L, None, None, "trained")


def train(model, docs, steps=120, lr=1e-2):
    graphdef, params = nnx.split(model)
    opt = optax.adam(lr)
    state = opt.init(params)

    def loss(p, ids):
        logits = nnx.merge(graphdef, p)(ids[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, ids[:, 1:]).mean()

    @jax.jit
    def step(p, s, ids):
        val, g = jax.value_and_grad(loss)(p, ids)
        upd, s = opt.update(g, s, p)
        return optax.apply_updates(p, upd), s, val

    ids = jnp.asarray(docs, jnp.int32)
    for _ in range(steps):
        params, state, val = step(params, state, ids)
    return nnx.merge(graphdef, params), float(val)


@pytest.mark.slow
def test_trained_memorization_is_flagged():
    exp = exposure(np.random.default_rng(0))
    th = Thresholds()
    fresh = init_model(tiny(), seed=0)
    before = check_extraction(fresh, exp, th)
    assert before["status"] == "ok" and before["over_served"]["exact_match_rate"] == 0.0
    assert check_exposure(fresh, exp, th, probe_len=L)["status"] == "ok"

    model, final_loss = train(init_model(tiny(), seed=0), exp.tokens[:8])
    assert final_loss < 0.1, final_loss
    ext = check_extraction(model, exp, th)
    assert ext["flagged"] and ext["over_served"]["exact_match_rate"] >= 0.75
    assert ext["as_planned"]["exact_match_rate"] == 0.0
    stratified = check_exposure(model, exp, th, probe_len=L)
    assert stratified["flagged"]
    web = stratified["sources"]["web"]
    assert web["as_planned"]["ce"] - web["over_served"]["ce"] > 1.0
