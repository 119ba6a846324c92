"""The train step compiled for a TPU slice ahead of time, and `model.remat: auto`.

`olmax train --plan --topology v5e-256` builds the very step `olmax train` runs (same config, same
`run_train_step`, same mesh rule) for the devices of a TPU topology that libtpu describes without a
chip (`jax.experimental.topologies`), compiles it here, and reads the compiled program: what a chip
holds (the state's shards, the rest of the step's buffers) against its HBM, the kernel and remat the
step resolved for the target, and every collective with its bytes per step (`olmax.train.collectives`).
The predicted step time (`olmax.train.slice_model`) comes from those bytes and the chip's measured
compute rate.

`model.remat: auto` (and `mesh.per_device_batch` with it) is resolved the same way, for the devices a
run has (or a plan's): the candidates of `olmax.model.remat.LADDER` are compiled fastest first, each at
the configured rows per device and then at half of them (more microbatches, the same global batch), and
the first whose plan fits the chip's HBM with `MARGIN` to spare is used. Its compiled step is the one
the run then executes, so nothing is compiled twice. A candidate whose kept activations alone exceed
the chip is ruled out without compiling (`kept_activation_bytes`, a lower bound of its plan); one that
compiles and does not fit fails as soon as XLA assigns its buffers.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp

from olmax.errors import OlmaxError
from olmax.model import remat as remat_mod
from olmax.model.flops import kept_bytes_per_token
from olmax.model.transformer import compute_summary
from olmax.train.config import ExperimentConfig
from olmax.train.mesh import batch_sharding, make_mesh, microbatches
from olmax.train.mfu import device_peak

GIB = 1 << 30
# the share of a chip's HBM a plan leaves free: the runtime's own buffers (the program, collectives'
# scratch, fragmentation between steps) live beside the compiled plan
MARGIN = 0.05


@dataclass(frozen=True)
class Chip:
    """One TPU generation as a plan needs it."""

    name: str  # v5e, v5p, v6e
    topology: str  # its prefix in libtpu's topology names (v5e:16x16, v5:4x4x4, v6e:16x16)
    device_kind: str  # jax's device_kind
    hbm_bytes: int  # what XLA lets one program hold (the figure its out-of-memory error names)
    ici_link_bytes_per_s: float  # one direction, one link
    dims: int  # torus dimensions
    wrap: int  # an axis of this many chips or more closes into a ring (wraparound links)
    cores_per_chip: int  # what the slice name counts (v5p-128 is 128 TensorCores, 64 chips)

    @property
    def peak_flops(self) -> float:
        """bf16 dense datasheet peak (olmax.train.mfu's table)."""
        return device_peak(self.device_kind) or 0.0


# HBM: the limit libtpu's compiler reports for the generation (15.75 GiB of v5e's 16); ICI: jax-ml's scaling book, "How to think about TPUs" (v5e 4.5e10 B/s one way per link on
# a 2-D torus with wraparound on axes of 16; v5p 9e10 on a 3-D torus; v6e 9e10, 2-D like v5e).
CHIPS = {
    "v5e": Chip("v5e", "v5e", "TPU v5 lite", int(15.75 * GIB), 4.5e10, 2, 16, 1),
    "v5p": Chip("v5p", "v5", "TPU v5", int(95.74 * GIB), 9e10, 3, 4, 2),
    "v6e": Chip("v6e", "v6e", "TPU v6 lite", int(31.25 * GIB), 9e10, 2, 16, 1),
}
# Cloud TPU's slice shapes by chip count
_SHAPES_2D = {
    1: (1, 1),
    4: (2, 2),
    8: (2, 4),
    16: (4, 4),
    32: (4, 8),
    64: (8, 8),
    128: (8, 16),
    256: (16, 16),
}
_SHAPES_3D = {
    4: (2, 2, 1),
    8: (2, 2, 2),
    16: (2, 2, 4),
    32: (2, 4, 4),
    64: (4, 4, 4),
    128: (4, 4, 8),
    256: (4, 8, 8),
    512: (8, 8, 8),
    1024: (8, 8, 16),
    2048: (8, 16, 16),
    4096: (16, 16, 16),
    6144: (16, 16, 24),
}


@dataclass(frozen=True)
class Topology:
    """A slice (or `num_slices` of them): its chip, its shape in chips and how its hosts are laid out."""

    chip: Chip
    shape: tuple[int, ...]
    num_slices: int = 1

    @property
    def chips(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * self.num_slices

    @property
    def name(self) -> str:
        per_slice = self.chips // self.num_slices * self.chip.cores_per_chip
        return f"{self.chip.name}-{per_slice}" + (
            f" x {self.num_slices} slices" if self.num_slices > 1 else ""
        )

    @property
    def libtpu_name(self) -> str:
        return f"{self.chip.topology}:{'x'.join(map(str, self.shape))}"

    @property
    def host_bounds(self) -> tuple[int, int, int]:
        """Chips per host: one host up to 8 chips (v5e, v6e), else 2 x 2 hosts, as Cloud TPU builds them."""
        if self.chip.dims == 2 and self.chips // self.num_slices <= 8:
            return (*self.shape, 1)  # type: ignore[return-value]
        return (2, 2, 1)

    def devices(self) -> list:
        """The slice's devices as libtpu describes them (no chip needed; libtpu must be importable)."""
        os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        from jax.experimental import topologies

        try:
            desc = topologies.get_topology_desc(
                self.libtpu_name, "tpu", chips_per_host_bounds=self.host_bounds, num_slices=self.num_slices
            )
        except Exception as e:  # libtpu missing, or it refuses the shape
            raise OlmaxError(
                f"--topology {self.name}: libtpu could not describe {self.libtpu_name} ({str(e).splitlines()[0]}); "
                "a plan needs libtpu importable (pip install libtpu, the version your JAX names)"
            ) from None
        return sorted(desc.devices, key=lambda d: (getattr(d, "slice_index", 0), d.id))


def parse_topology(text: str, num_slices: int = 1) -> Topology:
    """`v5e-256`, `v5p-128`, `v6e-64` (Cloud TPU's accelerator types) as a Topology."""
    m = re.fullmatch(r"(v5e|v5litepod|v5p|v6e)-(\d+)", text.strip())
    if m is None:
        raise OlmaxError(
            f"--topology {text!r}: give a Cloud TPU accelerator type, e.g. v5e-256, v5p-128, v6e-64"
        )
    chip = CHIPS["v5e" if m.group(1) == "v5litepod" else m.group(1)]
    count = int(m.group(2))
    chips = count // chip.cores_per_chip
    shapes = _SHAPES_2D if chip.dims == 2 else _SHAPES_3D
    if count % chip.cores_per_chip or chips not in shapes:
        sizes = ", ".join(f"{chip.name}-{n * chip.cores_per_chip}" for n in shapes)
        raise OlmaxError(f"--topology {text}: not a {chip.name} slice; the sizes are {sizes}")
    if num_slices < 1:
        raise OlmaxError(f"--num-slices {num_slices}: give 1 or more")
    return Topology(chip, shapes[chips], num_slices)


def chip_of(device: Any) -> Chip | None:
    """The Chip of a JAX device (None off a TPU)."""
    kind = getattr(device, "device_kind", "")
    return next((c for c in CHIPS.values() if kind == c.device_kind), None)


def hbm_limit(device: Any) -> int | None:
    """What one program may hold on `device`: the runtime's own figure on a real chip, else the table's;
    None off an accelerator (the host's memory is not planned)."""
    if device.platform == "cpu":
        return None
    stats = None
    try:
        stats = device.memory_stats()
    except Exception:  # a topology's device has no runtime behind it
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    chip = chip_of(device)
    return chip.hbm_bytes if chip else None


@dataclass
class Compiled:
    """One candidate compiled for a set of devices: its settings, its plan and the executable (None when it
    did not compile, with the compiler's first line in `error`)."""

    remat: str
    per_device_batch: int
    n_micro: int
    executable: Any = None
    error: str = ""
    seconds: float = 0.0
    memory: dict = field(default_factory=dict)

    @property
    def plan_bytes(self) -> int:
        """Argument + output - aliased + temporaries: what the step holds on a chip (FIELD-NOTES: XLA's plan)."""
        m = self.memory
        return m.get("argument", 0) + m.get("output", 0) - m.get("alias", 0) + m.get("temp", 0)


def compiled_plan_bytes(compiled: Any) -> int | None:
    """What a compiled XLA program holds on a chip: argument + output - aliased + temporaries of its memory
    analysis (FIELD-NOTES: XLA's plan); None when the backend gives none."""
    m = compiled.memory_analysis()
    if m is None:
        return None
    return m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes


def _oom_line(text: str) -> str:
    for line in text.splitlines():
        if "RESOURCE_EXHAUSTED" in line or "exceeds" in line or "Ran out of memory" in line:
            return line.strip()[:400]
    return text.strip().splitlines()[0][:400] if text.strip() else "compile failed"


def compile_step(cfg: ExperimentConfig, devices: list) -> Compiled:
    """Compile `cfg`'s train step for `devices` (its `model.remat` and `mesh.per_device_batch` concrete)."""
    from olmax.train.step import abstract_state, run_train_step

    mesh = make_mesh(cfg.mesh, devices)
    n_micro, per_device = microbatches(cfg.data.global_batch_size, mesh.size, cfg.mesh.per_device_batch)
    out = Compiled(cfg.model.remat, per_device, n_micro)
    step = run_train_step(cfg, mesh, n_micro, per_device)
    state, _ = abstract_state(cfg.model, cfg.optim, mesh)
    rows = (cfg.data.global_batch_size, cfg.data.seq_len)
    # the loader's arrays (olmax.data.loader): segment ids with document masks, a label mask when packed
    keys = {"input_ids": jnp.int32}
    if cfg.data.document_masks:
        keys["segment_ids"] = jnp.int32
    if cfg.data.packed:
        keys["label_mask"] = jnp.bool_
    batch = {k: jax.ShapeDtypeStruct(rows, t, sharding=batch_sharding(mesh)) for k, t in keys.items()}
    t0 = time.perf_counter()
    try:
        executable = step.lower(state, batch).compile()
    except Exception as e:  # XLA's out-of-memory (and any other refusal) comes as a runtime error
        out.error, out.seconds = _oom_line(str(e)), time.perf_counter() - t0
        return out
    out.seconds = time.perf_counter() - t0
    m = executable.memory_analysis()
    if m is not None:
        out.memory = {
            "argument": m.argument_size_in_bytes,
            "output": m.output_size_in_bytes,
            "alias": m.alias_size_in_bytes,
            "temp": m.temp_size_in_bytes,
        }
    out.executable = step.with_compiled(executable)
    return out


def candidates(cfg: ExperimentConfig, n_devices: int) -> list[tuple[str, int]]:
    """(remat, rows per device) to try, fastest first: a fixed remat stays fixed; `auto` walks the ladder.
    Each policy is tried at the configured rows per device, then at each half of them down to one."""
    _, per_device = microbatches(cfg.data.global_batch_size, n_devices, cfg.mesh.per_device_batch)
    rows = [per_device]
    while rows[-1] % 2 == 0 and rows[-1] > 1:
        rows.append(rows[-1] // 2)
    policies = remat_mod.LADDER if cfg.model.remat == remat_mod.AUTO else (cfg.model.remat,)
    return [(p, b) for p in policies for b in rows]


def with_settings(cfg: ExperimentConfig, remat: str, per_device_batch: int) -> ExperimentConfig:
    return cfg.replace(
        model=dataclasses.replace(cfg.model, remat=remat),
        mesh=dataclasses.replace(cfg.mesh, per_device_batch=per_device_batch),
    )


def choose(
    cfg: ExperimentConfig, devices: list, *, say=None
) -> tuple[ExperimentConfig, Compiled, list[Compiled]]:
    """The config with `model.remat` (and, for `auto`, `mesh.per_device_batch`) resolved for `devices`, its
    compiled step, and every candidate tried. A fixed policy is compiled as configured; only `auto` moves."""
    limit = hbm_limit(devices[0])
    if cfg.model.remat != remat_mod.AUTO:
        got = compile_step(cfg, devices)
        return cfg, got, [got]
    if limit is None:  # a CPU: memory is the host's, and keeping every activation is the fastest
        fixed = with_settings(cfg, remat_mod.LADDER[0], cfg.mesh.per_device_batch)
        got = compile_step(fixed, devices)
        return fixed, got, [got]
    tried: list[Compiled] = []
    for policy, rows in candidates(cfg, len(devices)):
        trial = with_settings(cfg, policy, rows)
        kept = kept_activation_bytes(trial, rows)
        if kept > limit * (1 - MARGIN):  # a lower bound of the plan: no compile needed to rule it out
            n_micro = microbatches(cfg.data.global_batch_size, len(devices), rows)[0]
            got = Compiled(
                policy, rows, n_micro, error=f"its kept activations alone are ~{kept / GIB:.1f} GiB"
            )
        else:
            got = compile_step(trial, devices)
        tried.append(got)
        fits = got.executable is not None and got.plan_bytes <= limit * (1 - MARGIN)
        if say:
            say(_trial_line(got, limit))
        if fits:
            return trial, got, tried
    raise OlmaxError(
        f"model.remat auto: no policy fits {devices[0].device_kind} ({limit / GIB:.2f} GiB, {MARGIN:.0%} kept free) "
        f"even at one row per device (full: {_trial_line(tried[-1], limit)}); use more devices"
    )


def kept_activation_bytes(cfg: ExperimentConfig, rows: int) -> int:
    """What the layers keep for the backward pass on a chip at `rows` per device (one microbatch)."""
    per_token = kept_bytes_per_token(cfg.model, cfg.model.remat)
    return per_token * rows * cfg.data.seq_len * cfg.model.n_layers


def _trial_line(got: Compiled, limit: int | None) -> str:
    what = f"remat {got.remat}, {got.per_device_batch} row(s) x {got.n_micro} microbatch(es)"
    if got.executable is None:
        return f"{what}: does not fit ({got.error})"
    size = got.plan_bytes / GIB
    if limit is None:
        return f"{what}: {size:.2f} GiB"
    verdict = "fits" if got.plan_bytes <= limit * (1 - MARGIN) else f"over the {1 - MARGIN:.0%} mark"
    return f"{what}: {size:.2f} GiB of {limit / GIB:.2f} GiB ({verdict})"


def describe_compute(cfg: ExperimentConfig, devices: list) -> dict[str, str]:
    """The kernel and remat the step resolves for `devices` (the target's platform, not this host's)."""
    return compute_summary(cfg.model, cfg.data.seq_len, devices)


def torus(topology: Topology) -> Any:
    """The slice as the step-time model reads it (olmax.train.slice_model.Torus)."""
    from olmax.train.slice_model import Torus

    chip = topology.chip
    return Torus(chip.peak_flops, chip.ici_link_bytes_per_s, topology.shape, chip.wrap)


def what_fits(cfg: ExperimentConfig, topology: Topology, *, say=None) -> dict:
    """For a config that does not fit: the settings `model.remat=auto` resolves to on the same slice."""
    try:
        resolved, got, _ = choose(
            with_settings(cfg, remat_mod.AUTO, cfg.mesh.per_device_batch), topology.devices(), say=say
        )
    except OlmaxError as e:
        return {"error": str(e)}
    return {
        "remat": resolved.model.remat,
        "per_device_batch": got.per_device_batch,
        "plan_bytes": got.plan_bytes,
        "overrides": f"model.remat={resolved.model.remat} mesh.per_device_batch={got.per_device_batch}",
    }


def weight_matrices(cfg: ExperimentConfig, fsdp: int) -> set[tuple[int, ...]]:
    """The shapes a sharded weight matrix has in a step: whole, one layer of a stacked array, one scanned
    group of layers (norm scales, vectors of d_model, are not matrices: fp32 by design, 16 KiB a layer)."""
    from olmax.model.sharding import shard_spec
    from olmax.train.step import model_graphdef

    _, params = model_graphdef(cfg.model)
    shapes: set[tuple[int, ...]] = set()
    for path, a in jax.tree_util.tree_flatten_with_path(params)[0]:
        name = getattr(path[-1], "key", None)
        if shard_spec(tuple(a.shape), fsdp, name) == jax.sharding.PartitionSpec():
            continue
        per_layer = tuple(a.shape[1:]) if a.ndim >= 3 else tuple(a.shape)
        if len(per_layer) >= 2:
            shapes |= {tuple(a.shape), per_layer, (cfg.model.scan_group, *per_layer)}
    return shapes


def plan_report(cfg: ExperimentConfig, topology: Topology, *, say=None) -> dict:
    """Everything `olmax train --plan` prints and writes: the step compiled for `topology`, resolved,
    measured against the chip's HBM, its collectives and its predicted time."""
    from olmax.model.flops import forward_flops
    from olmax.train import collectives as coll
    from olmax.train import slice_model

    devices = topology.devices()
    mesh = make_mesh(cfg.mesh, devices)
    resolved, got, tried = choose(cfg, devices, say=say)
    compute = describe_compute(resolved, devices)
    limit = topology.chip.hbm_bytes
    report: dict[str, Any] = {
        "topology": topology.name,
        "libtpu_topology": topology.libtpu_name,
        "chips": topology.chips,
        "hosts": topology.chips
        // (topology.host_bounds[0] * topology.host_bounds[1] * topology.host_bounds[2]),
        "mesh": dict(mesh.shape),
        "global_batch": cfg.data.global_batch_size,
        "seq_len": cfg.data.seq_len,
        "remat_asked": cfg.model.remat,
        "remat": resolved.model.remat,
        "per_device_batch": got.per_device_batch,
        "microbatches": got.n_micro,
        "attention": compute["attention"],
        "compute_dtype": compute["dtype"],
        "hbm_bytes_per_chip": limit,
        "margin": MARGIN,
        "tried": [
            {
                "remat": t.remat,
                "per_device_batch": t.per_device_batch,
                "plan_bytes": t.plan_bytes or None,
                "error": t.error,
            }
            for t in tried
        ],
        "compile_s": sum(t.seconds for t in tried),
    }
    report.update(checkpoint_bytes(resolved, report["hosts"]))
    if got.executable is None:
        return {**report, "fits": False, "plan_bytes_per_chip": None, "error": got.error}
    tokens = got.per_device_batch * cfg.data.seq_len  # per chip per microbatch
    kept = kept_activation_bytes(resolved, got.per_device_batch)
    text = got.executable.compiled.as_text()
    found = coll.collectives(text)
    shapes = weight_matrices(resolved, mesh.shape["fsdp"])
    report.update(
        plan_bytes_per_chip=got.plan_bytes,
        fits=got.plan_bytes <= limit * (1 - MARGIN),
        state_bytes_per_chip=got.memory.get("argument", 0),
        temp_bytes_per_chip=got.memory.get("temp", 0),
        kept_activation_bytes_per_chip=kept,
        splash_kernel_calls=text.count("tpu_custom_call"),
        collectives=coll.summarize(found),
        collective_list=coll.compact(found),
        fp32_weight_all_gathers=len(coll.fp32_weight_gathers(found, shapes)),
        whole_gradient_all_reduces=len(coll.whole_gradient_all_reduces(found, shapes)),
    )
    chip = topology.chip
    try:
        pred = slice_model.predict(
            resolved.model,
            slice_model.StepShape(resolved.model.remat, got.per_device_batch, got.n_micro, cfg.data.seq_len),
            torus(topology),
            found,
        )
        report.update(predicted_step_s=pred.step_s, predicted_mfu=pred.mfu, prediction=pred.as_dict())
        if chip.name != "v5e":
            report["prediction"]["assumption"] = f"the v5e's measured rate applied to the {chip.name}'s peak"
    except ValueError as e:
        report.update(predicted_step_s=None, predicted_mfu=None, prediction={"error": str(e)})
    report["model_flops_per_chip_step"] = (
        3 * forward_flops(cfg.model, cfg.data.seq_len).per_token * tokens * got.n_micro
    )
    return report


NOTICE_S = 30  # a spot TPU VM's preemption notice, in seconds: the time a stop's save has


def checkpoint_bytes(cfg: ExperimentConfig, hosts: int) -> dict[str, float]:
    """What a checkpoint of `cfg`'s train state weighs (fp32 params and AdamW's two moments; the step, the
    skip history and the loader state are bytes), in all and per host (each host writes its own shards),
    and the write rate a host needs to save it within a preemption notice."""
    from olmax.model.transformer import count_params

    total = 12 * count_params(cfg.model, padded=True)
    per_host = total / hosts
    return {
        "checkpoint_bytes": total,
        "checkpoint_bytes_per_host": per_host,
        "checkpoint_rate_for_notice": per_host / NOTICE_S,
    }


def format_report(r: dict) -> str:
    """The plan as the command prints it."""
    gib = lambda b: f"{b / GIB:.2f} GiB" if b is not None else "-"  # noqa: E731
    lines = [
        f"olmax plan: {r['topology']} ({r['chips']} chips, {r['libtpu_topology']}, {r['hosts']} host(s)); "
        f"mesh {' x '.join(f'{k}={v}' for k, v in r['mesh'].items())}",
        f"  batch      {r['global_batch']} x {r['seq_len']}: {r['per_device_batch']} row(s) per chip x "
        f"{r['microbatches']} microbatch(es)",
        f"  attention  {r['attention']}",
        f"  remat      {r['remat']}" + (" (auto)" if r["remat_asked"] == remat_mod.AUTO else ""),
    ]
    for t in r["tried"][:-1] if r["remat_asked"] == remat_mod.AUTO else []:
        lines.append(
            f"               tried {t['remat']} at {t['per_device_batch']} row(s): {t['error'] or gib(t['plan_bytes'])}"
        )
    lines.append(
        f"  checkpoint {r['checkpoint_bytes'] / 1e9:.1f} GB (fp32 params and AdamW moments), "
        f"{r['checkpoint_bytes_per_host'] / 1e9:.2f} GB a host: a {NOTICE_S} s preemption notice needs "
        f"{r['checkpoint_rate_for_notice'] / 1e6:,.0f} MB/s a host to save and upload it"
    )
    if r.get("plan_bytes_per_chip") is None:
        lines.append(f"  memory     does not fit: {r.get('error', '')}")
        return "\n".join(lines + _what_fits_lines(r))
    verdict = "fits" if r["fits"] else f"does not fit with {r['margin']:.0%} kept free"
    lines += [
        f"  memory     {gib(r['plan_bytes_per_chip'])} of {gib(r['hbm_bytes_per_chip'])} HBM ({verdict}): state "
        f"{gib(r['state_bytes_per_chip'])}, kept activations ~{gib(r['kept_activation_bytes_per_chip'])}, the rest "
        f"{gib(r['plan_bytes_per_chip'] - r['state_bytes_per_chip'] - r['kept_activation_bytes_per_chip'])}",
        "  collectives per step (per chip):",
    ]
    for kind, row in r["collectives"].items():
        lines.append(f"    {kind:26s} {row['runs_per_step']:6d} runs  {row['bytes_per_step'] / 1e9:8.2f} GB")
    lines.append(
        f"    fp32 weight all-gathers: {r['fp32_weight_all_gathers']}; whole-gradient all-reduces: "
        f"{r['whole_gradient_all_reduces']}"
    )
    lines += _what_fits_lines(r)
    p = r.get("prediction", {})
    if r.get("predicted_step_s"):
        lines.append(
            f"  predicted  {r['predicted_step_s']:.2f} s a step: compute {p['compute_s']:.2f} s at "
            f"{p['rate']:.1%} of peak ({p['rate_from']}), collectives {p['collectives_s']:.2f} s of which "
            f"{p['exposed_s']:.2f} s exposed; MFU {r['predicted_mfu']:.1%}"
            + (f" ({p['assumption']})" if p.get("assumption") else "")
        )
    else:
        lines.append(f"  predicted  - ({p.get('error', '')})")
    return "\n".join(lines)


def _what_fits_lines(r: dict) -> list[str]:
    w = r.get("what_fits")
    if not w:
        return []
    if "overrides" in w:
        return [f"  fits with  {w['overrides']} ({w['plan_bytes'] / GIB:.2f} GiB; or model.remat=auto)"]
    return [f"  fits with  nothing on this slice: {w['error']}"]
