"""The probe set: short texts of every kind prepare sees, on which an engine must give `tokenizers`' ids.

`load_tokenizer` encodes these with `tokenizers` and with each candidate engine (a few milliseconds) and
uses an engine only when every id agrees. The texts are the hard cases of byte-level BPE pre-tokenization:
code, prose, scripts without spaces, combining marks, ZWJ emoji, fullwidth and mathematical letters,
zero-width and control characters, digit runs, contractions in any case, whitespace runs before a word and at
the end, long repeated words, and every added token of the tokenizer.json written inside a text (alone,
twice, glued to words, cut short). tests/data/test_tokenize.py checks the engines on much more real text.
"""

from __future__ import annotations

import random

_FIXED = (
    "",
    " ",
    "  ",
    "\n",
    "\n\n\n",
    "\r\n\r\n",
    "\t\t  \n  \t",
    " " * 300 + "y",
    " " * 257,
    "\n" * 129 + "x",
    "x" * 3000,
    "ab" * 1500,
    "9" * 400 + " 12345678901234567890 3.14159 1,000,000 007 ١٢٣ ४५६ ５６",
    "supercalifragilisticexpialidocious" * 40,
    "I'm you'RE they'LL it'S WE'VE I'D 's 'S 'll'll ''s 'Ve",
    "def f(x):\n    return x**2  # comment\n\n\n\tclass A: pass\n    \n",
    "if (a<=b && c!=d) { x->y[i] ^= ~0x7F; } // done\r\n",
    'print(f"{x!r:>10}")  # type: ignore[attr-defined]\n\n',
    "   leading and trailing spaces   ",
    "tabs\tbetween\twords\t\t\t",
    "mixed \r line \r\n endings \n\r",
    "The quick brown fox jumps over the lazy dog. Don't stop; it's 5 o'clock!",
    "Ünïcödé: e\u0301 vs é; ﬁ ligature; full-width ＡＢＣ ｈｅｌｌｏ; 𝐀𝐁𝐂 𝕏𝕐 𝓗𝓮𝓵𝓵𝓸",
    "👨\u200d👩\u200d👧\u200d👦 🏳️\u200d🌈 👩🏽\u200d💻 🇺🇸🇯🇵 ❤️ ☺︎ 🙂🚀👍🏽",
    "zero\u200bwidth\u200c\u200djoin\u2060er\ufeff nbsp\u00a0here\u2028\u2029\x85\x0b\x0c",
    "\x00\x01\x02\x7f control \x1b[31m red \x1b[0m",
    "Привет мир! Съешь же ещё этих мягких французских булок",
    "مرحبا بالعالم، هذا نص عربي.",
    "नमस्ते दुनिया, यह हिन्दी है।",
    "こんにちは世界。カタカナ、ひらがな、漢字。",
    "你好，世界！这是中文文本，没有空格。",
    "안녕하세요 세계, 한국어 문장입니다.",
    "שלום עולם, זה טקסט בעברית.",
    "สวัสดีชาวโลก นี่คือภาษาไทย",
    "Ελληνικά: αβγ ΑΒΓ; Türkçe: İıŞş; Tiếng Việt: ắằẳẵặ",
)

_ALPHABET = (
    "abcXYZ019 \t\n\r  'sll're_-.,;:!?()[]{}<>|/\\\"#@$%^&*~`+="
    "éüßçñøåæœ ЖжЯя αβγΩ 中文字 日本語 한국어 العربية עברית हिन्दी ไทย 🙂🚀👍🏽 \u200b\u00a0\u2028\ufeff"
)


def probe_texts(added_tokens: list[str], seed: int = 0) -> list[str]:
    """The probe set for a tokenizer whose added tokens are `added_tokens` (their contents)."""
    texts = list(_FIXED)
    for tok in added_tokens:
        texts += [tok, f"a{tok}b", f" {tok} ", f"{tok}{tok}", f"x {tok}\n", tok[:-1], tok[1:]]
    texts.append("".join(added_tokens))
    rng = random.Random(seed)
    pieces = list(_ALPHABET) + list(_FIXED[20:]) + added_tokens
    for _ in range(40):  # random mixtures: the boundaries between kinds
        texts.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 60))))
    for _ in range(20):  # random code points of every plane (surrogates are not text)
        cps = (rng.randint(0x20, 0x10FFFF) for _ in range(rng.randint(1, 40)))
        texts.append("".join(chr(c) for c in cps if not 0xD800 <= c <= 0xDFFF))
    return texts
