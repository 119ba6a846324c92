"""Every tokenizer engine gives exactly the `tokenizers` ids for dolma2 on every kind of text prepare sees;
`auto` takes the fastest exact one and never one that disagrees."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from olmax.assets import tokenizer_path
from olmax.data.tokenize import ENGINES, load_tokenizer
from olmax.errors import OlmaxError
from olmax.testing.prepare_testdata import pydoc_texts, stdlib_texts


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


def _hard_texts() -> list[str]:
    """Long words, whitespace runs, scripts and emoji at sizes beyond the probe set's."""
    return [
        "x" * 200_000,
        "supercalifragilisticexpialidocious" * 3000,
        " " * 100_000,
        "\n" * 50_000 + "end",
        "\t \n" * 20_000,
        "ab" * 100_000,
        "9" * 100_000,
        "😀" * 20_000,
        "中" * 30_000,
        "👨\u200d👩\u200d👧\u200d👦" * 2000,
        "Привет мир " * 5000 + "مرحبا بالعالم " * 5000 + "नमस्ते दुनिया " * 5000,
        "<|endoftext|>" * 3000 + "|||EMAIL_ADDRESS|||x<|pad|>y" * 1000,
        "<|endoftext" * 2000 + "<|<|endoftext|>|>",
    ]


def _eval_texts(per_set: int = 400) -> list[str]:
    """Every string field of the first records of each bundled eval set, one text per record."""
    from olmax.assets import EVAL_SETS, eval_set_path
    from olmax.evalsets.read import read_eval_rows

    texts = []
    for name in sorted(EVAL_SETS):
        for row in read_eval_rows(str(eval_set_path(name, quiet=True)), limit=per_set):
            strings = [v for v in row.record.values() if isinstance(v, str)]
            strings += [
                x for v in row.record.values() if isinstance(v, list) for x in v if isinstance(x, str)
            ]
            texts.append("\n".join(strings))
    return texts


def _all_kinds() -> dict[str, list[str]]:
    return {
        "stdlib code": [t for _, t in stdlib_texts(80)],
        "pydoc prose": [t for _, t in pydoc_texts()],
        "eval sets": _eval_texts(),
        "random mixtures and code points": _tricky_texts(),
        "long words and whitespace runs": _hard_texts(),
    }


@pytest.fixture(scope="module")
def reference(dolma2_path):
    from tokenizers import Tokenizer as HF

    ref = HF.from_file(dolma2_path)
    kinds = _all_kinds()
    return kinds, {
        k: [e.ids for e in ref.encode_batch(v, add_special_tokens=False)] for k, v in kinds.items()
    }


def test_auto_takes_gigatoken_for_dolma2_and_says_why(dolma2_path):
    tok = load_tokenizer(dolma2_path)
    assert tok.engine == "gigatoken"
    assert tok.engine_reason.startswith(f"gigatoken {tok.engine_version}, the fastest exact engine installed")
    assert "on all 250 probe texts" in tok.engine_reason
    assert (tok.vocab_size, tok.eos_token_id, tok.pad_token_id) == (100278, 100257, 100277)


@pytest.mark.parametrize("engine", [e for e in ENGINES if e != "tokenizers"])
def test_engine_equals_tokenizers_on_every_kind_of_text(dolma2_path, reference, engine):
    kinds, want = reference
    tok = load_tokenizer(dolma2_path, engine=engine)
    assert tok.engine == engine
    for kind, texts in kinds.items():
        ids, offsets = tok.encode_flat(texts)
        flat = [ids[offsets[i] : offsets[i + 1]].tolist() for i in range(len(texts))]
        bad = [i for i in range(len(texts)) if flat[i] != want[kind][i]]
        assert not bad, f"{engine}, {kind}: {len(bad)} of {len(texts)} differ, first {texts[bad[0]][:80]!r}"
        assert tok.encode_batch(texts, num_threads=2) == want[kind], f"{engine}, {kind}: encode_batch"
        assert ids.dtype == np.uint32 and offsets[-1] == ids.size
        # the same texts as UTF-8 back to back (what prepare's compiled reader hands the engine)
        utf8 = [t.encode("utf-8") for t in texts]
        bounds = np.cumsum([0] + [len(u) for u in utf8])
        got_ids, got_offsets = tok.encode_utf8(b"".join(utf8), bounds)
        assert np.array_equal(got_ids, ids) and np.array_equal(got_offsets, offsets), (
            f"{engine}, {kind}: utf8"
        )
        # with EOS's text written after each: each text's ids, then EOS
        assert tok.eos_text == "<|endoftext|>"
        eos = tok.eos_text.encode()
        bounds = np.cumsum([0] + [len(u) + len(eos) for u in utf8])
        got_ids, got_offsets = tok.encode_utf8(b"".join(u + eos for u in utf8), bounds)
        split = [got_ids[got_offsets[i] : got_offsets[i + 1]].tolist() for i in range(len(texts))]
        assert split == [w + [tok.eos_token_id] for w in want[kind]], f"{engine}, {kind}: EOS as text"
    assert sum(len(w) for v in want.values() for w in v) > 1_400_000  # a real amount of text was compared
    assert len(kinds["eval sets"]) > 4000


@pytest.mark.parametrize(
    "change,why",
    [
        ({"lstrip": True}, "EOS takes the whitespace before it"),
        ({"normalized": True}, "EOS matched after normalization"),
        ({"special": False}, "EOS not special"),
    ],
)
def test_eos_is_written_as_text_only_where_that_gives_eos(dolma2_path, tmp_path, change, why):
    """`eos_text` (prepare writes it after each text instead of inserting EOS among the ids) only for an EOS
    token matched as written that no other added token can run into; else None and EOS is inserted."""
    spec = json.loads(open(dolma2_path).read())
    for t in spec["added_tokens"]:
        if t["id"] == 100257:
            t.update(change)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(spec))
    assert load_tokenizer(str(path)).eos_text is None, why
    spec = json.loads(open(dolma2_path).read())
    spec["added_tokens"].append({**spec["added_tokens"][0], "id": 100400, "content": "x<|endof"})
    path.write_text(json.dumps(spec))
    assert load_tokenizer(str(path)).eos_text is None  # a text ending in "x" would run into EOS's text


@pytest.mark.parametrize("engine", ENGINES)
def test_lone_surrogates_are_refused_by_every_engine(dolma2_path, engine):
    tok = load_tokenizer(dolma2_path, engine=engine)
    for text in ("a\ud800b", "\udcff", "ok", "x\udfff"):
        batch = ["fine", text]
        if text == "ok":
            assert tok.encode_batch(batch) == [[63157], [564]]
            continue
        with pytest.raises(OlmaxError, match="text 1 of the batch holds a lone surrogate"):
            tok.encode_flat(batch)
        with pytest.raises(OlmaxError, match="lone surrogate"):
            tok.encode_batch(batch)


def test_an_engine_that_disagrees_on_the_probe_is_not_used(dolma2_path, monkeypatch):
    from olmax.data import tokenize

    real = tokenize._GigatokenEngine.encode

    def off_by_one(self, texts, threads=1):  # wrong on one text only: "anywhere" must be enough
        out = [list(x) for x in real(self, texts, threads)]
        n = next(i for i, t in enumerate(texts) if "Привет" in t)
        out[n][0] += 1
        return out

    monkeypatch.setattr(tokenize._GigatokenEngine, "encode", off_by_one)
    tok = load_tokenizer(dolma2_path)
    assert tok.engine == "tiktoken"
    assert "not used: gigatoken: differs from tokenizers on probe text" in tok.engine_reason
    with pytest.raises(OlmaxError, match="cannot run exactly on engine 'gigatoken': differs from tokenizers"):
        load_tokenizer(dolma2_path, engine="gigatoken")


def test_unrepresentable_tokenizer_falls_back(dolma2_path, tmp_path):
    spec = json.loads(open(dolma2_path).read())
    spec["normalizer"] = {"type": "Lowercase"}
    path = tmp_path / "lower.json"
    path.write_text(json.dumps(spec))
    tok = load_tokenizer(str(path))
    assert tok.engine == "tokenizers"
    assert "not used: gigatoken: cannot load this tokenizer.json (RuntimeError: Unsupported normalizer" in (
        tok.engine_reason
    )
    assert tok.engine_reason.endswith("; tiktoken: has a normalizer")
    assert tok.encode_batch(["HELLO"]) == load_tokenizer(dolma2_path).encode_batch(["hello"])
    with pytest.raises(OlmaxError, match="cannot run exactly on engine 'tiktoken': has a normalizer"):
        load_tokenizer(str(path), engine="tiktoken")


def test_a_missing_engine_is_skipped(dolma2_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_gigatoken(name, *args, **kwargs):
        if name == "gigatoken":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_gigatoken)
    tok = load_tokenizer(dolma2_path)
    assert tok.engine == "tiktoken"
    assert "not used: gigatoken: not installed" in tok.engine_reason


def test_not_a_tokenizer_is_a_clear_error(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text("{not json")
    with pytest.raises(OlmaxError, match="is not a tokenizer.json"):
        load_tokenizer(str(bad))


def test_unknown_engine_is_a_clear_error(dolma2_path):
    with pytest.raises(OlmaxError, match="unknown tokenizer engine 'fast'; choose auto, gigatoken"):
        load_tokenizer(dolma2_path, engine="fast")
