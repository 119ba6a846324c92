"""Forward-pass throughput: HF transformers `Olmo3ForCausalLM` on torch vs olmax on JAX, same CPU, same weights.

Model: OLMo-3-shaped (reordered norm, QK-norm, SwiGLU, untied head, RoPE 500k, window 4096 on layers
i % 4 != 3) with the real dolma2 vocabulary (100,278; olmax pads its embedding to 100,352), d_model 512,
8 heads x 64, MLP 1,376, a few layers; fp32 on both sides. One random HF checkpoint is saved to a temp
dir and loaded by both (olmax through `olmax.model.from_hf`), their logits are checked to agree, then
each runs two blocks of `--iters` timed forward passes, hf/olmax then olmax/hf, each block after one
untimed call (jit compilation for olmax); the ratio pairs the i-th timed call of each side. HF uses its
default SDPA attention under `torch.inference_mode`. The record goes to bench/results/forward.json; the
last lines are `forward tokens/s olmax/hf-torch = N.Nx (MIN–MAX)` and the record's path.

    .venv/bin/python -m bench.peers.forward [--layers 4] [--batch 2] [--seq 1024] [--iters 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import numpy as np

from bench.harness import WARM_WALL
from bench.record import Record, add_arguments, format_figure, package_version, pairwise_ratio, shrink


def time_blocks(fns: dict, iters: int, rounds: int = 2) -> dict[str, list[float]]:
    """Seconds per call of each fn, timed in blocks of `iters` calls, block order swapped every round.

    Each block starts with one untimed call: it absorbs jit compilation and the other framework's
    threads still spinning after its last call (OpenMP busy-waits), so the frameworks do not tax each
    other; swapping the order spreads any drift in background load over both.
    """
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            fns[name]()
            for _ in range(iters):
                start = time.perf_counter()
                fns[name]()
                times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=3, help="timed calls per block (2 blocks each)")
    parser.add_argument("--d-model", type=int, default=512)
    add_arguments(parser)
    args = shrink(parser.parse_args(), layers=1, batch=1, seq=128, iters=1, d_model=128)

    import jax
    import jax.numpy as jnp
    import torch
    from flax import nnx

    from olmax.model import from_hf
    from olmax.model.flops import forward_flops
    from olmax.model.hf_reference import random_hf_model

    d = args.d_model
    shape = dict(
        vocab_size=100_278,
        hidden_size=d,
        intermediate_size=int(d * 8 / 3 / 32 + 0.999) * 32,
        num_hidden_layers=args.layers,
        num_attention_heads=d // 64,
        num_key_value_heads=d // 64,
        sliding_window=4096,
        max_position_embeddings=8192,
        eos_token_id=100_257,
        pad_token_id=100_277,
    )
    hf = random_hf_model(seed=0, **shape)
    hf.config._attn_implementation = "sdpa"
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)
        model = from_hf(tmp)
    ids = np.random.default_rng(0).integers(0, 100_278, size=(args.batch, args.seq))
    tokens = args.batch * args.seq
    ids_t, ids_j = torch.from_numpy(ids), jnp.asarray(ids, jnp.int32)

    def run_hf():
        with torch.inference_mode():
            return hf(ids_t).logits

    # jax.jit over the split state: nnx.jit would re-walk (and hand back) the module on every call
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))

    def run_olmax():
        return jax.block_until_ready(forward(state, ids_j))

    diff = float(np.abs(run_hf()[:, :64].numpy() - np.asarray(run_olmax()[:, :64])).max())
    print(
        f"config: {args.layers} layers, d_model {d}, {d // 64} heads x 64, MLP {shape['intermediate_size']}, "
        f"vocab 100,278 (olmax padded {model.cfg.padded_vocab}); batch {args.batch} x seq {args.seq}; "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads), jax {jax.__version__} "
        f"({jax.devices()[0].platform}); max |dlogit| first 64 positions {diff:.2e}"
    )
    flop = forward_flops(model.cfg, args.seq).total * args.batch
    rec = Record("forward", argv=sys.argv, smoke=args.smoke, results=args.results)
    rec.side(
        "olmax",
        version="this tree",
        setting=f"jax {jax.__version__} jit over the split state, fp32, {jax.devices()[0].platform}",
    )
    rec.side(
        "hf-torch",
        version=package_version("transformers"),
        setting=f"torch {torch.__version__}, {torch.get_num_threads()} threads, sdpa attention, "
        "inference_mode, fp32",
    )
    rec.note(
        "shape",
        {
            "layers": args.layers,
            "d_model": d,
            "batch": args.batch,
            "seq": args.seq,
            "max_abs_logit_diff": diff,
        },
    )
    times = time_blocks({"hf-torch": run_hf, "olmax": run_olmax}, args.iters)
    for name, secs in times.items():
        rec.timings("forward", name, secs, "s", WARM_WALL)
        key = name.replace("-", "_")
        rate = rec.figure(f"{key}_tokens_per_s", [tokens / t / 1e3 for t in secs], "k tokens/s")
        gflops = rec.figure(f"{key}_gflop_per_s", [flop / t / 1e9 for t in secs], "GFLOP/s")
        print(f"{name:9s} {format_figure(rate)}  {format_figure(gflops)} (matmul FLOPs, attended keys)")
    ratio = rec.figure(
        "olmax_over_hf",
        pairwise_ratio(times["hf-torch"], times["olmax"]),
        "x",
        about="tokens/s olmax / hf-torch, the i-th timed call of each side",
    )
    print(f"forward tokens/s olmax/hf-torch = {format_figure(ratio)}")
    print(f"record: {rec.write()}")


if __name__ == "__main__":
    main()
