"""The tiktoken fast path gives exactly the `tokenizers` ids for dolma2, on varied text; fallbacks work."""

from __future__ import annotations

import json
import random

import pytest
from prepare_testdata import pydoc_texts, stdlib_texts

from olmax.assets import tokenizer_path
from olmax.data.tokenize import load_tokenizer
from olmax.errors import OlmaxError


@pytest.fixture(scope="module")
def dolma2_path() -> str:
    return str(tokenizer_path("dolma2", quiet=True))


def _tricky_texts(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = (
        "abcXYZ019 \t\n\r  'sll're_-.,;:!?()[]{}<>|/\\\"#@$%^&*~`+="
        "éüßçñøåæœ ЖжЯя αβγΩ 中文字 日本語 한국어 العربية עברית हिन्दी ไทย 🙂🚀👍🏽 \u200b\u00a0\u2028\ufeff"
    )
    texts = [
        "",
        " ",
        "  ",
        "\n",
        "\n\n\n",
        "\r\n\r\n",
        "\t\t  \n  \t",
        "x" * 5000,
        " " * 300 + "y",
        "12345678901234567890 3.14159 1,000,000 007",
        "I'm you'RE they'LL it'S WE'VE I'D",
        "a<|endoftext|>b <|pad|> <|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>",
        "<|extra_id_1|><|extra_id_10|><|endofprompt|>|||EMAIL_ADDRESS|||",
        "def f(x):\n    return x**2  # comment\n\n\n\tclass A: pass\n",
        "Ünïcödé ñörmålizätion is not applied: e\u0301 vs é; ﬁ ligature; full-width ＡＢＣ",
        "   leading and trailing spaces   ",
        "tabs\tbetween\twords\t\t\t",
        "mixed \r line \r\n endings \n\r",
    ]
    for _ in range(300):
        n = rng.randint(1, 400)
        texts.append("".join(rng.choice(alphabet) for _ in range(n)))
    for _ in range(100):  # random code points, surrogates excluded (not valid Unicode text)
        cps = [rng.randint(0x20, 0x2FFFF) for _ in range(rng.randint(1, 50))]
        texts.append("".join(chr(c) for c in cps if not 0xD800 <= c <= 0xDFFF))
    return texts


def test_dolma2_runs_on_tiktoken(dolma2_path):
    tok = load_tokenizer(dolma2_path)
    assert tok.engine == "tiktoken"
    assert (tok.vocab_size, tok.eos_token_id, tok.pad_token_id) == (100278, 100257, 100277)


def test_tiktoken_equals_tokenizers_on_varied_text(dolma2_path):
    from tokenizers import Tokenizer as HF

    fast = load_tokenizer(dolma2_path, engine="tiktoken")
    ref = HF.from_file(dolma2_path)
    texts = _tricky_texts() + [t for _, t in stdlib_texts(60)] + [t for _, t in pydoc_texts()]
    got = fast.encode_batch(texts, num_threads=2)
    want = [e.ids for e in ref.encode_batch(texts, add_special_tokens=False)]
    bad = [i for i in range(len(texts)) if got[i] != want[i]]
    assert not bad, f"{len(bad)} of {len(texts)} texts differ, first: {texts[bad[0]][:200]!r}"
    assert sum(map(len, want)) > 200_000  # a real amount of text was compared


def test_engines_agree_and_thread_count_does_not_matter(dolma2_path):
    texts = [t for _, t in stdlib_texts(8)]
    fast = load_tokenizer(dolma2_path, engine="tiktoken")
    slow = load_tokenizer(dolma2_path, engine="tokenizers")
    assert slow.engine == "tokenizers"
    assert fast.encode_batch(texts, 1) == fast.encode_batch(texts, 2) == slow.encode_batch(texts)


def test_unrepresentable_tokenizer_falls_back(dolma2_path, tmp_path):
    spec = json.loads(open(dolma2_path).read())
    spec["normalizer"] = {"type": "Lowercase"}
    path = tmp_path / "lower.json"
    path.write_text(json.dumps(spec))
    tok = load_tokenizer(str(path))
    assert tok.engine == "tokenizers"
    assert tok.encode_batch(["HELLO"]) == load_tokenizer(dolma2_path).encode_batch(["hello"])
    with pytest.raises(OlmaxError, match="cannot run on tiktoken exactly: has a normalizer"):
        load_tokenizer(str(path), engine="tiktoken")


def test_not_a_tokenizer_is_a_clear_error(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text("{not json")
    with pytest.raises(OlmaxError, match="is not a tokenizer.json"):
        load_tokenizer(str(bad))
