"""HF Olmo3ForCausalLM checkpoints <-> olmax models, through safetensors read and written directly.

`from_hf` memory-maps the checkpoint and copies one tensor (one stacked layer parameter) at a time into
the model, so a checkpoint never sits twice in host memory; `to_hf` streams tensors back out one at a
time in the dtype the checkpoint came in. bf16 or fp32 -> fp32 params -> the same dtype is exact, so
`to_hf(from_hf(x))` reproduces x's weights bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx

from olmax.data.tokenize import load_tokenizer
from olmax.errors import OlmaxError
from olmax.jsonio import write_json
from olmax.model.model_config import ModelConfig, YarnConfig, from_hf_config, to_hf_config
from olmax.model.safetensors_io import DTYPES, AtomicDirectory, SafetensorsReader, write_checkpoint
from olmax.model.transformer import Transformer

# (olmax path inside a block, HF name inside `model.layers.{i}.`, stored transposed in HF)
LAYER_PARAMS = (
    (("attn", "q_proj"), "self_attn.q_proj.weight", True),
    (("attn", "k_proj"), "self_attn.k_proj.weight", True),
    (("attn", "v_proj"), "self_attn.v_proj.weight", True),
    (("attn", "o_proj"), "self_attn.o_proj.weight", True),
    (("attn", "q_norm", "weight"), "self_attn.q_norm.weight", False),
    (("attn", "k_norm", "weight"), "self_attn.k_norm.weight", False),
    (("attn_norm", "weight"), "post_attention_layernorm.weight", False),
    (("mlp", "gate_proj"), "mlp.gate_proj.weight", True),
    (("mlp", "up_proj"), "mlp.up_proj.weight", True),
    (("mlp", "down_proj"), "mlp.down_proj.weight", True),
    (("mlp_norm", "weight"), "post_feedforward_layernorm.weight", False),
)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "generation_config.json",
)
EXPORT_INFO = "olmax_export.json"  # provenance of an HF directory exported from a training run
_NP_NAMES = {"float32": np.float32, "bfloat16": DTYPES["BF16"], "float16": np.float16}


def read_hf_config(path: str | os.PathLike) -> dict:
    """The parsed config.json of an HF checkpoint directory."""
    config_path = Path(path) / "config.json"
    if not config_path.is_file():
        raise OlmaxError(
            f"{config_path}: not found; pass the directory of an HF checkpoint (config.json + *.safetensors)"
        )
    try:
        return json.loads(config_path.read_text())
    except ValueError as e:
        raise OlmaxError(f"{config_path}: invalid JSON ({e}); fix or re-save the config") from e


def _get(tree: dict, path: tuple[str, ...]):
    for key in path:
        tree = tree[key]
    return tree


def _set(tree: dict, path: tuple[str, ...], value) -> None:
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value


def _checked(reader: SafetensorsReader, name: str, shape: tuple[int, ...]) -> np.ndarray:
    got = reader.shape(name)
    if got != shape:
        raise OlmaxError(
            f"{reader.directory}: tensor {name} has shape {got}, config.json implies {shape}; "
            "the config does not match the weights"
        )
    return reader.get(name)


def abstract_model(cfg: ModelConfig) -> tuple[nnx.GraphDef, nnx.State]:
    """The graph and shape-only state of a Transformer for `cfg`, without allocating parameters."""
    return nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))


def from_hf(path: str | os.PathLike, dtype: str = "float32", **overrides) -> Transformer:
    """Load an HF OLMo 3 checkpoint directory as an olmax model (fp32 params, `dtype` compute).

    `overrides` replace ModelConfig fields (e.g. attention_impl="jax", remat="dots").
    """
    path = Path(path)
    hf = read_hf_config(path)
    reader = SafetensorsReader(path)
    stored = reader.dtype("model.embed_tokens.weight")
    hf_dtype = next((k for k, v in _NP_NAMES.items() if np.dtype(v) == stored), "float32")
    cfg = from_hf_config(hf, where=str(path / "config.json"), dtype=dtype, hf_dtype=hf_dtype, **overrides)
    graphdef, state = abstract_model(cfg)
    params = state.to_pure_dict()
    v, d = cfg.vocab_size, cfg.d_model

    embed = np.zeros((cfg.padded_vocab, d), np.float32)
    embed[:v] = _checked(reader, "model.embed_tokens.weight", (v, d))
    params["embed"] = jnp.asarray(embed)
    del embed
    head = np.zeros((d, cfg.padded_vocab), np.float32)
    head[:, :v] = _checked(reader, "lm_head.weight", (v, d)).T
    params["lm_head"] = jnp.asarray(head)
    del head
    params["final_norm"]["weight"] = jnp.asarray(_checked(reader, "model.norm.weight", (d,)), jnp.float32)
    for ours, theirs, transposed in LAYER_PARAMS:
        target = _get(params["blocks"], ours)
        stacked = np.empty(target.shape, np.float32)
        for i in range(cfg.n_layers):
            want = stacked.shape[1:][::-1] if transposed else stacked.shape[1:]
            w = _checked(reader, f"model.layers.{i}.{theirs}", tuple(want))
            stacked[i] = w.T if transposed else w
        _set(params["blocks"], ours, jnp.asarray(stacked))
        del stacked
    nnx.replace_by_pure_dict(state, params)
    return nnx.merge(graphdef, state)


def hf_tensors(model: Transformer, dtype: str | None = None):
    """(name, shape, dtype, producer) for every HF tensor of `model`, producers pulling one at a time."""
    cfg: ModelConfig = model.cfg
    out = np.dtype(_NP_NAMES[dtype or cfg.hf_dtype])
    params = nnx.state(model).to_pure_dict()
    v, d = cfg.vocab_size, cfg.d_model
    specs = [("model.embed_tokens.weight", (v, d), out, lambda: np.asarray(params["embed"][:v]).astype(out))]
    for i in range(cfg.n_layers):
        for ours, theirs, transposed in LAYER_PARAMS:
            leaf = _get(params["blocks"], ours)
            shape = leaf.shape[1:][::-1] if transposed else leaf.shape[1:]

            def produce(leaf=leaf, i=i, transposed=transposed) -> np.ndarray:
                w = np.asarray(leaf[i])
                return (w.T if transposed else w).astype(out)

            specs.append((f"model.layers.{i}.{theirs}", tuple(shape), out, produce))
    specs.append(
        ("model.norm.weight", (d,), out, lambda: np.asarray(params["final_norm"]["weight"]).astype(out))
    )
    specs.append(("lm_head.weight", (v, d), out, lambda: np.asarray(params["lm_head"][:, :v]).T.astype(out)))
    return specs


def hf_tokenizer_files(tokenizer_json: Path, out: Path, model_cfg) -> None:
    """tokenizer.json plus the two small files `AutoTokenizer` reads, in `out`."""

    tok = load_tokenizer(str(tokenizer_json))
    if tok.vocab_size > model_cfg.vocab_size:
        raise OlmaxError(
            f"{tokenizer_json}: {tok.vocab_size} token ids, more than the model's {model_cfg.vocab_size}; "
            "pass the tokenizer the run trained with (--tokenizer)"
        )
    shutil.copyfile(tokenizer_json, out / "tokenizer.json")
    spec = json.loads(Path(tokenizer_json).read_text())
    names = {int(t["id"]): t["content"] for t in spec.get("added_tokens", [])}
    eos = names[tok.eos_token_id]
    special = {
        "eos_token": eos,
        "bos_token": eos,
        "unk_token": eos,
    }  # dolma2 has no BOS: lm-eval's prefix is EOS
    if tok.pad_token_id is not None:
        special["pad_token"] = names[tok.pad_token_id]
    write_json(out / "special_tokens_map.json", special)
    write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **special,
            "add_bos_token": False,
            "add_eos_token": False,
            "model_max_length": model_cfg.max_position_embeddings,
            "clean_up_tokenization_spaces": False,
        },
    )


def to_hf(
    model: Transformer,
    path: str | os.PathLike,
    dtype: str | None = None,
    tokenizer_from: str | os.PathLike | None = None,
    max_shard_bytes: int = 5 << 30,
    tokenizer_json: str | os.PathLike | None = None,
    provenance: dict | None = None,
) -> Path:
    """Write `model` as an HF Olmo3ForCausalLM checkpoint directory that `transformers` loads.

    `dtype` defaults to the dtype the model was loaded from (float32 for fresh models); tokenizer files
    found in `tokenizer_from` (an HF directory) are copied alongside, or `tokenizer_json` is shipped with
    the files `AutoTokenizer` needs (`hf_tokenizer_files`). `provenance` is written as olmax_export.json
    and, as strings, into every safetensors file's `__metadata__`. The directory appears only once complete.
    """
    if dtype is not None and dtype not in _NP_NAMES:
        raise OlmaxError(f"dtype {dtype!r} is not one of {sorted(_NP_NAMES)}")
    cfg: ModelConfig = dataclasses.replace(model.cfg, hf_dtype=dtype or model.cfg.hf_dtype)
    metadata = {f"olmax_{k}": str(v) for k, v in (provenance or {}).items() if v is not None}
    with AtomicDirectory(path) as tmp:
        write_json(tmp / "config.json", to_hf_config(cfg))
        write_checkpoint(tmp, hf_tensors(model, dtype), max_shard_bytes, metadata=metadata)
        if tokenizer_json is not None:
            hf_tokenizer_files(Path(tokenizer_json), tmp, cfg)
        elif tokenizer_from is not None:
            for name in TOKENIZER_FILES:
                src = Path(tokenizer_from) / name
                if src.is_file():
                    shutil.copyfile(src, tmp / name)
        if not (tmp / "generation_config.json").is_file():
            write_json(
                tmp / "generation_config.json",
                {
                    "eos_token_id": cfg.eos_token_id,
                    "pad_token_id": cfg.pad_token_id,
                    **({"bos_token_id": cfg.bos_token_id} if cfg.bos_token_id is not None else {}),
                },
            )
        if provenance is not None:
            write_json(tmp / EXPORT_INFO, provenance)
    return Path(path)


def save_olmax(model: Transformer, path: str | os.PathLike) -> Path:
    """Write an olmax checkpoint: `model_config.json` + an Orbax checkpoint of the params under `params/`."""
    import orbax.checkpoint as ocp

    config = dataclasses.asdict(model.cfg)
    with AtomicDirectory(path) as tmp:
        write_json(tmp / "model_config.json", config)
        with ocp.StandardCheckpointer() as ckptr:
            ckptr.save((tmp / "params").absolute(), nnx.state(model).to_pure_dict())
            ckptr.wait_until_finished()
    return Path(path)


def load_olmax(path: str | os.PathLike, **overrides) -> Transformer:
    """Read a checkpoint written by `save_olmax`; `overrides` replace ModelConfig fields."""
    import orbax.checkpoint as ocp

    config_path = Path(path) / "model_config.json"
    if not config_path.is_file():
        raise OlmaxError(
            f"{config_path}: not found; pass a directory written by `olmax model convert --to olmax`"
        )
    raw = json.loads(config_path.read_text())
    if raw.get("rope_scaling"):
        raw["rope_scaling"] = YarnConfig(**raw["rope_scaling"])
    raw["extra_hf"] = tuple(tuple(kv) for kv in raw.get("extra_hf", ()))
    cfg = ModelConfig(**{**raw, **overrides})
    graphdef, state = abstract_model(cfg)
    with ocp.StandardCheckpointer() as ckptr:
        params = ckptr.restore((Path(path) / "params").absolute(), state.to_pure_dict())
    nnx.replace_by_pure_dict(state, params)
    return nnx.merge(graphdef, state)
