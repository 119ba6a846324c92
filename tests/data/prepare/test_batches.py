"""Prepare's batches: EOS after each document as `np.insert` puts it, by either of `with_eos`' two ways; each
text's UTF-8 size as `str.encode` gives it, a lone surrogate refused with its position."""

from __future__ import annotations

import random

import numpy as np
import pytest

from olmax.data.prepare.batches import utf8_length, with_eos
from olmax.data.readers import Doc
from olmax.errors import OlmaxError


@pytest.mark.parametrize("longest", [3, 60, 5000])  # short documents (np.insert), long ones (a slice each)
def test_with_eos_equals_np_insert(longest):
    rng = np.random.default_rng(longest)
    for _ in range(200):
        n = int(rng.integers(0, 30))
        lengths = rng.integers(0, longest + 1, n)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        ids = rng.integers(0, 100_000, int(offsets[-1])).astype(np.uint32)
        add = rng.random(n) < 0.8
        want = np.insert(ids, offsets[1:][add], np.uint32(100257))
        got = with_eos(ids, offsets, add, 100257)
        assert got.dtype == np.uint32 and np.array_equal(got, want)


# code points of each width CPython stores a str in (1, 2 and 4 bytes a character) and of each UTF-8 length
ALPHABET = "az \n\t\u00e9\u00ff\u0394\u4e2d\uffef\U0001f600\U00010348"


def test_utf8_length_is_the_size_of_the_encoded_text():
    rng = random.Random(7)
    for n in range(2000):
        text = "".join(rng.choice(ALPHABET[: 3 + n % len(ALPHABET)]) for _ in range(rng.randrange(0, 300)))
        assert utf8_length(text, Doc("d", text, "f.jsonl", 1)) == len(text.encode("utf-8")), ascii(text)


@pytest.mark.parametrize("before", ["", "abc", "caf\u00e9 ", "\u4e2d\u6587", "\U0001f600 x"])
def test_a_lone_surrogate_is_refused_naming_the_document_and_the_character(before):
    text = before + "\udc80 and after"
    with pytest.raises(OlmaxError) as e:
        utf8_length(text, Doc("doc-9", text, "in.jsonl", 12))
    assert str(e.value) == (
        f"in.jsonl:12: document 'doc-9' holds a lone surrogate escape at character {len(before)} "
        "(not valid Unicode); fix the escape in the JSON"
    )
