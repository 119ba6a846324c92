"""HF <-> olmax conversion: bit-exact round trips (fp32, bf16, sharded), transformers loads the output,
bad inputs raise OlmaxError naming the file, and outputs appear atomically."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from safetensors.numpy import load_file
from transformers import Olmo3ForCausalLM

from olmax.errors import OlmaxError
from olmax.model.convert import from_hf, load_olmax, save_olmax, to_hf
from olmax.model.hf_reference import save_random_checkpoint
from olmax.model.model_config import tiny
from olmax.model.safetensors_io import SafetensorsReader
from olmax.model.transformer import init_model

jax.config.update("jax_numpy_rank_promotion", "raise")
YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32}


def hf_weights(path):
    return {k: v for k, v in Olmo3ForCausalLM.from_pretrained(str(path)).state_dict().items()}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_round_trip_is_bit_exact_and_loads_in_transformers(tmp_path, dtype):
    src = save_random_checkpoint(
        tmp_path / "src", seed=1, dtype=dtype, num_hidden_layers=5, rope_scaling=dict(YARN)
    )
    model = from_hf(src)
    assert model.cfg.hf_dtype == dtype and model.embed.dtype == jnp.float32
    out = to_hf(model, tmp_path / "out")
    a, b = SafetensorsReader(src), SafetensorsReader(out)
    assert a.names() == b.names()
    for name in a.names():
        assert a.dtype(name) == b.dtype(name)
        assert a.get(name).tobytes() == b.get(name).tobytes(), name
    ref, back = hf_weights(src), hf_weights(out)
    assert ref.keys() == back.keys()
    for k in ref:
        assert torch.equal(ref[k], back[k]), k
    loaded = Olmo3ForCausalLM.from_pretrained(str(out))
    assert loaded.config.rope_parameters["full_attention"]["rope_type"] == "yarn"
    assert loaded.config.rope_parameters["sliding_attention"]["rope_type"] == "default"
    assert loaded.config.layer_types == Olmo3ForCausalLM.from_pretrained(str(src)).config.layer_types


def test_sharded_write_reads_back(tmp_path):
    # an HF checkpoint holds the real vocabulary only: with zero padding rows the round trip is exact
    model = init_model(tiny(vocab_padding="zero"), seed=2)
    out = to_hf(model, tmp_path / "sharded", max_shard_bytes=100_000)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    again = from_hf(out)
    for x, y in zip(jax.tree.leaves(nnx.state(model)), jax.tree.leaves(nnx.state(again))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # the safetensors library reads what we wrote
    first = sorted(set(index["weight_map"].values()))[0]
    assert load_file(out / first)


def test_olmax_checkpoint_round_trip(tmp_path):
    model = init_model(tiny(n_layers=5), seed=3)
    save_olmax(model, tmp_path / "ck")
    again = load_olmax(tmp_path / "ck")
    assert again.cfg == model.cfg
    for x, y in zip(jax.tree.leaves(nnx.state(model)), jax.tree.leaves(nnx.state(again))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_missing_config_names_the_file(tmp_path):
    with pytest.raises(OlmaxError, match="config.json"):
        from_hf(tmp_path)


def test_hf_class_defaults_are_not_filled_in(tmp_path):
    src = save_random_checkpoint(tmp_path / "src")
    cfg = json.loads((src / "config.json").read_text())
    del cfg["vocab_size"]
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(OlmaxError, match="vocab_size"):
        from_hf(src)


def test_shape_mismatch_and_missing_tensor(tmp_path):
    src = save_random_checkpoint(tmp_path / "src")
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 128}))
    with pytest.raises(OlmaxError, match="gate_proj.weight has shape"):
        from_hf(src)
    (src / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 5}))
    with pytest.raises(OlmaxError, match="config.json: layer_types has 4 entries"):
        from_hf(src)
    del cfg["layer_types"]
    (src / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 5}))
    with pytest.raises(OlmaxError, match="model.layers.4"):
        from_hf(src)


def test_truncated_safetensors_is_reported(tmp_path):
    src = save_random_checkpoint(tmp_path / "src")
    f = src / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-1000])
    with pytest.raises(OlmaxError, match="truncated"):
        from_hf(src)


def test_output_is_atomic_and_never_overwrites(tmp_path):
    model = init_model(tiny(), seed=4)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("x")
    with pytest.raises(OlmaxError, match="already exists"):
        to_hf(model, tmp_path / "busy")
    with pytest.raises(OlmaxError):
        to_hf(model, tmp_path / "bad", dtype="int8")
    bad_model = init_model(tiny(), seed=4)
    bad_model.lm_head = nnx.Param(jnp.zeros((3, 3)))  # fails mid-write
    with pytest.raises(ValueError):
        to_hf(bad_model, tmp_path / "half")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]
