"""Checks of olmax.model.sharding that need 8 devices: run by tests/model/test_sharding.py in a process of
their own (XLA_FLAGS=--xla_force_host_platform_device_count=8), never collected on their own."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from olmax.model import sharding
from olmax.train.collectives import collectives


def _mesh(data: int = 1) -> Mesh:
    return Mesh(np.asarray(jax.devices()[:8]).reshape(data, 8 // data), sharding.BATCH_AXES)


def test_platform_is_the_meshs_not_the_hosts():
    assert sharding.platform() == jax.default_backend()
    with jax.set_mesh(_mesh()):
        seen = []
        jax.jit(lambda x: seen.append(sharding.platform()) or x)(jnp.ones(8))
    assert seen == ["cpu"]


@pytest.mark.parametrize("data", [1, 2])
def test_lookup_equals_take_and_its_gradient_lands_on_the_shards(data):
    mesh = _mesh(data)
    rng = np.random.default_rng(0)
    table = jnp.asarray(rng.normal(size=(96, 64)), jnp.float32)
    ids = jnp.asarray(rng.integers(0, 96, (16, 12)), jnp.int32)
    ct = jnp.asarray(rng.normal(size=(16, 12, 64)), jnp.float32)

    def loss(t, i):
        return jnp.sum(sharding.lookup(t, i, jnp.float32) * ct)

    want_rows = jnp.take(table, ids, axis=0)
    want_grad = jax.grad(lambda t: jnp.sum(jnp.take(t, ids, axis=0) * ct))(table)
    t_sh = jax.device_put(
        table, NamedSharding(mesh, sharding.shard_spec(table.shape, mesh.shape["fsdp"], "embed"))
    )
    i_sh = jax.device_put(ids, NamedSharding(mesh, PartitionSpec(sharding.BATCH_AXES)))
    with jax.set_mesh(mesh):
        rows = jax.jit(lambda t, i: sharding.lookup(t, i, jnp.float32))(t_sh, i_sh)
        grad = jax.jit(jax.grad(loss))(t_sh, i_sh)
        text = jax.jit(jax.grad(loss)).lower(t_sh, i_sh).compile().as_text()
    np.testing.assert_allclose(np.asarray(rows), np.asarray(want_rows), rtol=0, atol=0)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(want_grad), rtol=1e-6, atol=1e-6)
    assert grad.sharding.spec == PartitionSpec(None, "fsdp")
    found = collectives(text)
    assert any(c.kind == "all-to-all" for c in found)  # the rows travel, not the table
    summed = [c for c in found if c.kind == "all-reduce" and c.group > 1]
    assert [c.group for c in summed] == (
        [data] if data > 1 else []
    )  # only the data replicas sum the gradient


def test_lookup_without_a_mesh_is_take():
    table = jnp.arange(12.0).reshape(6, 2)
    ids = jnp.array([[5, 0, 3]])
    np.testing.assert_array_equal(
        sharding.lookup(table, ids, jnp.bfloat16), jnp.take(table, ids, axis=0).astype(jnp.bfloat16)
    )


def test_replicate_and_on_shards_place_what_they_say():
    mesh = _mesh()
    x = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, PartitionSpec("fsdp", None)))
    with jax.set_mesh(mesh):
        whole = jax.jit(sharding.replicate)(x)
        rows = jax.jit(lambda a: sharding.on_shards(a * 2, 0))(
            jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, PartitionSpec()))
        )
    assert whole.sharding.is_fully_replicated
    assert tuple(rows.sharding.spec)[:1] == ("fsdp",) and not any(tuple(rows.sharding.spec)[1:])
