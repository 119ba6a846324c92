"""Where a train step's time goes: the parts of bench/peers/train_step.py's step, each timed alone, olmax vs torch.

Same shapes as bench/peers/train_step.py (real dolma2 vocabulary, d_model 512, 8 heads x 64, MLP 1,376, fp32):
- `head`: LM head + CE (+ z-loss on the olmax side), forward and backward. olmax: the fused
  `head_cross_entropy` the train step uses; torch: `Linear` logits, `cross_entropy`, `backward`, as HF does.
- `layers`: embedding + the transformer blocks + final norm, forward and backward of sum(hidden * c).
  olmax: `Transformer.hidden` under `jax.grad`; HF: `Olmo3ForCausalLM.model` (SDPA attention).
- `attention`: one layer's causal attention core alone, forward and backward (olmax's chunked XLA
  attention with its custom VJP vs torch `scaled_dot_product_attention`).
- `optimizer`: global-norm clip 1.0 + AdamW over all 116 M parameters (olmax's `apply_update` with the
  skip-step statistics, donated buffers; torch `clip_grad_norm_(foreach=True)` + AdamW on the faster of
  `fused=True` / `foreach=True`, chosen by bench/peers/train_step.py's probe, which also times AdamW with no
  flag and prints all three).
Each row's sides run in alternation `--iters` times after a warm-up; medians are printed with their
ratio (> 1: olmax faster). The head, layers and attention rows also time the torch code under
`torch.compile` (inductor, CPU; compilation untimed) as a third column with its own ratio; the
optimizer row has none (the fused AdamW is already one kernel). `--no-compile` skips that column.

    .venv/bin/python -m bench.peers.train_breakdown [--batch 1] [--seq 1024] [--layers 4] [--iters 5] [--no-compile]
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.record import add_arguments, shrink


def median_pair(fns: dict, iters: int) -> dict[str, float]:
    from bench.peers.train_step import time_interleaved

    return {name: float(np.median(t)) for name, t in time_interleaved(fns, iters).items()}


def compiled_variant(make_run, fn, label: str, enabled: bool) -> dict:
    """{"torch.compile": make_run(torch.compile(fn))} once two untimed calls (compilation) succeed, else {}."""
    if not enabled:
        return {}
    import time

    import torch

    run = make_run(torch.compile(fn))
    t = time.perf_counter()
    try:
        run()
        run()
    except Exception as err:  # report why and leave the column empty
        print(f"torch.compile failed for {label}: {type(err).__name__}: {str(err)[:300]}")
        return {}
    print(
        f"torch.compile, {label}: compilation + 2 calls {time.perf_counter() - t:.1f} s (untimed)", flush=True
    )
    return {"torch.compile": run}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    parser.add_argument("--probe-iters", type=int, default=3, help="steps per AdamW path in the torch probe")
    parser.add_argument("--vocab", type=int, default=100_278, help="vocabulary size (dolma2's by default)")
    add_arguments(parser)
    args = shrink(parser.parse_args(), seq=64, layers=1, iters=1, no_compile=True, probe_iters=1, vocab=4096)
    compile_on = not args.no_compile

    import jax
    import jax.numpy as jnp
    import torch
    from flax import nnx

    from bench.peers.train_step import adamw, clip_and_step, describe_probe, probe_adamw
    from olmax.model.attention import attend
    from olmax.model.hf_reference import random_hf_model
    from olmax.model.model_config import ModelConfig
    from olmax.train.config import MeshConfig, OptimConfig
    from olmax.train.loss import HeadLoss, head_cross_entropy
    from olmax.train.mesh import make_mesh
    from olmax.train.optim import apply_update
    from olmax.train.step import default_ce_chunk, make_init, model_graphdef

    b, seq, d, vocab = args.batch, args.seq, 512, args.vocab
    mlp = int(d * 8 / 3 / 32 + 0.999) * 32
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, size=(b, seq))
    cfg = ModelConfig(
        vocab_size=vocab,
        d_model=d,
        n_layers=args.layers,
        n_heads=d // 64,
        n_kv_heads=d // 64,
        head_dim=64,
        mlp_hidden=mlp,
    )
    optim = OptimConfig(lr=1e-4, warmup_steps=0)
    state = make_init(cfg, optim, make_mesh(MeshConfig(data=1, fsdp=-1)), 0)
    hf = random_hf_model(
        seed=0,
        vocab_size=vocab,
        hidden_size=d,
        intermediate_size=mlp,
        num_hidden_layers=args.layers,
        num_attention_heads=d // 64,
        num_key_value_heads=d // 64,
        sliding_window=4096,
        max_position_embeddings=8192,
        eos_token_id=min(100_257, vocab - 2),
        pad_token_id=min(100_277, vocab - 1),
    ).train()
    hf.config._attn_implementation = "sdpa"
    rows = {}

    # --- LM head + CE
    h_np = rng.normal(size=(b, seq, d)).astype(np.float32)
    jh, jids = jnp.asarray(h_np), jnp.asarray(ids.astype(np.int32))
    head_grad = jax.jit(
        jax.grad(
            lambda h, w: sum(head_cross_entropy(h, w, jids, HeadLoss(1e-5, vocab, default_ce_chunk()))[:2]),
            argnums=(0, 1),
        )
    )
    w = state["params"]["lm_head"]
    th = torch.from_numpy(h_np).requires_grad_()
    lin = torch.nn.Linear(d, vocab, bias=False)
    tids = torch.from_numpy(ids)

    def head_loss(h):
        logits = lin(h).float()
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab), tids[:, 1:].reshape(-1))

    def torch_head(loss_fn):
        def run():
            loss_fn(th).backward()
            lin.weight.grad = th.grad = None

        return run

    rows["head (LM head + CE, fwd+bwd)"] = median_pair(
        {
            "olmax": lambda: jax.block_until_ready(head_grad(jh, w)),
            "torch": torch_head(head_loss),
            **compiled_variant(torch_head, head_loss, "head", compile_on),
        },
        args.iters,
    )

    # --- layers + embedding
    graphdef, _ = model_graphdef(cfg)
    params = dict(state["params"])
    c_np = rng.normal(size=(b, seq, d)).astype(np.float32)
    jc, tc = jnp.asarray(c_np), torch.from_numpy(c_np)
    layers_grad = jax.jit(jax.grad(lambda p: jnp.sum(nnx.merge(graphdef, p).hidden(jids, None) * jc)))

    def hf_layers(body):
        def run():
            (body(input_ids=tids).last_hidden_state * tc).sum().backward()
            for p in hf.parameters():
                p.grad = None

        return run

    rows["layers + embedding (fwd+bwd)"] = median_pair(
        {
            "olmax": lambda: jax.block_until_ready(layers_grad(params)),
            "torch": hf_layers(hf.model),
            **compiled_variant(hf_layers, hf.model, "layers + embedding", compile_on),
        },
        args.iters,
    )

    # --- one layer's attention core
    q_np = rng.normal(size=(b, seq, d // 64, 64)).astype(np.float32)
    jq = jnp.asarray(q_np)
    att_grad = jax.jit(
        jax.grad(
            lambda q, k, v: jnp.sum(attend(q, k, v, None, None, "xla", cfg.attention_chunk) * q),
            argnums=(0, 1, 2),
        )
    )
    tq = [torch.from_numpy(q_np.transpose(0, 2, 1, 3).copy()).requires_grad_() for _ in range(3)]

    def causal_sdpa(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    def torch_att(att):
        def run():
            (att(*tq) * tq[0].detach()).sum().backward()
            for t in tq:
                t.grad = None

        return run

    rows["attention core, one layer (fwd+bwd)"] = median_pair(
        {
            "olmax": lambda: jax.block_until_ready(att_grad(jq, jq, jq)),
            "torch": torch_att(causal_sdpa),
            **compiled_variant(torch_att, causal_sdpa, "attention", compile_on),
        },
        args.iters,
    )

    # --- clip + AdamW over all parameters
    grads = jax.tree.map(lambda p: p * 1e-3, state["params"])
    update = jax.jit(
        lambda p, g, o: apply_update(p, g, o, 1e-4, jnp.float32(3.0), optim)[:2], donate_argnums=(0, 2)
    )
    held = {"p": jax.tree.map(jnp.copy, state["params"]), "o": jax.tree.map(jnp.copy, state["opt"])}

    def olmax_update():
        held["p"], held["o"] = update(held["p"], grads, held["o"])
        jax.block_until_ready(held["p"])

    hf_params = list(hf.parameters())
    choice, medians = probe_adamw(hf_params, args.probe_iters)
    print(describe_probe(choice, medians, sum(p.numel() for p in hf_params)), flush=True)
    for p in hf_params:
        p.grad = torch.randn_like(p) * 1e-3
    opt = adamw(hf_params, choice)

    rows[f"clip + AdamW({choice}=True), all parameters"] = median_pair(
        {"olmax": olmax_update, "torch": lambda: clip_and_step(hf_params, opt)}, args.iters
    )

    n_params = sum(x.size for x in jax.tree.leaves(state["params"]))
    print(
        f"{args.layers} layers, d_model {d}, vocab {vocab:,}, batch {b} x seq {seq}, {n_params / 1e6:.0f} M "
        f"parameters, fp32; medians of {args.iters}"
    )
    print(
        f"{'part':45s} {'olmax s':>9s} {'torch s':>9s} {'torch/olmax':>12s} {'compile s':>10s} "
        f"{'compile/olmax':>14s}"
    )
    for name, t in rows.items():
        line = f"{name:45s} {t['olmax']:9.3f} {t['torch']:9.3f} {t['torch'] / t['olmax']:11.2f}x"
        if "torch.compile" in t:
            line += f" {t['torch.compile']:10.3f} {t['torch.compile'] / t['olmax']:13.2f}x"
        else:
            line += f" {'-':>10s} {'-':>14s}"
        print(line)


if __name__ == "__main__":
    main()
