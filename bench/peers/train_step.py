"""Training-step throughput: HF transformers `Olmo3ForCausalLM` + torch AdamW vs the olmax train step, same CPU.

Model: OLMo-3-shaped (as bench/peers/forward.py) with the real dolma2 vocabulary (100,278), d_model 512,
8 heads x 64, MLP 1,376, a few layers; fp32 on both sides. One step on each side = forward, backward,
global-norm clip 1.0 and AdamW (0.9, 0.95), eps 1e-8, weight decay 0.1 (olmax also computes its z-loss
and the skip-step statistics, which HF does not).

The torch side runs the fastest settings a user would pick: `clip_grad_norm_(foreach=True)` and AdamW
with `fused=True` or `foreach=True`, whichever a short probe (clip + AdamW over copies of the model's
parameters, `--probe-iters` alternating steps each) finds faster here; the probe also times AdamW as
`torch.optim.AdamW(...)` builds it with no flag (on CPU: neither the fused nor the foreach path) and
prints all three and the choice. `torch.compile(model)` (inductor, CPU) with the same optimizer is a
separate peer with its own line and ratio (`--no-compile` skips it; its compilation is untimed and
reported).

After one untimed warm-up each (olmax's includes jit compilation), `--iters` timed steps run in
alternation so all sides see the same background load; medians are compared. FLOPs per step are 3x the
forward matmul FLOPs (olmax.model.flops) for both, and each side's FLOP/s is also printed as a fraction
of its own framework's measured fp32 matmul peak on this machine (a 2048^3 matmul, best of 5 before
and 3 after every timed round, so a slow spell of the shared machine does not lower the peak the step
is held to). The last line is `train tokens/s olmax/hf-torch = N.Nx`, against eager torch with the
faster AdamW; the torch.compile ratio is the line before it.

    .venv/bin/python -m bench.peers.train_step [--layers 4] [--batch 1] [--seq 1024] [--iters 3] [--no-compile]

At --batch 1 each step updates 116 M parameters for 1,024 tokens, so AdamW's memory traffic is a large
share of the step; --batch 4 is closer to training, where one optimizer step serves millions of
tokens. The README gives both. The record is bench/results/train_step_bN.json (N = --batch); its ratio is
each interleaved step's HF time over olmax's, as median and min-max.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from bench.harness import WARM_WALL
from bench.record import Record, add_arguments, format_figure, package_version, pairwise_ratio, shrink


def time_interleaved(fns: dict, iters: int, between=None) -> dict[str, list[float]]:
    for fn in fns.values():
        fn()  # warm-up (and jit compilation), not timed
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
        if between is not None:
            between()
    return times


class MatmulPeaks:
    """Best fp32 FLOP/s of an n^3 matmul in torch and in JAX, sampled again after every timed round, so the
    peak is one the machine reached during the run (a shared machine's speed drifts over minutes)."""

    def __init__(self, n: int = 2048):
        import jax
        import jax.numpy as jnp
        import torch

        a = np.random.default_rng(0).normal(size=(n, n)).astype(np.float32)
        ta, ja = torch.from_numpy(a), jnp.asarray(a)
        mm = jax.jit(jnp.dot)
        mm(ja, ja).block_until_ready()
        self.flop = 2 * n**3
        self.fns = {"hf-torch": lambda: torch.mm(ta, ta), "olmax": lambda: mm(ja, ja).block_until_ready()}
        self.best = {name: 0.0 for name in self.fns}

    def sample(self, reps: int = 3) -> None:
        for name, fn in self.fns.items():
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                self.best[name] = max(self.best[name], self.flop / (time.perf_counter() - t))


ADAMW = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
ADAMW_PATHS = {"fused": {"fused": True}, "foreach": {"foreach": True}, "default": {}}


def adamw(params, path: str):
    """torch AdamW with the bench's hyperparameters on one implementation path: `fused`, `foreach`, or
    `default` (no flag: what `torch.optim.AdamW(...)` picks, which on CPU is the per-tensor loop)."""
    import torch

    return torch.optim.AdamW(params, **ADAMW, **ADAMW_PATHS[path])


def clip_and_step(params, opt) -> None:
    import torch

    torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
    opt.step()


def probe_adamw(params, iters: int, paths=("fused", "foreach", "default")) -> tuple[str, dict[str, float]]:
    """Median seconds of clip + AdamW per path over one copy of `params` with random gradients (each path
    its own optimizer state), alternating paths after one warm-up step each; returns the faster of fused
    and foreach, and all the medians."""
    import torch

    tensors = [p.detach().clone().requires_grad_() for p in params]
    for t in tensors:
        t.grad = torch.randn_like(t) * 1e-3
    opts = {path: adamw(tensors, path) for path in paths}
    fns = {path: (lambda opt=opt: clip_and_step(tensors, opt)) for path, opt in opts.items()}
    medians = {path: float(np.median(t)) for path, t in time_interleaved(fns, iters).items()}
    return min(("fused", "foreach"), key=medians.__getitem__), medians


def describe_probe(choice: str, medians: dict[str, float], n_params: int) -> str:
    times = ", ".join(f"{path} {sec:.3f} s" for path, sec in medians.items())
    return (
        f"torch clip_grad_norm_(foreach=True) + AdamW over {n_params / 1e6:.1f} M parameters, median s/step: "
        f"{times} (default = no flag: on CPU neither fused nor foreach); using AdamW({choice}=True)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--ce-chunk", type=int, default=None, help="olmax train.ce_chunk (default: auto)")
    parser.add_argument("--olmax-only", action="store_true", help="skip the HF side")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    parser.add_argument("--probe-iters", type=int, default=3, help="steps per AdamW path in the torch probe")
    add_arguments(parser)
    args = shrink(
        parser.parse_args(), seq=128, layers=1, iters=2, d_model=128, no_compile=True, probe_iters=1
    )
    rec = Record(f"train_step_b{args.batch}", argv=sys.argv, smoke=args.smoke, results=args.results)

    import jax
    import torch

    from olmax.model.flops import forward_flops
    from olmax.model.hf_reference import random_hf_model
    from olmax.model.model_config import ModelConfig
    from olmax.train.config import MeshConfig, OptimConfig
    from olmax.train.mesh import global_batch, make_mesh
    from olmax.train.step import make_init, make_train_step

    d = args.d_model
    mlp = int(d * 8 / 3 / 32 + 0.999) * 32
    shape = dict(
        vocab_size=100_278,
        hidden_size=d,
        intermediate_size=mlp,
        num_hidden_layers=args.layers,
        num_attention_heads=d // 64,
        num_key_value_heads=d // 64,
        sliding_window=4096,
        max_position_embeddings=8192,
        eos_token_id=100_257,
        pad_token_id=100_277,
    )
    hf = random_hf_model(seed=0, **shape).train()
    hf.config._attn_implementation = "sdpa"
    params = list(hf.parameters())
    ids = np.random.default_rng(0).integers(0, 100_278, size=(args.batch, args.seq))
    ids_t = torch.from_numpy(ids)
    print(
        f"config: {args.layers} layers, d_model {d}, {d // 64} heads x 64, MLP {mlp}, vocab 100,278; batch "
        f"{args.batch} x seq {args.seq}; fp32; torch {torch.__version__} ({torch.get_num_threads()} threads)",
        flush=True,
    )
    if not args.olmax_only:
        choice, medians = probe_adamw(params, args.probe_iters)
        print(describe_probe(choice, medians, sum(p.numel() for p in params)), flush=True)
        opt = adamw(params, choice)

    def hf_step(model):
        def run():
            loss = model(input_ids=ids_t, labels=ids_t).loss
            loss.backward()
            clip_and_step(params, opt)
            opt.zero_grad(set_to_none=True)
            return float(loss.detach())

        return run

    hf_fns = {} if args.olmax_only else {"hf-torch": hf_step(hf)}
    if not (args.olmax_only or args.no_compile):
        # Same parameters and optimizer; only the model's forward (and so its backward) is compiled.
        run_compiled = hf_step(torch.compile(hf))
        t = time.perf_counter()
        try:
            run_compiled()
            run_compiled()  # a second call, in case the first step's state triggers a recompile
        except Exception as err:  # report why and carry on with the eager peer
            print(f"torch.compile(model) failed on this CPU, skipped: {type(err).__name__}: {str(err)[:300]}")
        else:
            print(
                f"torch.compile(model): inductor on {torch.device('cpu')}, compilation + first 2 steps "
                f"{time.perf_counter() - t:.1f} s (untimed)",
                flush=True,
            )
            hf_fns["hf-torch.compile"] = run_compiled

    cfg = ModelConfig(
        vocab_size=100_278,
        d_model=d,
        n_layers=args.layers,
        n_heads=d // 64,
        n_kv_heads=d // 64,
        head_dim=64,
        mlp_hidden=mlp,
    )
    optim = OptimConfig(lr=1e-4, warmup_steps=0)
    mesh = make_mesh(MeshConfig(data=1, fsdp=-1))
    state = {"s": make_init(cfg, optim, mesh, 0)}
    step = make_train_step(
        cfg,
        optim,
        mesh,
        n_micro=1,
        per_device_batch=args.batch // mesh.size,
        t_max=100,
        ce_chunk=args.ce_chunk,
    )
    batch = {"input_ids": global_batch(ids.astype(np.int32), mesh, args.batch)}

    def run_olmax():
        state["s"], metrics = step(state["s"], batch)
        return float(jax.device_get(metrics["loss"]))

    tokens = args.batch * args.seq
    flop = 3 * forward_flops(cfg, args.seq).total * args.batch
    peaks = MatmulPeaks()
    peaks.sample(5)
    print(f"jax {jax.__version__} ({jax.device_count()} {jax.devices()[0].platform} device(s))")
    results = {}
    fns = {**hf_fns, "olmax": run_olmax}
    times = time_interleaved(fns, args.iters, between=peaks.sample)
    print(
        f"fp32 matmul peak (2048^3, best of {5 + 3 * args.iters} spread over the run): "
        f"torch {peaks.best['hf-torch'] / 1e9:.1f} GFLOP/s, jax {peaks.best['olmax'] / 1e9:.1f} GFLOP/s"
    )
    rec.note(
        "shape", {"layers": args.layers, "d_model": d, "batch": args.batch, "seq": args.seq, "fp32": True}
    )
    rec.note("matmul_peak_gflops", {k: round(v / 1e9, 1) for k, v in peaks.best.items()})
    for name, secs in times.items():
        version = f"jax {jax.__version__}" if name == "olmax" else f"torch {torch.__version__}"
        setting = "jit train step" if name == "olmax" else f"{name}, AdamW({choice}=True), clip foreach"
        rec.side(
            name,
            version=f"{package_version('olmax') if name == 'olmax' else 'transformers ' + package_version('transformers')}, {version}",
            setting=setting,
        )
        rec.timings("step", name, secs, "s", WARM_WALL)
        rec.figure(f"{name}_tokens_per_s", [tokens / s for s in secs], "tokens/s")
        sec = float(np.median(secs))
        results[name] = tokens / sec
        peak = peaks.best["olmax" if name == "olmax" else "hf-torch"]
        print(
            f"{name:16s} {sec:8.2f} s/step (median of {len(secs)}, best {min(secs):.2f})  {tokens / sec:8.1f} "
            f"tokens/s  {flop / sec / 1e9:6.1f} GFLOP/s = {flop / sec / peak:.0%} of its matmul peak"
        )
    if args.olmax_only:
        print(f"wrote {rec.write()}")
        return
    if "hf-torch.compile" in results:
        fig = rec.figure("ratio_compile", pairwise_ratio(times["hf-torch.compile"], times["olmax"]), "x")
        print(
            f"train tokens/s olmax/hf-torch.compile = {format_figure(fig, 2)} "
            f"(torch.compile(model) + AdamW({choice}=True), per interleaved step)"
        )
    fig = rec.figure("ratio", pairwise_ratio(times["hf-torch"], times["olmax"]), "x")
    print(f"wrote {rec.write()}")
    print(f"train tokens/s olmax/hf-torch = {format_figure(fig, 2)} (per interleaved step: median, min-max)")


if __name__ == "__main__":
    main()
