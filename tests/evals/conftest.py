"""Shared fixtures: a small byte-level BPE tokenizer (ids < 1000) and a random tiny HF OLMo 3 checkpoint."""

import jax
import pytest

jax.config.update("jax_numpy_rank_promotion", "raise")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "Question: Who proposed the theory of evolution by natural selection?\nAnswer: Darwin",
    "Ünïcödé text — with em dashes, naïve cafés and 数字 to exercise multi-byte UTF-8.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
] * 4


def make_tokenizer(path, vocab_size: int = 400):
    """Train a byte-level BPE with <|endoftext|> and <|pad|> and save it as tokenizer.json at `path`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.save(str(path))
    return path


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
