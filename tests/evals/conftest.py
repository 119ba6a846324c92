"""Shared fixtures: a small byte-level BPE tokenizer (ids < 1000) and a random tiny HF OLMo 3 checkpoint."""

import jax
import pytest

from tests.evals.tokenizer_testdata import make_tokenizer

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.fixture(scope="session")
def tokenizer(tokenizer_file):
    from olmax.data.tokenize import load_tokenizer

    return load_tokenizer(str(tokenizer_file))


@pytest.fixture(scope="session")
def hf_checkpoint(tmp_path_factory, tokenizer_file):
    """A random 4-layer Olmo3ForCausalLM (vocab 1000, window 16) with the test tokenizer alongside."""
    import shutil

    from olmax.model.hf_reference import save_random_checkpoint

    path = save_random_checkpoint(tmp_path_factory.mktemp("ck") / "hf", seed=3)
    shutil.copyfile(tokenizer_file, path / "tokenizer.json")
    return path


@pytest.fixture(scope="session")
def model(hf_checkpoint):
    from olmax.model import from_hf

    return from_hf(hf_checkpoint)
