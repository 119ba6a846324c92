"""A small byte-level BPE tokenizer (ids < 400 by default), trained here on a few lines of mixed text: the
evals tests' tokenizer, and the trainer tests' where a run's in-loop evals need one."""

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
