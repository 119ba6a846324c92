"""A step's time on a TPU slice: the chip's measured compute plus what its collectives leave exposed.

    step = compute + exposed collectives
    compute = executed FLOPs a chip runs per step / (peak x the rate measured for the remat policy)
    executed FLOPs = tokens per chip x (3 x forward FLOPs per token + what the policy recomputes)

The rate is a fraction of the chip's peak per *executed* FLOP, measured on one v5e chip at the 7B's
per-chip rows (bench/results/tpu_slice.json: the 32 layers' work on one period of weights, and the real
LM head, `MEASURED_RATE`); a policy not measured takes the rate of the measured one nearest in
recomputed FLOPs, and another generation (v5p, v6e) the v5e's rate (an assumption the plan prints).

Collectives (olmax.train.collectives), each run costing, on the slice's torus:
- all-gather / reduce-scatter of B bytes over n devices: B (n - 1) / n over the chip's ingress, the
  links of every torus axis it spans (2 links on an axis that wraps around into a ring, 1 on one that
  does not; jax-ml's scaling book); all-reduce twice that; all-to-all as an all-gather of what a device
  sends (a lower bound: a torus's bisection can bind first);
- collective-permute (XLA's windowed einsums, a ring in both directions at once): B over two links.
Collectives inside a scanned loop (the layers, the head's vocabulary blocks, the microbatches) overlap
that loop's compute, XLA's asynchronous collectives and windowed einsums being built for it: only what
exceeds the compute, plus one iteration's worth per pass (the first gather has nothing to hide behind),
is exposed. Collectives outside any loop (the embedding's all-to-all, a norm's all-reduce) count whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from olmax.model.flops import forward_flops, recompute_flops
from olmax.model.model_config import ModelConfig
from olmax.train.collectives import Collective

# Fraction of the v5e's bf16 peak that one chip's step runs its executed FLOPs at (forward, backward and
# recompute), by remat policy and rows per device, measured by bench/chip/tpu_slice.py on one v5e chip at
# OLMo 3 7B's shapes (seq 8192, the 32 layers' work, the real head): bench/results/tpu_slice.json, `rates`.
MEASURED_RATE: dict[tuple[str, int], float] = {
    ("full", 2): 0.7149,
    ("save:context,down", 1): 0.7301,
    ("save:context,o,down", 1): 0.6791,
}


@dataclass(frozen=True)
class Prediction:
    """A step's predicted time on a slice, its parts, and the MFU it gives."""

    compute_s: float
    collectives_s: float  # every collective's time, as if none overlapped
    exposed_s: float  # what the overlap model leaves on the step's critical path
    step_s: float
    mfu: float
    rate: float  # fraction of peak per executed FLOP used for compute_s
    rate_from: str  # which measurement it came from

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def executed_flops_per_token(cfg: ModelConfig, policy: str, seq_len: int) -> float:
    """FLOPs a train step runs per token: 3 x forward (forward + backward) + the recomputed forward."""
    fwd = forward_flops(cfg, seq_len).per_token
    return 3 * fwd + recompute_flops(cfg, policy, seq_len)


def rate_for(
    cfg: ModelConfig, policy: str, rows: int, seq_len: int, table: dict | None = None
) -> tuple[float, str]:
    """The measured rate for (policy, rows), else the measured policy nearest in recomputed FLOPs."""
    table = MEASURED_RATE if table is None else table
    if (policy, rows) in table:
        return table[(policy, rows)], f"measured: {policy}, {rows} row(s)"
    if not table:
        raise ValueError("no measured rate to predict from")
    want = recompute_flops(cfg, policy, seq_len)
    (p, r), rate = min(
        table.items(),
        key=lambda kv: (abs(recompute_flops(cfg, kv[0][0], seq_len) - want), abs(kv[0][1] - rows)),
    )
    return rate, f"estimated from {p}, {r} row(s)"


def ingress_bytes_per_s(link: float, shape: tuple[int, ...], wrap: int) -> float:
    """A chip's receive bandwidth for a collective over the whole slice: per torus axis longer than one
    chip, 2 links when the axis wraps around, 1 when it does not."""
    return link * sum(2 if n >= wrap else 1 for n in shape if n > 1) if any(n > 1 for n in shape) else link


def collective_seconds(c: Collective, link: float, ingress: float) -> float:
    """One run of `c` (module docstring)."""
    share = (c.group - 1) / c.group if c.group > 1 else 0.0
    if c.kind in ("all-gather", "reduce-scatter", "all-to-all"):
        return c.bytes * share / ingress
    if c.kind == "all-reduce":
        return 2 * c.bytes * share / ingress
    return c.bytes / (2 * link)  # collective-permute


@dataclass(frozen=True)
class Torus:
    """What the model needs of a slice: its chip's peak and ICI link, its shape in chips, and the axis
    length from which an axis wraps around into a ring."""

    peak_flops: float
    link_bytes_per_s: float
    shape: tuple[int, ...]
    wrap: int


@dataclass(frozen=True)
class StepShape:
    """A step's per-chip work: the remat policy, rows per microbatch, microbatches, sequence length."""

    policy: str
    rows: int
    n_micro: int
    seq_len: int


def predict(
    cfg: ModelConfig, step: StepShape, torus: Torus, found: list[Collective], rates: dict | None = None
) -> Prediction:
    """The step-time model (module docstring) for one chip of a slice."""
    tokens = step.rows * step.n_micro * step.seq_len  # per chip per step
    rate, rate_from = rate_for(cfg, step.policy, step.rows, step.seq_len, rates)
    compute = tokens * executed_flops_per_token(cfg, step.policy, step.seq_len) / (torus.peak_flops * rate)
    link = torus.link_bytes_per_s
    ingress = ingress_bytes_per_s(link, torus.shape, torus.wrap)
    in_loops = [c for c in found if "while/body" in c.op_name]
    outside = [c for c in found if "while/body" not in c.op_name]
    loop_s = sum(collective_seconds(c, link, ingress) * c.runs for c in in_loops)
    out_s = sum(collective_seconds(c, link, ingress) * c.runs for c in outside)
    iterations = max((c.runs for c in in_loops), default=1)
    exposed = max(0.0, loop_s - compute) + loop_s / iterations + out_s
    total = compute + exposed
    model_flops = tokens * 3 * forward_flops(cfg, step.seq_len).per_token
    return Prediction(
        compute, loop_s + out_s, exposed, total, model_flops / total / torus.peak_flops, rate, rate_from
    )
