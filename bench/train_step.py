"""Training-step throughput: HF transformers `Olmo3ForCausalLM` + torch AdamW vs the olmax train step, same CPU.

Model: OLMo-3-shaped (as bench/forward.py) with the real dolma2 vocabulary (100,278), d_model 512,
8 heads x 64, MLP 1,376, a few layers; fp32 on both sides. One step on each side = forward, backward,
global-norm clip 1.0 and AdamW (0.9, 0.95), eps 1e-8, weight decay 0.1 (olmax also computes its z-loss
and the skip-step statistics, which HF does not). After one untimed warm-up each (olmax's includes jit
compilation), `--iters` timed steps run in alternation so both see the same background load; medians
are compared. FLOPs per step are 3x the forward matmul FLOPs (olmax.model.flops) for both, and each
side's FLOP/s is also printed as a fraction of its own framework's measured fp32 matmul peak on this
machine (a 2048^3 matmul, best of 5 before and 3 after every timed round, so a slow spell of the shared
machine does not lower the peak the step is held to). The last line is
`train tokens/s olmax/hf-torch = N.Nx`.

    .venv/bin/python bench/train_step.py [--layers 4] [--batch 1] [--seq 1024] [--iters 3]

At --batch 1 each step updates 116 M parameters for 1,024 tokens, so AdamW's memory traffic (the same
on both sides) is a large share of the step; --batch 4 is closer to training, where one optimizer step
serves millions of tokens. The README gives both.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--ce-chunk", type=int, default=None, help="olmax train.ce_chunk (default: auto)")
    parser.add_argument("--olmax-only", action="store_true", help="skip the HF side")
    args = parser.parse_args()

    import jax
    import torch

    from olmax.model.config import ModelConfig
    from olmax.model.flops import forward_flops
    from olmax.model.hf_reference import random_hf_model
    from olmax.train.config import MeshConfig, OptimConfig
    from olmax.train.mesh import global_batch, make_mesh
    from olmax.train.step import make_init, make_train_step

    d = args.d_model
    mlp = int(d * 8 / 3 / 32 + 0.999) * 32
    shape = dict(vocab_size=100_278, hidden_size=d, intermediate_size=mlp, num_hidden_layers=args.layers,
                 num_attention_heads=d // 64, num_key_value_heads=d // 64, sliding_window=4096,
                 max_position_embeddings=8192, eos_token_id=100_257, pad_token_id=100_277)
    hf = random_hf_model(seed=0, **shape).train()
    hf.config._attn_implementation = "sdpa"
    opt = torch.optim.AdamW(hf.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    ids = np.random.default_rng(0).integers(0, 100_278, size=(args.batch, args.seq))
    ids_t = torch.from_numpy(ids)

    def run_hf():
        loss = hf(input_ids=ids_t, labels=ids_t).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    cfg = ModelConfig(vocab_size=100_278, d_model=d, n_layers=args.layers, n_heads=d // 64, n_kv_heads=d // 64,
                      head_dim=64, mlp_hidden=mlp)
    optim = OptimConfig(lr=1e-4, warmup_steps=0)
    mesh = make_mesh(MeshConfig(data=1, fsdp=-1))
    state = {"s": make_init(cfg, optim, mesh, 0)}
    step = make_train_step(cfg, optim, mesh, n_micro=1, per_device_batch=args.batch // mesh.size, t_max=100,
                           ce_chunk=args.ce_chunk)
    batch = {"input_ids": global_batch(ids.astype(np.int32), mesh, args.batch)}

    def run_olmax():
        state["s"], metrics = step(state["s"], batch)
        return float(jax.device_get(metrics["loss"]))

    tokens = args.batch * args.seq
    flop = 3 * forward_flops(cfg, args.seq).total * args.batch
    peaks = MatmulPeaks()
    peaks.sample(5)
    print(f"config: {args.layers} layers, d_model {d}, {d // 64} heads x 64, MLP {mlp}, vocab 100,278; batch "
          f"{args.batch} x seq {args.seq}; fp32; torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"jax {jax.__version__} ({jax.device_count()} {jax.devices()[0].platform} device(s))")
    results = {}
    fns = {"olmax": run_olmax} if args.olmax_only else {"hf-torch": run_hf, "olmax": run_olmax}
    times = time_interleaved(fns, args.iters, between=peaks.sample)
    print(f"fp32 matmul peak (2048^3, best of {5 + 3 * args.iters} spread over the run): "
          f"torch {peaks.best['hf-torch'] / 1e9:.1f} GFLOP/s, jax {peaks.best['olmax'] / 1e9:.1f} GFLOP/s")
    for name, secs in times.items():
        sec = float(np.median(secs))
        results[name] = tokens / sec
        print(f"{name:9s} {sec:8.2f} s/step (median of {len(secs)}, best {min(secs):.2f})  {tokens / sec:8.1f} "
              f"tokens/s  {flop / sec / 1e9:6.1f} GFLOP/s = {flop / sec / peaks.best[name]:.0%} of its matmul peak")
    if args.olmax_only:
        return
    print(f"train tokens/s olmax/hf-torch = {results['olmax'] / results['hf-torch']:.1f}x")


if __name__ == "__main__":
    main()
