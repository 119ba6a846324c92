"""`olmax model info|convert`: printed numbers, both conversion directions, errors exit 2."""

import jax
import numpy as np
from flax import nnx
from safetensors.numpy import load_file

from olmax.cli import main
from olmax.model.convert import load_olmax
from olmax.model.hf_reference import save_random_checkpoint

jax.config.update("jax_numpy_rank_promotion", "raise")


def test_info_prints_params_and_flops(capsys):
    assert main(["model", "info", "olmo3_7b"]) == 0
    out = capsys.readouterr().out
    assert "7,298,011,136" in out and "15,518,482,432" in out
    assert main(["model", "info", "gpt2"]) == 2
    assert "unknown preset" in capsys.readouterr().err


def test_convert_hf_to_olmax_to_hf_is_bit_exact(tmp_path):
    src = save_random_checkpoint(tmp_path / "hf", seed=2, dtype="bfloat16")
    (src / "tokenizer.json").write_text("{}")
    assert main(["model", "convert", "--to", "olmax", str(src), str(tmp_path / "ox")]) == 0
    model = load_olmax(tmp_path / "ox")
    assert all(np.asarray(x).dtype == np.float32 for x in jax.tree.leaves(nnx.state(model)))
    assert main(["model", "convert", "--to", "hf", str(tmp_path / "ox"), str(tmp_path / "back")]) == 0
    a, b = load_file(src / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)
    assert main(["model", "convert", "--to", "hf", str(src), str(tmp_path / "copy")]) == 0
    assert (tmp_path / "copy" / "tokenizer.json").read_text() == "{}"


def test_convert_errors_exit_2(tmp_path, capsys):
    assert main(["model", "convert", "--to", "hf", str(tmp_path), str(tmp_path / "o")]) == 2
    assert "not a training run folder" in capsys.readouterr().err
