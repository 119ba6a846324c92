"""Model FLOPs utilisation: the peak FLOP/s a step is held to, and the logged `mfu` figure.

`mfu = FLOPs per step / step time / peak`, FLOPs per step being 3 x the forward matmul FLOPs
(`olmax.model.flops`). The peak is, in order: `train.peak_flops` when set; on an accelerator, the
bf16 dense datasheet figure of its device kind (table below) times the device count; on CPU, a peak
*measured* at start-up by `cpu_matmul_peak` in the step's compute dtype. On CPU the logged `mfu` is
therefore a fraction of a measured (fp32, the default dtype) matmul peak of this host, not of a
datasheet figure; `PeakFlops.what` says which peak a run was held to.

Why the CPU peak is measured the way it is. Noise (other processes on a shared host, loader threads, a
frequency dip) only ever makes a matmul *slower*, so the peak is a best time, and it must come from a
window long enough to get past a busy instant. The old probe, best of 5 runs of one 1024^3 matmul
(~80 ms in all), did not: on this project's shared 2-core host it measured 54 GFLOP/s inside a run
while the same probe gave 137-141 seconds earlier, and the tiny test run logged `mfu` 0.32-0.45 where
0.12-0.17 was true. Load also hits a two-thread GEMM harder than a tiny step's small, mostly serial ops
(at load ~9 on 2 cores: the GEMM 5-9x slower, the step 3-5x), so on a busy host any measured peak
inflates CPU MFU (a tiny step that ran in a quiet moment logged 0.70 of a 25 GFLOP/s peak measured in a
busy one): the figure is a fraction of the peak this host gave at start-up, and `what` says so. Now each of a
1024^3 and a 2048^3 matmul (the size bench/peers/train_step.py takes its peak from) is timed for its share
of `CPU_PEAK_BUDGET_S`, at least `CPU_PEAK_MIN_SAMPLES` times, after a warm-up run; the best time of
each is kept and the peak is the faster shape's FLOP/s.

`mfu()` never returns a value above 1: a step faster than the peak proves the peak wrong, so it
warns once and returns None (the figure is unknown) rather than a clamped 1.0 that would claim a
utilisation nobody measured.
"""

from __future__ import annotations

import socket
import time
import warnings
import zlib
from collections.abc import Callable, Sequence

import jax
import numpy as np

from olmax.train.config import ExperimentConfig

# bf16 dense peak FLOP/s per device by `device_kind` prefix (vendor datasheets), the first matching prefix
# winning (a v5p reports "TPU v5", a v5e "TPU v5 lite"). CPUs have no datasheet figure here: their peak
# is measured at start (`cpu_matmul_peak`), so CPU MFU = fraction of that.
PEAK_FLOPS = {
    "NVIDIA H200": 989e12,
    "NVIDIA H100": 989e12,
    "NVIDIA A100": 312e12,
    "TPU v5 lite": 197e12,
    "TPU v6 lite": 918e12,
    "TPU v5p": 459e12,
    "TPU v5": 459e12,
    "TPU v4": 275e12,
    "TPU7x": 2307e12,
}


def device_peak(device_kind: str) -> float | None:
    """The datasheet bf16 peak of one device of this kind, None when the table has none."""
    return next((flops for kind, flops in PEAK_FLOPS.items() if device_kind.startswith(kind)), None)


# (M, K, N) matmuls timed for the CPU peak: square GEMMs large enough for XLA's best CPU throughput
# (250-290 GFLOP/s at 2048^3 on an idle 2-core host of this project, README), small enough that a run
# takes ~10-60 ms idle. The step's own matmuls (tokens x d_model x vocab block) are thinner and run
# slower, which is what MFU should show, so they are not candidates for the peak.
CPU_PEAK_SHAPES: tuple[tuple[int, int, int], ...] = ((1024, 1024, 1024), (2048, 2048, 2048))
CPU_PEAK_BUDGET_S = 0.6  # seconds of timed matmuls, shared equally by the shapes
CPU_PEAK_MIN_SAMPLES = 2  # per shape, however long they take (2048^3: 0.6-1 s each at load ~9 on 2 cores)

_SHORT_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}


class PeakFlops(float):
    """A peak FLOP/s: a float (so it divides, compares and JSON-encodes as one) that carries `what` it is."""

    what: str

    def __new__(cls, value: float, what: str) -> PeakFlops:
        obj = super().__new__(cls, value)
        obj.what = what
        return obj

    def __getnewargs__(self) -> tuple[float, str]:  # copy and pickle
        return float(self), self.what


def peak_flops(cfg: ExperimentConfig) -> PeakFlops | None:
    """Machine peak FLOP/s for MFU: train.peak_flops, else the table above, else (CPU) measured, else None."""
    if cfg.train.peak_flops:
        return PeakFlops(cfg.train.peak_flops, "train.peak_flops (configured)")
    dev = jax.devices()[0]
    if dev.platform == "cpu":
        dtype = jax.numpy.dtype(cfg.model.dtype).name
        total, timed, hosts = _sum_over_hosts(lambda: measure_cpu_matmul_peak(dtype))
        shapes = ", ".join(f"{m}x{k}x{n}" for m, k, n in CPU_PEAK_SHAPES)
        where = f", summed over {hosts} hosts" if hosts > 1 else " on this host"
        return PeakFlops(
            total,
            f"fraction of a measured {_SHORT_DTYPE.get(dtype, dtype)} matmul peak: "
            f"{total / 1e9:.1f} GFLOP/s, the best of {timed} timed matmuls ({shapes}) "
            f"at start-up{where}",
        )
    for kind, flops in PEAK_FLOPS.items():
        if dev.device_kind.startswith(kind):
            n = jax.device_count()
            return PeakFlops(flops * n, f"fraction of the {kind} bf16 dense datasheet peak x {n} device(s)")
    return None


def measure_cpu_matmul_peak(
    dtype: str = "float32",
    shapes: Sequence[tuple[int, int, int]] = CPU_PEAK_SHAPES,
    min_samples: int = CPU_PEAK_MIN_SAMPLES,
    budget_s: float = CPU_PEAK_BUDGET_S,
) -> tuple[float, int]:
    """(best FLOP/s, matmuls timed): each of `shapes` timed on this host's first device in `dtype`.

    Each shape is timed until it has used its share of `budget_s`, and at least `min_samples` times; the
    best (shortest) time of each shape is kept and the peak is the fastest shape's FLOP/s. One
    device is enough: a host's CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count) share
    its cores, and one device's matmul already spreads over all of them.
    """
    import jax.numpy as jnp

    dev = jax.local_devices()[0]
    mm = jax.jit(jnp.matmul)
    rng = np.random.default_rng(0)
    share = budget_s / len(shapes)
    peak, timed = 0.0, 0
    for (
        m,
        k,
        n,
    ) in shapes:  # one shape at a time, so its operands stay in cache as they do in a GEMM-bound step
        a, b = (
            jax.device_put(jnp.asarray(rng.standard_normal(s, np.float32), dtype), dev)
            for s in ((m, k), (k, n))
        )
        mm(a, b).block_until_ready()  # compile and warm up (thread pool, output buffers) outside the timing
        best, spent, count = float("inf"), 0.0, 0
        while count < min_samples or spent < share:
            t = time.perf_counter()
            mm(a, b).block_until_ready()
            took = time.perf_counter() - t
            best, spent, count = min(best, took), spent + took, count + 1
        peak, timed = max(peak, 2.0 * m * k * n / best), timed + count
    return peak, timed


def cpu_matmul_peak(dtype: str = "float32") -> float:
    """This host's best `dtype` matmul FLOP/s (`measure_cpu_matmul_peak`): the CPU MFU denominator."""
    return measure_cpu_matmul_peak(dtype)[0]


def _sum_over_hosts(measure: Callable[[], tuple[float, int]]) -> tuple[float, int, int]:
    """(FLOP/s summed over hosts, matmuls timed in all, host count) from one `measure()` per host.

    With several processes, the first process of each host measures while the others wait: processes
    sharing a host share its cores, so measuring in each and multiplying by the process count would
    count those cores several times (and each would measure while the others compete)."""
    if jax.process_count() == 1:
        return (*measure(), 1)

    from jax.experimental import multihost_utils

    host = zlib.crc32(socket.gethostname().encode()) & 0x7FFFFFFF
    hosts = np.asarray(multihost_utils.process_allgather(np.asarray([host], np.int32))).reshape(-1)
    first = int(np.flatnonzero(hosts == host)[0])
    mine = measure() if jax.process_index() == first else (0.0, 0)
    both = np.asarray(multihost_utils.process_allgather(np.asarray(mine, np.float32))).reshape(-1, 2)
    return float(both[:, 0].astype(np.float64).sum()), int(both[:, 1].sum()), len(set(hosts.tolist()))


_warned_above_one = False


def mfu(flops_per_step: float, seconds: float, peak: float | None) -> float | None:
    """FLOPs per step / step time / peak, in [0, 1]; None without a peak, or when the ratio exceeds 1.

    A ratio above 1 means either the peak is wrong (on CPU: measured while the machine was busier than
    during the step) or the step was timed short (the host read the step before it back late, so part
    of this step's time was booked there); the first time, a warning says both, and None is returned
    rather than a clamped 1.0 that would report a utilisation nobody measured.
    """
    global _warned_above_one
    if not peak or seconds <= 0:
        return None
    ratio = flops_per_step / seconds / peak
    if ratio <= 1.0:
        return ratio
    if not _warned_above_one:
        _warned_above_one = True
        what = getattr(peak, "what", "the peak")
        warnings.warn(
            f"mfu: a step did {flops_per_step / seconds / 1e9:.3g} GFLOP/s, more than the "
            f"{peak / 1e9:.3g} GFLOP/s peak it is held to ({what}), so `mfu` is logged as null when it "
            "would exceed 1. A lone step is timed short when the host read the step before it back late "
            "(a checkpoint written in the background, a busy CPU; the two steps' times add up); if most "
            "steps do this, the peak is wrong: set train.peak_flops",
            RuntimeWarning,
            stacklevel=2,
        )
    return None
