"""How the processes of one run find each other: JAX's distributed system, started before any device is touched.

The same `olmax train` command runs on every worker of a slice (`gcloud compute tpus tpu-vm ssh NAME
--worker=all --command "olmax train ..."`). On a Cloud TPU slice of several hosts each worker's runtime
environment names them all (`TPU_WORKER_HOSTNAMES`, one per host; a multislice job adds `MEGASCALE_*`),
and `jax.distributed.initialize()` needs no arguments there: JAX reads the coordinator, the process count
and this worker's id from the TPU's own metadata. Elsewhere (CPU hosts, GPU nodes) `--coordinator
HOST:PORT --num-processes N --process-id I` name them; a CPU cluster uses gloo for its collectives. A
single host starts nothing. Whatever started it, each process then loads only its own rows of each batch
(the loader's rank is `jax.process_index()`), process 0 writes the logs and the run record, and every
process writes its shards of each checkpoint.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

from olmax.errors import OlmaxError


def cloud_tpu_hosts(environ: Mapping[str, str]) -> int:
    """Hosts of the Cloud TPU slice this worker is part of (1 off a TPU VM, or on a one-host slice)."""
    names = [h for h in environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    slices = int(environ.get("MEGASCALE_NUM_SLICES", "1") or 1)
    return max(len(names), 1) * max(slices, 1)


def heartbeat_timeout(environ: Mapping[str, str]) -> int:
    """JAX's own heartbeat timeout, in seconds: past olmax's lost-process watchdog (olmax.train.hosts), which
    ends the run first with a line naming the lost process; JAX's default (100 s) at least."""
    from olmax.train.hosts import LOST_TIMEOUT, LOST_TIMEOUT_ENV

    return max(100, int(2 * float(environ.get(LOST_TIMEOUT_ENV, LOST_TIMEOUT))))


def _has_accelerator() -> bool:
    return any(
        importlib.util.find_spec(m) is not None for m in ("jax_cuda12_plugin", "jax_cuda13_plugin", "libtpu")
    )


def start(
    coordinator: str | None,
    num_processes: int | None,
    process_id: int,
    environ: Mapping[str, str] | None = None,
) -> str:
    """Start JAX's distributed system when this run has several processes; what was started, in words
    ('' for a single process)."""
    import jax

    environ = os.environ if environ is None else environ
    if coordinator:
        if num_processes is None or process_id < 0:
            raise OlmaxError(
                "--coordinator needs --num-processes and --process-id (or OLMAX_NUM_PROCESSES / OLMAX_PROCESS_ID)"
            )
        if environ.get("JAX_PLATFORMS", "") == "cpu" or not _has_accelerator():
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=num_processes,
            process_id=process_id,
            heartbeat_timeout_seconds=heartbeat_timeout(environ),
        )
        return f"process {process_id} of {num_processes} (coordinator {coordinator})"
    hosts = cloud_tpu_hosts(environ)
    if hosts > 1 and environ.get("JAX_PLATFORMS", "") != "cpu":
        # the TPU's metadata names the coordinator, the count and this worker
        jax.distributed.initialize(heartbeat_timeout_seconds=heartbeat_timeout(environ))
        return f"process {jax.process_index()} of {jax.process_count()} (Cloud TPU slice, {hosts} hosts)"
    return ""
