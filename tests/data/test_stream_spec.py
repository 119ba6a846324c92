"""StreamSpec's special token ids: dolma2's by default (as OLMo-core's TokenizerConfig.dolma2()), part of
the spec's equality and of a recipe's `data` section, and what the loader's index uses."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from olmax.data.loader import stream_index
from olmax.data.stream import StreamSpec
from olmax.data.tokenfile import write_tokens
from olmax.errors import OlmaxError
from olmax.train.config import ExperimentConfig, dump_yaml, from_dict


def test_the_default_ids_are_olmo_cores_dolma2():
    olmo_core = pytest.importorskip("olmo_core.data")
    tok = olmo_core.TokenizerConfig.dolma2()
    spec = StreamSpec()
    assert (spec.eos_token_id, spec.pad_token_id, spec.bos_token_id) == (
        tok.eos_token_id,
        tok.pad_token_id,
        tok.bos_token_id,
    )


def test_ids_are_part_of_equality_and_of_the_recipe():
    a = StreamSpec(mix="m.txt")
    assert a == StreamSpec(mix="m.txt")
    assert (
        a != a.replace(eos_token_id=7) and a != a.replace(bos_token_id=1) and a != a.replace(pad_token_id=2)
    )
    cfg = ExperimentConfig(data=a.replace(eos_token_id=7, pad_token_id=8, bos_token_id=9))
    raw = yaml.safe_load(dump_yaml(cfg))
    assert {k: raw["data"][k] for k in ("eos_token_id", "pad_token_id", "bos_token_id")} == {
        "eos_token_id": 7,
        "pad_token_id": 8,
        "bos_token_id": 9,
    }
    assert from_dict(raw).data == cfg.data
    # a recipe written before the ids existed reads as dolma2's
    del raw["data"]["eos_token_id"], raw["data"]["pad_token_id"], raw["data"]["bos_token_id"]
    assert from_dict(raw).data == dataclasses.replace(
        cfg.data, eos_token_id=100257, pad_token_id=100277, bos_token_id=None
    )


def test_the_index_fingerprint_follows_the_streams_ids(tmp_path):
    """OLMo-core's fingerprint hashes the special ids: a stream with other ids is another dataset."""
    write_tokens(tmp_path / "a.npy", np.arange(64, dtype=np.uint32))
    (tmp_path / "mix.txt").write_text("a,a.npy\n")
    spec = StreamSpec(mix=str(tmp_path / "mix.txt"), seq_len=8, global_batch_size=2)
    base = stream_index(spec).fingerprint
    assert stream_index(spec.replace()).fingerprint == base
    assert stream_index(spec.replace(eos_token_id=5)).fingerprint != base
    assert stream_index(spec.replace(eos_token_id=5), eos_token_id=spec.eos_token_id).fingerprint == base


def test_a_bad_setting_names_the_flag_and_the_key():
    with pytest.raises(OlmaxError, match=r"--seq-len \(data.seq_len\) must be positive"):
        StreamSpec(seq_len=0)
    with pytest.raises(OlmaxError, match=r"data.dtype 'int8'"):
        StreamSpec(dtype="int8")
