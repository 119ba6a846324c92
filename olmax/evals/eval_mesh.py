"""The eval mesh: the (data, fsdp) mesh every eval command shards its model over (olmax.evals.eval_model).

Each parameter is split on the fsdp axis along one dimension chosen from its shape alone
(`olmax.model.sharding.shard_spec`, the trainer's own rule: the vocabulary-sized ones split d_model) and replicated over data; rows of a scoring batch
split over data x fsdp together. So the same code runs on one device (a 1 x 1 mesh) and on N, and a
checkpoint restores into these shardings whatever device count wrote it.

`--mesh` (every eval command) chooses the mesh: `DATAxFSDP` over the first DATA * FSDP devices, or `auto`
(the default): every device of this host, with parameters sharded over the fewest devices (a divisor of
the count) that hold them in `PARAM_FRACTION` of a device's memory, the rest of the devices data-parallel.
Sharding parameters costs an all-gather of each layer's weights per batch; data parallelism costs nothing
but memory, so the smallest fsdp that fits is the fastest. A device's memory is its allocator's limit
(`memory_stats()["bytes_limit"]`) where JAX reports one, else this host's memory shared by its devices.

The eval config keeps the run's numerics (compute dtype, attention kernel, chunking) and turns remat off:
a forward pass without a backward keeps no residuals, so a remat policy would only change fusion.
Importing this module imports no JAX (the command line registers `--mesh` from here).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
from typing import TYPE_CHECKING, Any

from olmax.errors import OlmaxError

if TYPE_CHECKING:
    from jax.sharding import Mesh

# Parameters (fp32) take at most this share of a device's memory under `auto`: the rest holds a layer
# group's gathered weights, the activations of a batch's rows and the LM head's vocabulary blocks.
PARAM_FRACTION = 0.25
MESH_FORMS = "auto (default), or DATAxFSDP, e.g. 1x8 (parameters split 8 ways) or 8x1 (replicated)"


def parse_mesh(spec: str | None) -> tuple[int, int] | None:
    """(data, fsdp) of a `DATAxFSDP` spec; None for `auto` (or None)."""
    if spec is None or spec.strip().lower() == "auto":
        return None
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", spec)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise OlmaxError(f"--mesh {spec!r}: give {MESH_FORMS}")
    return int(m.group(1)), int(m.group(2))


def device_bytes(device: Any) -> int | None:
    """The memory one program may hold on `device`: an accelerator's (`olmax.train.plan.hbm_limit`: the
    runtime's figure, else the chip's table), else this host's memory over its devices (the CPU, where
    forced host devices share it); None if unknown."""
    import jax

    from olmax.train.plan import hbm_limit

    if (limit := hbm_limit(device)) is not None:
        return limit
    try:
        host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return host // max(1, jax.local_device_count())


def param_bytes(cfg: Any) -> int:
    """Bytes of a model's parameters as checkpoints hold them (fp32, the padded vocabulary)."""
    from olmax.model.transformer import count_params

    return 4 * count_params(cfg, padded=True)


def auto_shape(n_devices: int, params: int, per_device: int | None) -> tuple[int, int]:
    """(data, fsdp) for `auto`: the smallest fsdp dividing `n_devices` whose share of `params` bytes fits
    `PARAM_FRACTION` of `per_device` (all devices when none does, or when the memory is unknown)."""
    if per_device is None:
        return 1, n_devices
    for fsdp in range(1, n_devices + 1):
        if n_devices % fsdp == 0 and params / fsdp <= PARAM_FRACTION * per_device:
            return n_devices // fsdp, fsdp
    return 1, n_devices


def eval_mesh(spec: str | None, cfg: Any, devices: list | None = None) -> Mesh:
    """The (data, fsdp) mesh `spec` names (`parse_mesh`) for model `cfg` over `devices` (default: all)."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    from olmax.model.sharding import BATCH_AXES

    devices = list(jax.devices() if devices is None else devices)
    shape = parse_mesh(spec)
    if shape is None:
        shape = auto_shape(len(devices), param_bytes(cfg), device_bytes(devices[0]))
    data, fsdp = shape
    if data * fsdp > len(devices):
        raise OlmaxError(
            f"--mesh {data}x{fsdp} needs {data * fsdp} devices; JAX sees {len(devices)} "
            f"({devices[0].platform}): give a mesh of at most {len(devices)} devices, or auto"
        )
    return Mesh(np.asarray(devices[: data * fsdp], dtype=object).reshape(data, fsdp), BATCH_AXES)


def describe(mesh: Mesh) -> str:
    """`1x8 (8 x TPU v5 lite)`: the mesh as --mesh writes it and the devices it covers."""
    d = dict(mesh.shape)
    first = mesh.devices.flat[0]
    return f"{d['data']}x{d['fsdp']} ({mesh.size} x {first.device_kind})"


def eval_config(cfg: Any, dtype: str | None = None) -> Any:
    """`cfg` as the evals run it: compute `dtype` (default: its own) and no remat (see the module docstring)."""
    return cfg.replace(dtype=dtype or cfg.dtype, remat="none")


@functools.lru_cache(maxsize=16)
def param_shardings(cfg: Any, mesh: Mesh) -> dict:
    """NamedShardings of `cfg`'s parameters on `mesh` (the trainer's FSDP rule); shared, never mutate it."""
    from olmax.train.mesh import state_shardings
    from olmax.train.step import model_graphdef

    return state_shardings(model_graphdef(cfg)[1], mesh)


def add_mesh_option(p: argparse.ArgumentParser) -> None:
    """`--mesh`, the devices an eval command shards the model over (into `args.mesh`)."""
    p.add_argument(
        "--mesh",
        default="auto",
        metavar="DATAxFSDP",
        help=f"devices the model is sharded over: {MESH_FORMS}; auto uses every device of this host and "
        f"splits the parameters over the fewest that hold them in {PARAM_FRACTION:.0%}% of a device's memory",
    )


def add_dtype_option(p: argparse.ArgumentParser) -> None:
    """`--dtype`, the compute dtype an eval command runs the model in (parameters stay fp32)."""
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default=None,
        help="compute dtype (default: a training run's model.dtype, else float32); float32 for parity checks",
    )
