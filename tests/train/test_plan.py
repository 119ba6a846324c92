"""olmax.train.plan, collectives and slice_model on this CPU: topology names, auto's ladder, the collectives
read from a compiled module (a scan's trip count, clones counted once), and the step-time model's arithmetic.
Compiling for a real TPU slice is tests/train/test_plan_tpu.py (slow, libtpu)."""

import os
import subprocess
import sys

import pytest

from olmax.errors import OlmaxError
from olmax.model import remat
from olmax.model.flops import recompute_flops
from olmax.train.collectives import Collective, summarize, whole_gradient_all_reduces
from olmax.train.config import load_config
from olmax.train.plan import candidates, kept_activation_bytes, parse_topology, with_settings
from olmax.train.slice_model import StepShape, Torus, collective_seconds, ingress_bytes_per_s, predict


@pytest.mark.parametrize(
    ("name", "libtpu", "chips", "hosts"),
    [
        ("v5e-256", "v5e:16x16", 256, (2, 2, 1)),
        ("v5e-64", "v5e:8x8", 64, (2, 2, 1)),
        ("v5e-8", "v5e:2x4", 8, (2, 4, 1)),
        ("v5litepod-4", "v5e:2x2", 4, (2, 2, 1)),
        ("v5p-128", "v5:4x4x4", 64, (2, 2, 1)),
        ("v5p-512", "v5:4x8x8", 256, (2, 2, 1)),
        ("v6e-64", "v6e:8x8", 64, (2, 2, 1)),
    ],
)
def test_topology_names_are_cloud_tpus(name, libtpu, chips, hosts):
    t = parse_topology(name)
    assert (t.libtpu_name, t.chips, t.host_bounds, t.name) == (
        libtpu,
        chips,
        hosts,
        name.replace("v5litepod", "v5e"),
    )


@pytest.mark.parametrize("bad", ["v5e-3", "v5p-129", "v4-8", "256", "v5e-256x"])
def test_a_wrong_topology_names_the_sizes(bad):
    with pytest.raises(OlmaxError, match="--topology"):
        parse_topology(bad)


def test_auto_walks_the_ladder_at_each_halving_of_the_rows():
    cfg = load_config("olmo3_7b_stage1", ["data.mix=x", "model.remat=auto"])
    got = candidates(cfg, 64)  # 8 rows a chip, per_device_batch 2: tried at 2, then 1
    assert got[:2] == [("none", 2), ("none", 1)] and got[-1] == ("full", 1)
    assert [p for p, _ in got[::2]] == list(remat.LADDER)
    fixed = load_config("olmo3_7b_stage1", ["data.mix=x", "model.remat=full"])
    assert candidates(fixed, 256) == [("full", 2), ("full", 1)]


def test_kept_activations_follow_the_policy():
    cfg = load_config("olmo3_7b_stage1", ["data.mix=x"])
    full = kept_activation_bytes(with_settings(cfg, "full", 2), 2)
    assert full == 4096 * 2 * 2 * 8192 * 32  # the layer input in bf16: 8 KiB a token and layer
    assert kept_activation_bytes(with_settings(cfg, "save:context,down", 1), 1) < full * 1.6
    flops = [recompute_flops(cfg.model, p, 8192) for p in remat.LADDER]
    assert flops == sorted(flops)  # the ladder runs from the least recompute to the most
    assert "save:context,o,down" not in remat.LADDER  # measured slower than save:context,down


def test_collectives_of_a_compiled_scan_count_its_trips(tmp_path):
    code = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from olmax.train.collectives import collectives
mesh = Mesh(np.array(jax.devices()), ("fsdp",))
w = jax.ShapeDtypeStruct((5, 64, 64), jnp.float32, sharding=NamedSharding(mesh, P(None, None, "fsdp")))
x = jax.ShapeDtypeStruct((8, 64), jnp.float32, sharding=NamedSharding(mesh, P("fsdp")))
def f(w, x):
    def body(h, wi):
        return jnp.tanh(h @ wi.astype(jnp.bfloat16).astype(jnp.float32)), None
    return jax.lax.scan(body, x, w)[0].sum()
text = jax.jit(f).lower(w, x).compile().as_text()
for c in collectives(text):
    print(c.kind, c.dtype, c.shape, c.group, c.runs)
"""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split() for line in out.stdout.splitlines()]
    gathers = [r for r in rows if r[0] == "all-gather"]
    assert gathers and all(r[-1] == "5" for r in gathers), out.stdout  # once per layer of the scan


def test_summaries_and_the_whole_gradient_rule():
    found = [
        Collective("all-gather", "bf16", (4096, 4096), 256, 32, "fwd"),
        Collective("all-gather", "bf16", (4096, 4096), 256, 32, "bwd"),
        Collective("all-reduce", "f32", (4096, 4096), 256, 1, "grad"),
        Collective("all-reduce", "f32", (4096,), 256, 32, "norm"),
    ]
    s = summarize(found)
    assert s["all-gather bf16"] == {
        "collectives": 2,
        "runs_per_step": 64,
        "bytes_per_step": 64 * 4096 * 4096 * 2,
    }
    assert whole_gradient_all_reduces(found, {(4096, 4096)}) == [found[2]]


def test_step_time_model():
    link = 4.5e10
    assert ingress_bytes_per_s(link, (16, 16), 16) == 4 * link  # both axes wrap: 2 links each
    assert ingress_bytes_per_s(link, (8, 8), 16) == 2 * link
    ag = Collective("all-gather", "bf16", (1000, 1000), 4, 1, "x/while/body/y")
    assert collective_seconds(ag, link, 2 * link) == pytest.approx(2e6 * 0.75 / (2 * link))
    ar = Collective("all-reduce", "f32", (1000,), 4, 1, "x")
    assert collective_seconds(ar, link, link) == pytest.approx(2 * 4000 * 0.75 / link)
    cfg = load_config("olmo3_7b_stage1", ["data.mix=x"]).model
    step, torus = StepShape("full", 2, 1, 8192), Torus(197e12, link, (16, 16), 16)
    quiet = predict(cfg, step, torus, [], {("full", 2): 0.5})
    assert quiet.exposed_s == 0 and quiet.step_s == quiet.compute_s
    fwd = quiet_fwd_per_token(cfg)
    assert quiet.mfu == pytest.approx(0.5 * 3 / (3 + recompute_flops(cfg, "full", 8192) / fwd))
    embed = Collective("all-to-all", "bf16", (2, 8192, 4096), 256, 1, "embed")
    loud = predict(cfg, step, torus, [embed], {("full", 2): 0.5})
    assert loud.collectives_s > 0 and loud.exposed_s == pytest.approx(
        loud.collectives_s
    )  # outside every loop


def quiet_fwd_per_token(cfg):
    from olmax.model.flops import forward_flops

    return forward_flops(cfg, 8192).per_token
