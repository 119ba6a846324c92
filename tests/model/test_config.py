"""Presets carry OLMo 3's published numbers; HF config.json maps both ways without HF's class defaults."""

import pytest
from transformers import Olmo3Config

from olmax.errors import OlmaxError
from olmax.model.flops import flops_per_token
from olmax.model.model_config import (
    FULL,
    SLIDING,
    YarnConfig,
    from_hf_config,
    olmo3_7b,
    olmo3_7b_hd256,
    olmo3_32b,
    tiny,
    to_hf_config,
)
from olmax.model.transformer import count_params


def test_7b_preset():
    c = olmo3_7b()
    assert (c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.mlp_hidden) == (
        4096,
        32,
        32,
        32,
        128,
        11008,
    )
    assert c.rms_eps == 1e-6 and c.rope_theta == 500_000 and c.sliding_window == 4096
    assert c.vocab_size == 100_278 and c.padded_vocab == 100_352 and c.eos_token_id == 100_257
    assert [i for i, t in enumerate(c.layer_types) if t == FULL] == list(range(3, 32, 4))
    assert c.window(0) == 4096 and c.window(3) is None
    assert count_params(c) == 7_298_011_136  # docs/olmo3.md: ~7.30B


def test_32b_and_hd256_presets():
    c = olmo3_32b()
    assert (c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.mlp_hidden) == (5120, 64, 40, 8, 27648)
    h = olmo3_7b_hd256()
    assert (h.n_heads, h.head_dim) == (16, 256)
    assert count_params(h) == count_params(olmo3_7b())
    assert flops_per_token(h, 8192) == flops_per_token(olmo3_7b(), 8192)


@pytest.mark.parametrize(
    "cfg",
    [
        olmo3_7b(),
        olmo3_32b(),
        olmo3_7b_hd256(),
        tiny(),
        olmo3_7b(rope_scaling=YarnConfig(), max_position_embeddings=65_536),
        tiny(rope_theta=1e4),
        tiny(rope_theta=1e4, sliding_rope_theta=2e4),
    ],
)
def test_hf_config_round_trip_and_transformers_reads_it(cfg):
    d = to_hf_config(cfg)
    assert from_hf_config(d) == cfg
    hf = Olmo3Config(
        **{k: v for k, v in d.items() if k not in ("architectures", "model_type", "torch_dtype")}
    )
    assert (
        hf.vocab_size == cfg.vocab_size
        and hf.rms_norm_eps == cfg.rms_eps
        and hf.eos_token_id == cfg.eos_token_id
    )
    assert tuple(hf.layer_types) == cfg.layer_types and hf.sliding_window == cfg.sliding_window
    assert getattr(hf, "head_dim", hf.hidden_size // hf.num_attention_heads) == cfg.head_dim
    full, sliding = hf.rope_parameters[FULL], hf.rope_parameters[SLIDING]
    assert sliding["rope_type"] == "default" and sliding["rope_theta"] == cfg.theta(SLIDING)
    assert full["rope_type"] == ("default" if cfg.rope_scaling is None else "yarn")
    assert full["rope_theta"] == cfg.theta(FULL)
    assert from_hf_config(hf.to_dict()) == cfg


def test_nested_rope_parameters_are_read():
    d = to_hf_config(tiny())
    del d["rope_theta"], d["rope_scaling"]
    d["rope_parameters"] = {
        FULL: {
            "rope_type": "yarn",
            "factor": 8.0,
            "original_max_position_embeddings": 64,
            "rope_theta": 10_000.0,
        },
        SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
    }
    c = from_hf_config(d)
    assert c.rope_theta == 10_000 and c.rope_scaling == YarnConfig(
        factor=8.0, original_max_position_embeddings=64
    )
    d["rope_parameters"][SLIDING] = dict(d["rope_parameters"][FULL])
    with pytest.raises(OlmaxError, match="full-attention layers only"):
        from_hf_config(d, where="x/config.json")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "llama"}, "model_type"),
        ({"tie_word_embeddings": True}, "untied"),
        ({"attention_bias": True}, "biases"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "rope_parameters": None}, "not supported"),
        ({"num_attention_heads": 5}, "multiple of n_kv_heads"),
    ],
)
def test_bad_configs_name_the_file(change, message):
    d = {**to_hf_config(tiny()), **change}
    with pytest.raises(OlmaxError, match=message) as e:
        from_hf_config(d, where="ckpt/config.json")
    assert "ckpt/config.json" in str(e.value)


def test_missing_keys_never_fall_back_to_hf_class_defaults():
    d = to_hf_config(olmo3_7b())
    del d["vocab_size"]
    with pytest.raises(OlmaxError, match="vocab_size"):
        from_hf_config(d)


def test_per_layer_type_theta_as_transformers_builds_it():
    # transformers 5 puts a legacy rope_theta kwarg on the full layers only; sliding keep 500,000
    hf = Olmo3Config(
        **{
            k: v
            for k, v in to_hf_config(tiny()).items()
            if k not in ("rope_parameters", "architectures", "model_type", "torch_dtype")
        }
        | {"rope_theta": 1e4}
    )
    c = from_hf_config(hf.to_dict())
    assert c.theta(FULL) == hf.rope_parameters[FULL]["rope_theta"]
    assert c.theta(SLIDING) == hf.rope_parameters[SLIDING]["rope_theta"]
