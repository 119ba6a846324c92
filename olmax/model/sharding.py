"""Where the model's arrays live on a device mesh, and what the traced step is built for.

The platform. A train step compiled ahead of time here for a TPU slice (`olmax train --plan`) is traced
on a CPU host under a mesh of TPU devices, so every choice that depends on the hardware (the attention
kernel `auto` resolves to, the LM head's block width, whether the head keeps its softmax blocks) reads
the platform of the mesh set with `jax.set_mesh` (`platform`), and JAX's default backend only when no
mesh is set.

The FSDP layout. A mesh has two axes, `data` x `fsdp`; rows of a batch split over both, and every
parameter (and each optimizer moment, which has its parameter's shape and name) is sharded over `fsdp`
along one dimension, replicated over `data` (`shard_spec`). The two vocabulary-sized parameters shard
d_model and keep the vocabulary whole on every device, because both of their uses slice the vocabulary:
the lookup (`lookup`: each device reads its d_model columns of the rows its group of devices asks for,
and one all-to-all hands every device its own rows whole, so the gradient lands on each device's
columns with no reduction at all) and the LM head's block loop (whose gradient, a block of columns at a
time, is reduce-scattered onto the rows each device holds: `on_shards`). Every other array shards by
its shape alone.

Collectives the model asks for by name, on top of what XLA's partitioner places: `replicate` gathers a
weight whole, cast to the compute dtype first so the gather moves that dtype, before a loop that reads
it block by block. All of these are the plain computation without a mesh of several devices.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

DATA, FSDP = "data", "fsdp"
BATCH_AXES = (DATA, FSDP)
# the d_model dim of the vocabulary-sized parameters (embed is (V, D), lm_head (D, V))
D_MODEL_DIM = {"embed": 1, "lm_head": 0}


def platform() -> str:
    """'tpu', 'gpu' or 'cpu': the platform of the mesh being traced under, else the default backend."""
    mesh = jax.sharding.get_abstract_mesh()
    if not mesh.empty and mesh.abstract_device is not None:
        return mesh.abstract_device.platform
    return jax.default_backend()


def shard_spec(shape: tuple[int, ...], fsdp: int, name: str | None = None) -> PartitionSpec:
    """FSDP placement of an array named `name` (a parameter's key, or its moment's).

    `embed` and `lm_head` shard their d_model dim when it divides. Otherwise the largest dim divisible
    by the fsdp size (ties to the later dim); stacked layer arrays (ndim >= 3) never shard their leading
    layer axis, which the scan slices. Arrays no dim of which divides stay replicated (norm scales,
    scalars).
    """
    if fsdp == 1 or len(shape) < 2:
        return PartitionSpec()
    best = D_MODEL_DIM.get(name or "")
    if best is None or shape[best] % fsdp:
        best = None
        for i in range(1 if len(shape) >= 3 else 0, len(shape)):
            if shape[i] % fsdp == 0 and (best is None or shape[i] >= shape[best]):
                best = i
    if best is None:
        return PartitionSpec()
    return _along(len(shape), best)


def _along(ndim: int, dim: int) -> PartitionSpec:
    spec: list[Any] = [None] * ndim
    spec[dim] = FSDP
    return PartitionSpec(*spec)


def _mesh_of_several() -> Any:
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh.empty or mesh.size == 1 else mesh


def replicate(x: jax.Array) -> jax.Array:
    """`x` whole on every device of the current mesh (one all-gather of what it is now)."""
    if _mesh_of_several() is None:
        return x
    return jax.lax.with_sharding_constraint(x, PartitionSpec())


def on_shards(grad: jax.Array, dim: int) -> jax.Array:
    """A gradient each device summed over its own tokens, put on shards of `dim` over `fsdp`: the
    devices' partial sums are reduce-scattered (and summed over `data`) in `grad`'s dtype."""
    mesh = _mesh_of_several()
    if mesh is None or FSDP not in mesh.axis_names or grad.shape[dim] % mesh.shape[FSDP]:
        return grad
    return jax.lax.with_sharding_constraint(grad, _along(grad.ndim, dim))


def lookup(table_VxD: jax.Array, ids_BxL: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """`table[ids]` in `dtype`, the table sharded on d_model (`shard_spec(..., "embed")`) and the rows of
    `ids` split over every mesh axis (a batch). Each device gathers the ids of its fsdp group, reads its
    own d_model columns of those rows, and one all-to-all (the compute dtype) gives every device its rows
    whole. The backward pass is the same in reverse: each device scatter-adds its group's gradient
    columns in fp32 into its own shard of the table, and the sum over `data` is the only reduction."""
    mesh = _mesh_of_several()
    if mesh is None or FSDP not in mesh.axis_names:
        return jnp.take(table_VxD.astype(dtype), ids_BxL, axis=0)
    n = mesh.shape[FSDP]
    if table_VxD.shape[1] % n or ids_BxL.shape[0] % mesh.size:  # another layout: XLA places it
        return jnp.take(replicate(table_VxD.astype(dtype)), ids_BxL, axis=0)

    def per_device(table_Vxd: jax.Array, ids_bxL: jax.Array) -> jax.Array:
        group_ids = jax.lax.all_gather(ids_bxL, FSDP, axis=0, tiled=True)  # (b * n, L), device order
        cols = jnp.take(table_Vxd, group_ids, axis=0).astype(dtype)  # (b * n, L, D / n)
        return jax.lax.all_to_all(cols, FSDP, split_axis=0, concat_axis=2, tiled=True)  # (b, L, D)

    rows = PartitionSpec(tuple(mesh.axis_names))
    return jax.shard_map(per_device, mesh=mesh, in_specs=(_along(2, 1), rows), out_specs=rows)(
        table_VxD, ids_BxL
    )
