"""The device mesh (data x fsdp), FSDP sharding of parameters and optimizer state, and batch assembly.

Contract. The mesh covers every device JAX sees (all processes). Batches are split over both axes
together; parameters and optimizer moments are sharded on the fsdp axis along one dimension chosen
from the array's shape and name (`olmax.model.sharding.shard_spec`; a moment is named and shaped as its
parameter, so it shards like it), and replicated over data. The global batch G never depends on the device count: with D devices and per-device batch b
a step runs G / (D * b) microbatches (gradient accumulation), each holding b rows of every device.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from olmax.errors import OlmaxError
from olmax.model.sharding import BATCH_AXES, FSDP, shard_spec
from olmax.train.config import MeshConfig


def mesh_shape(cfg: MeshConfig, n_devices: int) -> tuple[int, int]:
    """(data, fsdp) sizes; one of them may be -1 (fill with the remaining devices)."""
    data, fsdp = cfg.data, cfg.fsdp
    if data == -1 and fsdp == -1:
        raise OlmaxError("mesh.data and mesh.fsdp are both -1; set at most one to -1 (fill)")
    if data == -1:
        data = n_devices // max(fsdp, 1)
    if fsdp == -1:
        fsdp = n_devices // max(data, 1)
    if data < 1 or fsdp < 1 or data * fsdp != n_devices:
        raise OlmaxError(
            f"mesh.data={cfg.data} x mesh.fsdp={cfg.fsdp} does not cover the {n_devices} devices; "
            f"make their product {n_devices} (or set one to -1)"
        )
    return data, fsdp


def make_mesh(cfg: MeshConfig, devices: list | None = None) -> Mesh:
    devices = list(jax.devices() if devices is None else devices)
    data, fsdp = mesh_shape(cfg, len(devices))
    return Mesh(np.asarray(devices, dtype=object).reshape(data, fsdp), BATCH_AXES)


def microbatches(global_batch: int, n_devices: int, per_device_batch: int | None) -> tuple[int, int]:
    """(microbatches per step, rows per device per microbatch) for a constant global batch."""
    if global_batch % n_devices:
        raise OlmaxError(
            f"data.global_batch_size {global_batch} is not divisible by the {n_devices} devices; "
            f"use a device count that divides it (the global batch never changes with devices)"
        )
    per_device = global_batch // n_devices
    b = per_device if per_device_batch is None else min(per_device_batch, per_device)
    if b <= 0 or per_device % b:
        raise OlmaxError(
            f"mesh.per_device_batch {per_device_batch} does not divide the {per_device} rows each "
            f"of the {n_devices} devices holds (global batch {global_batch}); pick a divisor"
        )
    return per_device // b, b


def state_shardings(abstract: Any, mesh: Mesh) -> Any:
    """NamedShardings for a pytree of arrays / ShapeDtypeStructs (params, moments, scalars alike), each
    placed by its shape and its name (the last key of its path: a moment is named as its parameter)."""
    fsdp = mesh.shape[FSDP]

    def place(path: tuple, a: Any) -> NamedSharding:
        name = getattr(path[-1], "key", None) if path else None
        return NamedSharding(mesh, shard_spec(tuple(a.shape), fsdp, name))

    return jax.tree_util.tree_map_with_path(place, abstract)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Rows over data x fsdp, sequence positions whole."""
    return NamedSharding(mesh, PartitionSpec(BATCH_AXES, None))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def global_batch(local_rows: np.ndarray, mesh: Mesh, global_rows: int) -> jax.Array:
    """The (G, L) global array from this process's rows (its loader's positions I::P of the batch)."""
    shape = (global_rows, *local_rows.shape[1:])
    if local_rows.shape[0] * jax.process_count() != global_rows:
        raise OlmaxError(
            f"this process has {local_rows.shape[0]} rows of a {global_rows}-row global batch "
            f"over {jax.process_count()} processes; the loader's process count must match JAX's"
        )
    return jax.make_array_from_process_local_data(batch_sharding(mesh), local_rows, shape)


def describe(mesh: Mesh) -> str:
    d = dict(mesh.shape)
    return f"{math.prod(d.values())} devices ({jax.devices()[0].platform}), mesh data={d['data']} x fsdp={d['fsdp']}"
